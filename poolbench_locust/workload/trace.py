"""Trace replay (--dataset trace:FILE.jsonl): each line of a trace is one request, sent at its timestamp.

A line has `timestamp` (ms since the trace's start, never decreasing) and the request's inputs
(`text`, `texts` or `input`; `query` + `documents`; `messages`) or its shape (`input_length` tokens
of each text, `batch_size` texts, `documents` documents). AIPerf's mooncake traces (`timestamp`,
`input_length`, `output_length`, `hash_ids`) read as they are: what a pooling request has no use for
is ignored, said once. Every line is checked before the run: a bad one stops it with its line number.

Its schedule, and how the processes share it, is workload/replay.py.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from poolbench_locust.endpoints.spec import Inputs, Shape
from poolbench_locust.options import OptionError, Settings
from poolbench_locust.workload import chat_batches
from poolbench_locust.workload.datasets import LengthFitter
from poolbench_locust.workload.records import fail as _fail
from poolbench_locust.workload.records import lines_of, record_inputs
from poolbench_locust.workload.replay import TraceSchedule
from poolbench_locust.workload.tokens import TokenCounter

logger = logging.getLogger("poolbench_locust")


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
        texts = tuple(self._text(rng, line) for _ in range(batch))
        if self.shape == "chat":  # each text one conversation of one user message
            return chat_batches.batch([Inputs((text,)) for text in texts], self.settings)
        return Inputs(texts)

    def size_hint(self) -> int:
        return len(self.lines)
