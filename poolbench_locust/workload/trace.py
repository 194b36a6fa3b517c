"""Trace replay (--dataset trace:FILE.jsonl): each line of a trace is one request, sent at its timestamp.

A line has `timestamp` (ms since the trace's start, never decreasing) and the request's inputs
(`text`, `texts` or `input`; `query` + `documents`; `messages`) or its shape (`input_length` tokens
of each text, `batch_size` texts, `documents` documents). AIPerf's mooncake traces (`timestamp`,
`input_length`, `output_length`, `hash_ids`) read as they are: what a pooling request has no use for
is ignored, said once. Every line is checked before the run: a bad one stops it with its line number.

The schedule is an arrival process of the open loop (workload/arrival.py): each request leaves at
its time whatever the server does, is timed from that time when no user was free to send it, and
counts in the open loop's late figures. With workers, line i is sent by the worker i mod n (the
master tells each worker its place at test start, and once all are ready a common start on its wall
clock: workers on other machines need synchronised clocks), so together they send the whole trace. When a
process has sent its last line and every answer is in, it says so; the run ends when all have.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import Any

import gevent
import gevent.event
import orjson
from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner

from poolbench_locust.endpoints.spec import Inputs, Shape
from poolbench_locust.options import OptionError, Settings
from poolbench_locust.run_state import state_of
from poolbench_locust.workload.datasets import LengthFitter
from poolbench_locust.workload.records import fail as _fail
from poolbench_locust.workload.records import lines_of, record_inputs
from poolbench_locust.workload.tokens import TokenCounter

logger = logging.getLogger("poolbench_locust")

SHARE_MESSAGE = "poolbench_trace_share"
READY_MESSAGE = "poolbench_trace_ready"
GO_MESSAGE = "poolbench_trace_go"
OVER_MESSAGE = "poolbench_trace_over"

MAX_INPUT_LENGTH = 1_000_000
MAX_BATCH = 100_000
"""Bounds of a line's shape: a typo of a few zeros must stop the run, not fill the machine with text."""

TEXT_FIELDS = ("text", "texts", "input")
SHAPE_FIELDS = ("input_length", "batch_size", "documents")
INPUT_FIELDS: dict[Shape, tuple[str, ...]] = {
    "texts": TEXT_FIELDS,
    "pairs": ("query", "documents"),
    "chat": ("messages",),
}


@dataclass(frozen=True, slots=True)
class TraceLine:
    """One request of a trace: its inputs as written, or the shape of random ones to build."""

    number: int
    """The line's number in the file, for messages."""
    inputs: Inputs | None = None
    input_length: int | None = None
    batch_size: int | None = None
    documents: int | None = None


@dataclass(frozen=True, slots=True)
class TraceSchedule:
    """When each line of a trace leaves: seconds from the replay's start, at speed 1."""

    seconds: tuple[float, ...]

    def arrivals(self, environment: Any) -> Iterator[tuple[float, int]]:
        """(perf_counter time due, line index) of this process's share of the lines, from now on."""
        speed = Settings.from_options(environment.parsed_options).trace_speed
        share = replay_of(environment).share
        index, count = share.of(environment)
        # With workers, their common start on the master's wall clock: no worker's spawn time shifts its share.
        start_at = share.wait_for_start(environment) if count > 1 else None
        start = perf_counter() + (start_at - time.time() if start_at is not None else 0.0)
        for line in range(index, len(self.seconds), count):
            yield start + self.seconds[line] / speed, line

    def over(self, environment: Any, sent: int) -> None:
        trace_over(environment, sent)


def _whole(record: Mapping[str, Any], field: str, where: str, most: int) -> int | None:
    value = record.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise _fail(where, f"field {field!r} must be a whole number from 1 to {most}, got {str(value)[:40]}")
    return value


def _timestamp(record: Mapping[str, Any], where: str, previous: float) -> float:
    value = record.get("timestamp")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise _fail(where, f"field 'timestamp' missing or not a number of ms >= 0, got {str(value)[:40]}")
    if value < previous:
        raise _fail(where, f"field 'timestamp' {value:g} is before the line above's {previous:g}: it must not decrease")
    return float(value)


def _text_inputs(record: Mapping[str, Any], where: str) -> Inputs:
    """`text` (one string), `texts` (a list) or `input` (either, as OpenAI's embeddings take it)."""
    field = next(f for f in TEXT_FIELDS if f in record)
    value = record[field]
    texts = [value] if isinstance(value, str) and field != "texts" else value
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t.strip() for t in texts):
        kind = "a non-empty string" if field == "text" else "a non-empty list of non-empty strings"
        raise _fail(where, f"field {field!r} must be {kind}")
    return Inputs(tuple(texts))


