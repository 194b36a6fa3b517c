"""The readers considered for float JSON answers (issue 22): CPU per answer, in this one process.

    python bench/json_readers.py [--seconds 0.5]

Each reader counts the embeddings of a /v1/embeddings answer and each one's dimension, as the checks
need; every reader but `regex` validates the whole body. lazyjson is measured with its C pass
(_jsonscan, issue 33) and without it (simdjson alone, as where no compiler built it). Answers: the
mock's (numbers such as -0.4921875) and float32 values as vLLM writes them (Python's repr, about 20
characters), large (64 x 1,024), medium (8 x 1,024) and small (1 x 384). msgspec is measured when it
is installed (it is no dependency).
"""

from __future__ import annotations

import argparse
import random
import re
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

if __package__ in (None, ""):  # run as `python bench/json_readers.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import machine_line, table
from poolbench_locust import lazyjson


def answer(batch: int, dims: int, vllm_like: bool) -> bytes:
    rng = random.Random(1)
    if vllm_like:  # float32 values, written as Python writes the floats they widen to
        vector = [struct.unpack("f", struct.pack("f", rng.gauss(0, 0.03)))[0] for _ in range(dims)]
    else:
        vector = [(2 * (k % 64) - 63) / 128 for k in range(dims)]
    data = [{"index": i, "object": "embedding", "embedding": vector} for i in range(batch)]
    usage = {"prompt_tokens": 17 * batch, "total_tokens": 17 * batch}
    return orjson.dumps({"id": "embd-1", "object": "list", "created": 1, "model": "m", "data": data, "usage": usage})


def by_orjson(body: bytes) -> list[int]:
    return [len(item["embedding"]) for item in orjson.loads(body)["data"]]


def by_lazyjson(body: bytes) -> list[int]:
    return [len(item["embedding"]) for item in lazyjson.loads(body)["data"]]


def by_simdjson(body: bytes) -> list[int]:
    """lazyjson as it reads without its C pass (an install without a compiler): simdjson's tape."""
    scan, lazyjson._scan = lazyjson._scan, None
    try:
        return by_lazyjson(body)
    finally:
        lazyjson._scan = scan


_NUMBER = rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_VECTOR = re.compile(rb"\[" + _NUMBER + rb"(?:," + _NUMBER + rb")*\]")
_KEY = b'"embedding":'


def by_regex(body: bytes) -> list[int]:
    """A validated scan of the vectors alone (the rest of the body would still need a parser)."""
    dims, at = [], 0
    while (start := body.find(_KEY, at)) >= 0:
        if (match := _VECTOR.match(body, start + len(_KEY))) is None:
            raise ValueError("not a vector")
        dims.append(body.count(b",", match.start(), match.end()) + 1)
        at = match.end()
    return dims


def msgspec_reader() -> Callable[[bytes], list[int]] | None:
    try:
        import msgspec
    except ImportError:
        return None

    # defstruct, not class bodies: under `from __future__ import annotations` msgspec cannot see local classes
    item = msgspec.defstruct("Item", [("embedding", msgspec.Raw, msgspec.Raw(b"null"))])
    doc = msgspec.defstruct("Doc", [("data", list[item]), ("usage", Any, None)])  # type: ignore[valid-type]
    decoder = msgspec.json.Decoder(doc)

    def read(body: bytes) -> list[int]:  # msgspec validates a Raw field's JSON as it skips it
        return [bytes(item.embedding).count(b",") + 1 for item in decoder.decode(body).data]

    return read


def cpu_ms(read: Callable[[bytes], Any], body: bytes, seconds: float) -> float:
    read(body)
    runs, started = 0, time.process_time()
    while time.process_time() - started < seconds:
        read(body)
        runs += 1
    return 1000 * (time.process_time() - started) / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="CPU time spent on each reader and answer")
    args = parser.parse_args()
    readers: dict[str, Callable[[bytes], Any]] = {"orjson.loads (main)": by_orjson, "lazyjson": by_lazyjson}
    if lazyjson._scan is not None:  # the C pass was built: simdjson beside it
        readers["lazyjson, simdjson alone"] = by_simdjson
    if (msgspec_read := msgspec_reader()) is not None:
        readers["msgspec Raw fields"] = msgspec_read
    readers["regex scan (vectors only)"] = by_regex
    rows = []
    for batch, dims in ((64, 1024), (8, 1024), (1, 384)):
        for vllm_like in (False, True):
            body = answer(batch, dims, vllm_like)
            assert all(read(body) == [dims] * batch for read in readers.values())
            figures = {name: cpu_ms(read, body, args.seconds) for name, read in readers.items()}
            base = figures["orjson.loads (main)"]
            label = f"{batch} x {dims} {'vLLM-like' if vllm_like else 'mock'} ({len(body) / 1e3:.0f} kB)"
            rows.append([label, *(f"{ms:.4f} ({ms / base:.2f}x)" for ms in figures.values())])
    print("CPU ms per answer (and against orjson.loads)")
    print(table(["answer", *readers], rows))
    print(machine_line())


if __name__ == "__main__":
    main()
