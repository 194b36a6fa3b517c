"""Records read from a user's file, checked one at a time: a bad one stops the run at start with its
place (file and line, or row) and the field named, as an OptionError of --dataset."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from poolbench_locust.endpoints.spec import Inputs, Shape
from poolbench_locust.options import OptionError


def fail(where: str, message: str) -> OptionError:
    return OptionError("--dataset", f"{where}: {message}")


def text_field(record: Any, field: str, where: str) -> str:
    value = record.get(field) if isinstance(record, Mapping) else None
    if not isinstance(value, str) or not value.strip():
        raise fail(where, f"field {field!r} missing or not a non-empty string")
    return value


def record_inputs(record: Any, shape: Shape, where: str, field: str = "text") -> Inputs:
    """The inputs of one record (a JSON line, a table's row), checked; OptionError naming the field."""
    if shape == "texts":
        return Inputs((text_field(record, field, where),))
    if shape == "pairs":
        query = text_field(record, "query", where)
        docs = record.get("documents")
        if not isinstance(docs, list) or not docs or not all(isinstance(d, str) and d.strip() for d in docs):
            raise fail(where, "field 'documents' missing or not a non-empty list of strings")
        return Inputs(tuple(docs), query=query)
    messages = record.get("messages") if isinstance(record, Mapping) else None
    if not isinstance(messages, list) or not messages:
        raise fail(where, "field 'messages' missing or not a non-empty list")
    for message in messages:
        if not isinstance(message, Mapping) or not isinstance(message.get("content"), str) or "role" not in message:
            raise fail(where, "field 'messages' holds an item without 'role' and string 'content'")
    return Inputs(tuple(m["content"] for m in messages), messages=tuple(messages))


def lines_of(path: Path) -> Iterator[tuple[int, str]]:
    """(number, text) of each non-blank line, read and decoded one at a time: a file is never held whole."""
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise fail(f"{path}:{number}", "not UTF-8 text") from None
            if text.strip():
                yield number, text.rstrip("\r\n")
