"""Reference answers in a file (docs/consistency.md, Reference answers from elsewhere): written by
--consistency-save from a run's references, read by --consistency-reference instead of the server's answers
alone, so that a run compares its answers with another server's, another version's, or the model's own run
with sentence-transformers.

The format, JSON Lines in UTF-8: a header line, then one reference a line, keyed by its input's content (not
by any id of ours), so that a file written elsewhere matches:

    {"format": "poolbench-references", "version": 1}
    {"name": "/v1/embeddings", "kind": "vectors", "input": "the text", "values": [0.1, -0.2, ...]}
    {"name": "/rerank", "kind": "scores", "input": {"query": "q", "documents": ["a", "b"]}, "values": [0.9, 0.1]}

`kind` is "vectors" (an embedding of the text `input`) or "scores" (rerank and score: one score per document,
in the documents' order). `name` is optional: when given, the line applies only to the request name of that
name (the stats' Name column); without it, to every User class whose answers are of its kind. Blank lines
are skipped. Everything read is bounded (MAX_FILE_BYTES, MAX_LINE_BYTES, MAX_REFERENCES, MAX_VALUES) and
checked: the first bad line stops the run at start, naming the option, the file and the line.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from poolbench_locust.options import OptionError

OPTION = "--consistency-reference"
FORMAT = "poolbench-references"
VERSION = 1
HEADER = {"format": FORMAT, "version": VERSION}
KINDS = ("vectors", "scores")
MAX_FILE_BYTES = 64 * 1024 * 1024
"""The largest file read: 8 references of 4,096 floats are about 0.7 MB; this is a hundred times more."""
MAX_LINE_BYTES = 4 * 1024 * 1024
"""The longest line: a 16,384-value vector written in full, or a rerank of a few hundred long documents."""
MAX_REFERENCES = 10_000
"""The most reference lines: a run uses --consistency-inputs (8) per User class."""
MAX_VALUES = 65_536
"""The most values one reference holds (an embedding's dimension, a rerank's documents)."""
MAX_NAME = 1000
"""The longest `name`: a request name is a path or a User class's request_name."""

Key = tuple[Any, ...]
"""An input's content as a dictionary key: ("vectors", text) or ("scores", query, documents)."""


def input_key(kind: str, given: Any) -> Key:
    """The key of a reference's input as a plan holds it (workload/pool.py reference_input) or a file
    writes it; ValueError when it is not of the kind's shape."""
    if kind == "vectors":
        if not isinstance(given, str):
            raise ValueError("a vectors reference's input must be a string (the text embedded)")
        return (kind, given)
    if kind == "scores":
        if not isinstance(given, dict) or not isinstance(query := given.get("query"), str):
            raise ValueError('a scores reference\'s input must be {"query": "...", "documents": [...]}')
        documents = given.get("documents")
        if not isinstance(documents, list) or not documents or not all(isinstance(d, str) for d in documents):
            raise ValueError("a scores reference's input must hold its documents: a non-empty list of strings")
        return (kind, query, tuple(documents))
    raise ValueError(f"kind must be one of {', '.join(KINDS)}")


def input_hash(key: Key) -> str:
    """A short fingerprint of an input's content (16 hex digits of its SHA-256): what a worker ships of it."""
    return hashlib.sha256(orjson.dumps(list(key))).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class FileReference:
    line: int
    """Its line number in the file (1 is the header)."""
    values: tuple[float, ...]


@dataclass(frozen=True)
class ReferenceFile:
    path: str
    references: dict[tuple[str | None, Key], FileReference]
    """By (name, or None for every name) and input key."""

    def matched(self, name: str, kind: str, inputs: Sequence[Any]) -> dict[int, FileReference]:
        """The file's references of a plan's inputs, by reference id: its line of `name` first, else its line
        without a name; OptionError when those of vectors have differing dimensions."""
        found: dict[int, FileReference] = {}
        for ref_id, given in enumerate(inputs):
            try:
                key = input_key(kind, given)
            except ValueError:
                continue  # a plan's input of another shape: nothing in a file can match it
            if (reference := self.references.get((name, key)) or self.references.get((None, key))) is not None:
                found[ref_id] = reference
        if kind == "vectors" and found:
            first = min(found.values(), key=lambda r: r.line)
            for reference in found.values():
                if len(reference.values) != len(first.values):
                    raise self.error(
                        reference.line,
                        f"its vector has {len(reference.values)} values where line {first.line}'s, of the same "
                        f"request name {name}, has {len(first.values)}",
                    )
        return found

    def error(self, line: int, why: str) -> OptionError:
        return OptionError(OPTION, f"{self.path} line {line}: {why}")


