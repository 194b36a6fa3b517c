"""The walk of one answer through the package: from the response headers to its request event.

Issue 40 measured how often following one answer makes a reader go back to a file already read: each
answer form (float JSON, base64, vLLM's `bytes` with its metadata, `bytes_only`, a token-level `bytes`,
TEI's headers, KServe's binary tensors) is sent once to the bundled mock to warm up, then once under a
profiler that records every Python frame entered or left. The frames of poolbench_locust's own files
between the return of engine/transport.py's `send` (the headers are in) and the first listener of the
request event make a sequence of files; a visit is a run of one file in it, a return a visit to a file
visited before. Prints a table and the sequence of the first form; needs no option.

    python bench/answer_walk.py
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from locust.argument_parser import get_parser
from locust.env import Environment

import poolbench_locust as pb
import poolbench_locust.plugin
from bench.common import Mock, table

PACKAGE = str(Path(pb.__file__).resolve().parent) + "/"

FORMS: list[tuple[str, type, tuple[str, ...], tuple[str, ...]]] = [
    # (form, User class, options, the mock's flags)
    ("float JSON", pb.EmbeddingsUser, ("--batch-size", "4"), ()),
    ("base64 JSON", pb.EmbeddingsUser, ("--batch-size", "4", "--encoding-format", "base64"), ()),
    ("bytes (metadata)", pb.EmbeddingsUser, ("--batch-size", "4", "--encoding-format", "bytes"), ()),
    ("bytes_only", pb.EmbeddingsUser, ("--batch-size", "4", "--encoding-format", "bytes_only"), ()),
    (
        "token-level bytes",
        pb.PoolingUser,
        ("--batch-size", "4", "--encoding-format", "bytes", "--pooling-task", "token_embed"),
        ("--task", "token_embed"),
    ),
    ("TEI headers", pb.TEIEmbedUser, ("--batch-size", "4"), ("--flavor", "tei")),
    (
        "KServe binary",
        pb.KServeInferUser,
        ("--batch-size", "4", "--encoding-format", "bytes", "--model", "m"),
        ("--flavor", "kserve"),
    ),
]


STEPS = ("engine/", "endpoints/")
"""The request path's own modules (docs/architecture.md, "The request path"): the steps of the walk. A call into
the base layer or the options (lazyjson, Settings' properties, ...) is a tool the step uses, as orjson is."""


class Walk:
    """The files of the package entered, in order, between the headers and the event: every file (`files`),
    and the request path's steps (`steps`: its modules, the reading of the body one step, whatever the
    parser calls back while body.py reads)."""

    def __init__(self) -> None:
        self.on = False
        self.files: list[str] = []
        self.steps: list[str] = []
        self.entries: list[str] = []
        """The request path's modules each time a call entered one from another file: what a reader opens."""
        self._reading = 0

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        code = frame.f_code
        path = code.co_filename
        if event == "return" and code.co_name == "send" and path.endswith("engine/transport.py"):
            self.on = True  # the response headers are in
            return
        if not self.on:
            return
        # where the interpreter is after this event: the frame called, or the one returned to
        where = path if event == "call" else (frame.f_back.f_code.co_filename if frame.f_back else "")
        if not where.startswith(PACKAGE):
            return
        name = where.removeprefix(PACKAGE)
        if not self.files or self.files[-1] != name:
            self.files.append(name)
        if self._reading == 0 and name.startswith(STEPS) and (not self.steps or self.steps[-1] != name):
            self.steps.append(name)
        caller = frame.f_back.f_code.co_filename if frame.f_back else ""
        if event == "call" and self._reading == 0 and name.startswith(STEPS) and caller != path:
            self.entries.append(name)
        if code.co_name == "read_body" and path.endswith("engine/body.py"):
            self._reading += 1 if event == "call" else -1

    def stop(self, **_: Any) -> None:
        self.on = False


def walk(user_class: type, host: str, args: tuple[str, ...]) -> tuple[Walk, Any]:
    user_class = type(user_class.__name__, (user_class,), {"host": host})
    env = Environment(user_classes=[user_class], host=host, parsed_options=get_parser().parse_args(list(args)))
    recorder = Walk()
    events: list[dict[str, Any]] = []
    env.events.request.add_listener(recorder.stop)  # the first listener: the walk ends where the event begins
    env.events.request.add_listener(lambda **event: events.append(event))
    user = user_class(env)
    user.send()  # warm: the connection made, the lazy imports done, a bytes_only dimension learned
    sys.setprofile(recorder.profile)
    try:
        user.send()
    finally:
        sys.setprofile(None)
    return recorder, events[-1]["exception"]


def main() -> None:
    rows = []
    first: Walk | None = None
    for form, user_class, args, flags in FORMS:
        with Mock(*flags) as mock:
            recorded, exception = walk(user_class, mock.url, args)
        if exception is not None:
            raise SystemExit(f"{form}: the request failed: {exception}")
        row = [form]
        for files in (recorded.files, recorded.steps, recorded.entries):
            visits = Counter(files)
            most = ", ".join(f"{name} {n}" for name, n in visits.most_common(2))
            row += [f"{len(visits)} / {len(files)} / {len(files) - len(visits)}", most]
        rows.append(row)
        first = first or recorded
    print(
        "files / visits / returns: a visit is a run of one file in the walk, a return a visit to a file visited before"
    )
    print(
        table(
            ["answer form", "every file", "most visited", "the path's steps", "most visited", "calls into", "most"],
            rows,
        )
    )
    print("calls into: files / calls entering one of the path's files from another / calls into a file entered before")
    assert first is not None
    print("\nfloat JSON, every file:", " > ".join(first.files))
    print("float JSON, its steps:", " > ".join(first.steps))
    print("float JSON, calls into:", " > ".join(first.entries))


if __name__ == "__main__":
    main()