def read_line(record: Any, shape: Shape, path: Path, number: int, previous: float) -> tuple[float, TraceLine, set[str]]:
    """(timestamp, the line, its fields a pooling request has no use for); OptionError naming the field."""
    where = f"{path}:{number}"
    if not isinstance(record, Mapping):
        raise _fail(where, "not a JSON object")
    at = _timestamp(record, where, previous)
    inputs_given = [f for f in INPUT_FIELDS[shape] if f in record and not (f == "documents" and _is_count(record[f]))]
    used = {"timestamp", *SHAPE_FIELDS, *INPUT_FIELDS[shape]}
    if inputs_given:
        inputs = _text_inputs(record, where) if shape == "texts" else record_inputs(record, shape, where)
        return at, TraceLine(number, inputs=inputs), set(record) - used
    length = _whole(record, "input_length", where, MAX_INPUT_LENGTH)
    if length is None:
        wanted = ", ".join(repr(f) for f in INPUT_FIELDS[shape])
        raise _fail(where, f"field 'input_length' missing, and no inputs ({wanted}) either")
    line = TraceLine(
        number,
        input_length=length,
        batch_size=_whole(record, "batch_size", where, MAX_BATCH),
        documents=_whole(record, "documents", where, MAX_BATCH),
    )
    return at, line, set(record) - used


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_trace(path_text: str, shape: Shape) -> tuple[list[TraceLine], TraceSchedule]:
    """Every line of the trace, checked, streamed line by line; OptionError at the first bad one."""
    path = Path(path_text)
    if path.suffix.lower() != ".jsonl":
        raise _fail(str(path), "a trace is a .jsonl file (one request a line)")
    lines: list[TraceLine] = []
    seconds: list[float] = []
    unused: set[str] = set()
    previous = 0.0
    for number, text in lines_of(path):
        where = f"{path}:{number}"
        try:
            record = orjson.loads(text)
        except orjson.JSONDecodeError as e:
            raise _fail(where, f"not JSON: {e}") from None
        previous, line, ignored = read_line(record, shape, path, number, previous)
        lines.append(line)
        seconds.append(previous / 1000)
        unused |= ignored
    if not lines:
        raise _fail(str(path), "holds no requests")
    if unused:
        logger.info("Trace %s: fields a pooling request does not use are ignored: %s", path, ", ".join(sorted(unused)))
    return lines, TraceSchedule(tuple(seconds))


class TraceDataset:
    """The trace's requests in its order: inputs as written, or random texts of each line's shape
    (exact token lengths with --tokenizer or --count-tokens-with-server, words otherwise)."""

    def __init__(self, settings: Settings, shape: Shape, counter: TokenCounter) -> None:
        assert settings.trace is not None
        self.settings, self.shape, self.counter = settings, shape, counter
        self.lines, self.schedule = read_trace(settings.trace, shape)
        self._fitter: LengthFitter | None = None
        self._cursor = 0

    def _text(self, rng: random.Random, line: TraceLine) -> str:
        assert line.input_length is not None
        if self._fitter is None:
            self._fitter = LengthFitter(self.counter)
        limit = getattr(self.counter, "max_model_len", None)
        try:
            if limit is not None and line.input_length > limit:
                raise OptionError("--dataset", f"does not fit the model's context of {limit} tokens (max_model_len)")
            return self._fitter.text(rng, line.input_length)
        except OptionError as e:
            reason = str(e).partition(": ")[2]
            where = f"{self.settings.trace}:{line.number}"
            raise _fail(where, f"field 'input_length' {line.input_length}: {reason}") from None

    def draw(self, rng: random.Random) -> Inputs:
        line = self.lines[self._cursor % len(self.lines)]
        self._cursor += 1
        if line.inputs is not None:
            return line.inputs
        if self.shape == "pairs":
            documents = line.documents or self.settings.documents.draw(rng)
            query = self._text(rng, line)
            return Inputs(tuple(self._text(rng, line) for _ in range(documents)), query=query)
        batch = line.batch_size or self.settings.batch_size.draw(rng)
        return Inputs(tuple(self._text(rng, line) for _ in range(batch)))

    def size_hint(self) -> int:
        return len(self.lines)


GO_LEAD_S = 0.5
"""From the master's go to the workers' common start: time for the message to reach every worker."""
GO_TIMEOUT_S = 60.0
"""A worker that hears no go (a master of another version, a lost worker) starts on its own after this."""


class Share:
    """This process's place among the processes that send a trace: (index, count), and when they all start.

    Each worker is ready when its first user asks for an arrival (its plans are built, which takes a
    while for a large trace); when all are, the master names a common start on its wall clock.
    """

    def __init__(self) -> None:
        self.index, self.count = 0, 1
        self.start_at: float | None = None
        """time.time() at which the workers' replay starts, once the master said it."""
        self.go = gevent.event.Event()

    def reset(self, index: int, count: int) -> None:
        self.index, self.count, self.start_at = index, count, None
        self.go.clear()

    def wait_for_start(self, environment: Any) -> float:
        environment.runner.send_message(READY_MESSAGE)
        self.go.wait(GO_TIMEOUT_S)
        return self.start_at if self.start_at is not None else time.time()

    def of(self, environment: Any) -> tuple[int, int]:
        return (self.index, self.count) if isinstance(getattr(environment, "runner", None), WorkerRunner) else (0, 1)


