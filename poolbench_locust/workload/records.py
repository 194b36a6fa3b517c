"""Records read from a user's file, checked one at a time: a bad one stops the run at start with its
place (file and line, or row) and the field named, as an OptionError of --dataset."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from poolbench_locust.endpoints.spec import Inputs, Shape
from poolbench_locust.options import OptionError
from poolbench_locust.workload import images


def fail(where: str, message: str) -> OptionError:
    return OptionError("--dataset", f"{where}: {message}")


def text_field(record: Any, field: str, where: str) -> str:
    value = record.get(field) if isinstance(record, Mapping) else None
    if not isinstance(value, str) or not value.strip():
        raise fail(where, f"field {field!r} missing or not a non-empty string")
    return value


def _images(value: Any, base: Path | None, where: str) -> tuple[str, ...]:
    """A record's `image`: one path or URL, or a list of them (workload/images.py checks each)."""
    if value is None:
        return ()
    values = value if isinstance(value, list) else [value]
    if not values:
        raise fail(where, "field 'image' is an empty list")
    return tuple(images.dataset_image(v, base, where) for v in values)


def _document(doc: Any, base: Path | None, where: str) -> tuple[str, tuple[str, ...]] | None:
    """A document: a string, or `{"text"?, "image"?}` with at least one of them; None when neither."""
    if isinstance(doc, str):
        return (doc, ()) if doc.strip() else None
    if not isinstance(doc, Mapping):
        return None
    text = doc.get("text", "")
    found = _images(doc.get("image"), base, where)
    if not isinstance(text, str) or not (text.strip() or found):
        return None
    return text, found


def record_inputs(record: Any, shape: Shape, where: str, field: str = "text", base: Path | None = None) -> Inputs:
    """The inputs of one record (a JSON line, a table's row), checked; OptionError naming the field.

    A record may name images (`image`: a path relative to `base`, the dataset's folder, or a URL; or a list
    of them); a record with images needs no text, and a rerank document may be `{"text", "image"}`."""
    found = _images(record.get("image"), base, where) if isinstance(record, Mapping) else ()
    if shape == "texts":
        if found and not (isinstance(record.get(field), str) and record[field].strip()):
            return Inputs(("",), images=(found,))  # an image alone
        return Inputs((text_field(record, field, where),), images=(found,) if found else ())
    if shape == "pairs":
        query = text_field(record, "query", where)
        docs = record.get("documents")
        read = [_document(d, base, where) for d in docs] if isinstance(docs, list) else []
        if not read or not all(read):
            raise fail(where, "field 'documents' missing or not a non-empty list of strings (or {text, image})")
        pairs = [d for d in read if d is not None]
        with_images = any(i for _, i in pairs)
        return Inputs(tuple(t for t, _ in pairs), query=query, images=tuple(i for _, i in pairs) if with_images else ())
    messages = record.get("messages") if isinstance(record, Mapping) else None
    if not isinstance(messages, list) or not messages:
        raise fail(where, "field 'messages' missing or not a non-empty list")
    for message in messages:
        if not isinstance(message, Mapping) or not isinstance(message.get("content"), str) or "role" not in message:
            raise fail(where, "field 'messages' holds an item without 'role' and string 'content'")
    return Inputs(tuple(m["content"] for m in messages), messages=tuple(messages), images=(found,) if found else ())


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