def read(path: str) -> ReferenceFile:
    """The file's references; OptionError naming the file and its first bad line."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_FILE_BYTES:
                raise OptionError(OPTION, f"{path}: {size:,} bytes, more than the {MAX_FILE_BYTES:,} read")
            return _parsed(path, f)
    except OSError as e:
        raise OptionError(OPTION, f"{path}: cannot be read: {e.strerror or e}") from None


def _parsed(path: str, f: Any) -> ReferenceFile:
    references: dict[tuple[str | None, Key], FileReference] = {}
    file = ReferenceFile(path, references)
    number, header = 0, False
    while raw := f.readline(MAX_LINE_BYTES + 1):
        number += 1
        if len(raw) > MAX_LINE_BYTES:
            raise file.error(number, f"longer than the {MAX_LINE_BYTES:,} bytes a line may hold")
        if not raw.strip():
            continue
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise file.error(number, f"not JSON ({e}; NaN and Infinity are not JSON numbers)") from None
        if not header:
            if not isinstance(line, dict) or line.get("format") != FORMAT:
                raise file.error(number, f"not the header line {orjson.dumps(HEADER).decode()}")
            if line.get("version") != VERSION:
                raise file.error(number, f"version {line.get('version')!r}: this version reads version {VERSION}")
            header = True
            continue
        if len(references) >= MAX_REFERENCES:
            raise file.error(number, f"more than the {MAX_REFERENCES:,} references a file may hold")
        try:
            name, key, values = _reference(line)
        except ValueError as e:
            raise file.error(number, str(e)) from None
        if (name, key) in references:
            raise file.error(number, f"repeats line {references[(name, key)].line}'s input and name")
        references[(name, key)] = FileReference(number, values)
    if not header:
        raise OptionError(OPTION, f"{path}: empty (its first line must be {orjson.dumps(HEADER).decode()})")
    if not references:
        raise file.error(number, "the file holds no reference after its header")
    return file


def _reference(line: Any) -> tuple[str | None, Key, tuple[float, ...]]:
    """(name, input key, values) of one reference line; ValueError saying what is wrong with it."""
    if not isinstance(line, dict):
        raise ValueError("a reference line must be a JSON object")
    for needed in ("kind", "input", "values"):
        if needed not in line:
            raise ValueError(f'it lacks "{needed}"')
    name = line.get("name")
    if name is not None and not (isinstance(name, str) and 0 < len(name) <= MAX_NAME):
        raise ValueError(f'"name" must be a request name (a string of 1 to {MAX_NAME} characters)')
    kind = line["kind"]
    if kind not in KINDS:
        raise ValueError(f'"kind" must be "vectors" or "scores", not {str(kind)[:50]!r}')
    key = input_key(kind, line["input"])
    values = line["values"]
    if not isinstance(values, list) or not 0 < len(values) <= MAX_VALUES:
        raise ValueError(f'"values" must be a list of 1 to {MAX_VALUES:,} numbers')
    for i, value in enumerate(values):
        if type(value) not in (int, float) or not math.isfinite(value):
            raise ValueError(f'"values"[{i}] is {str(value)[:50]!r}, not a finite number')
    if kind == "scores" and len(values) != len(key[2]):
        raise ValueError(f"{len(values)} scores for {len(key[2])} documents: one score a document, in their order")
    return name, key, tuple(float(v) for v in values)


def write(path: str, references: Iterable[tuple[str, str, Any, Sequence[float]]]) -> int:
    """Write (name, kind, input, values) references as a reference file; how many were written. OSError
    when the file cannot be written."""
    count = 0
    with open(path, "wb") as f:
        f.write(orjson.dumps(HEADER) + b"\n")
        for name, kind, given, values in references:
            line = {"name": name, "kind": kind, "input": given, "values": [float(v) for v in values]}
            f.write(orjson.dumps(line) + b"\n")
            count += 1
    return count