class Ending:
    """Ends the run once every process has sent its share of the trace and had every answer."""

    def __init__(self) -> None:
        self.expected = 1
        self.sent = 0
        self.reported = 0
        self.ready = 0
        """Workers whose users are ready to replay (the master starts them together)."""
        self.started = time.monotonic()

    def begin(self, processes: int) -> None:
        self.expected, self.sent, self.reported, self.ready, self.started = processes, 0, 0, 0, time.monotonic()

    def process_over(self, environment: Environment, sent: int) -> None:
        """One process (this one, or a worker by its message) has sent its share and had its answers."""
        self.sent += sent
        self.reported += 1
        if self.reported < self.expected:
            return
        runner = environment.runner
        options = environment.parsed_options
        settings = Settings.from_options(options)
        logger.info(
            "Trace over: the %d requests of %s were sent (in %.1f s, --trace-speed %g); ending the run",
            self.sent,
            settings.trace,
            time.monotonic() - self.started,
            settings.trace_speed,
        )
        if runner is None:
            return
        # as Locust ends a LoadTestShape's run: a headless run quits (its usual exit code), a web UI's stops
        headless = bool(getattr(options, "headless", False)) or not getattr(environment, "web_ui", None)
        gevent.spawn(runner.quit if headless else runner.stop)


class Replay:
    """This process's part in replaying a trace, for one run: its share of the lines and their common
    start (a worker's), and when every process has sent its share (the master's, or the one process's)."""

    def __init__(self) -> None:
        self.share = Share()
        self.ending = Ending()


def replay_of(environment: Any) -> Replay:
    """The run's trace replay (one per environment)."""
    state = state_of(environment)
    if state.trace is None:
        state.trace = Replay()
    return state.trace


def trace_over(environment: Any, sent: int) -> None:
    """Called by the open loop when this process's share is sent and answered."""
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        runner.send_message(OVER_MESSAGE, {"sent": sent})
    else:
        replay_of(environment).ending.process_over(environment, sent)


def _configured(environment: Environment) -> bool:
    try:
        return Settings.from_options(environment.parsed_options).trace is not None
    except OptionError:
        return False  # said at start by poolbench_locust.start_checks


def _on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    replay = replay_of(environment)
    if isinstance(runner, WorkerRunner):

        def take_share(msg: Any, **_: Any) -> None:
            replay.share.reset(int(msg.data["index"]), int(msg.data["count"]))

        def go(msg: Any, **_: Any) -> None:
            replay.share.start_at = float(msg.data["start_at"])
            replay.share.go.set()

        runner.register_message(SHARE_MESSAGE, take_share)
        runner.register_message(GO_MESSAGE, go)
    elif isinstance(runner, MasterRunner):

        def worker_over(msg: Any, **_: Any) -> None:
            sent = msg.data.get("sent") if isinstance(msg.data, dict) else None
            replay.ending.process_over(environment, sent if isinstance(sent, int) and sent >= 0 else 0)

        def worker_ready(msg: Any, **_: Any) -> None:
            replay.ending.ready += 1
            if replay.ending.ready == replay.ending.expected:
                runner.send_message(GO_MESSAGE, {"start_at": time.time() + GO_LEAD_S})

        runner.register_message(OVER_MESSAGE, worker_over)
        runner.register_message(READY_MESSAGE, worker_ready)


def _on_test_start(environment: Environment, **_: Any) -> None:
    runner = environment.runner
    if not _configured(environment):
        return
    ending = replay_of(environment).ending
    if not isinstance(runner, MasterRunner):
        ending.begin(1)
        return
    # Sent before the spawn messages, on the same connection: a worker knows its share before its first user.
    workers = sorted(c.id for c in (*runner.clients.ready, *runner.clients.running, *runner.clients.spawning))
    users = int(getattr(environment.parsed_options, "num_users", 0) or 0)
    if users < len(workers):
        logger.error(
            "-u %d: a trace sent by %d workers needs a user on each: at least -u %d", users, *[len(workers)] * 2
        )
        gevent.spawn(runner.stop)
        return
    ending.begin(len(workers))
    for index, worker in enumerate(workers):
        runner.send_message(SHARE_MESSAGE, {"index": index, "count": len(workers)}, client_id=worker)


def setup(events: Events) -> None:
    events.init.add_listener(_on_init)
    events.test_start.add_listener(_on_test_start)
