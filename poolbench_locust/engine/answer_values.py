"""The values of a well-answered request's reference inputs (PreparedRequest.refs), for the consistency
check (docs/consistency.md), each tagged with its kind so that the consistency room picks the measure
without knowing the server (consistency/comparing.py):

- "vectors": an embedding as floats (float, base64, `bytes`, `bytes_only`, KServe's tensors), or a packed
  int8/uint8 one as its whole numbers;
- "packed_bits": a binary/ubinary embedding's values, 8 dimensions a byte (compared bit by bit: Hamming);
- "sparse": a sparse embedding, vocabulary id -> value;
- "rows": a token-level answer's rows, one per token (or chunk);
- "scores": a rerank's, score's, ranking's or similarity's scores in the documents' order;
- "labels": a classification's probabilities, label -> probability or by class index.

Asked only for the few requests that carry a reference and that the budget chose: every other request
costs one attribute test. An answer's reader gives the values of what it alone knows how to find
(`ParsedAnswer.values`); the JSON embeddings every vector route shares are read here, under the options."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import NamedTuple

from poolbench_locust.endpoints.spec import AnswerError, Kind, ParsedAnswer, Raw, Values
from poolbench_locust.engine import packed, vectors
from poolbench_locust.lazyjson import ARRAY, Numbers
from poolbench_locust.options import Settings
from poolbench_locust.wire import DTYPE_SIZES, ENDIANNESS

__all__ = ["Kind", "Values", "Wanted", "answer_values", "json_values", "vector_values"]


class Wanted(NamedTuple):
    """What the plan knows of how its answers' JSON embeddings are read: the options, whether they are
    token-level, and the rows' learned width (a base64 token-level answer is one string of all its rows)."""

    settings: Settings
    token_level: bool = False
    row_width: int | None = None


def vector_values(vector: object, settings: Settings) -> Sequence[float]:
    """One JSON embedding as numbers: a list, lazyjson's `Numbers`, or a base64 string of the raw array
    (--embed-dtype, --endianness). ValueError when it is none of these."""
    if isinstance(vector, list):
        return vector
    if isinstance(vector, Numbers):
        return vector.values()
    if isinstance(vector, str):
        try:
            raw = base64.b64decode(vector, validate=True)
        except binascii.Error:
            raise ValueError("the vector is not valid base64") from None
        return vectors.decode(raw, settings.embed_dtype, settings.endianness)
    raise ValueError(f"the vector is a {type(vector).__name__}")


def json_values(vector: object, wanted: Wanted) -> Values:
    """One JSON embedding of a vector route, of the kind the options make it."""
    settings = wanted.settings
    if wanted.token_level:
        if isinstance(vector, str):  # base64 of every row: cut at the learned width
            flat = vector_values(vector, settings)
            width = wanted.row_width
            if not width or len(flat) % width:
                raise ValueError("the base64 token rows' width is not known yet")
            return Values("rows", [flat[i : i + width] for i in range(0, len(flat), width)])
        if type(vector) is not list or not all(isinstance(row, ARRAY) for row in vector):
            raise ValueError("the token-level embedding is not a list of rows")
        return Values("rows", [vector_values(row, settings) for row in vector])
    form = packed.form(settings) if settings.embedding_type is not None else None
    if form is not None and not form.base64:
        values = vector_values(vector, settings)
        return Values("packed_bits" if form.per_value == 8 else "vectors", values)
    if form is not None:  # Cohere's base64 type: little-endian float32, whatever --embed-dtype says
        if not isinstance(vector, str):
            raise ValueError("the base64 embedding is not a string")
        try:
            return Values("vectors", vectors.decode(base64.b64decode(vector, validate=True), "float32", "little"))
        except binascii.Error:
            raise ValueError("the vector is not valid base64") from None
    if settings.pooling_task == "classify":  # /pooling's classify: each input's probabilities by class index
        return Values("labels", vector_values(vector, settings))
    return Values("vectors", vector_values(vector, settings))


def answer_values(
    answer: ParsedAnswer, refs: tuple[tuple[int, int], ...], wanted: Wanted, body: bytes | None = None
) -> tuple[tuple[int, Values], ...]:
    """(reference id, values) of each reference the request carried; ValueError when one cannot be read.
    `body`: the whole body, kept for a binary form's sampled answer (None where it was not kept)."""
    found = []
    for position, ref_id in refs:
        try:
            found.append((ref_id, _one(answer, position, wanted, body)))
        except AnswerError as e:
            raise ValueError(str(e)) from None
    return tuple(found)


def _decoded(raw: Raw, settings: Settings) -> Sequence[float] | list[Sequence[float]]:
    """A binary body's raw values as floats, or as rows of `raw.width` values; ValueError on a dtype or
    endianness the answer declared that is none (a hostile header), or a size that is not whole values."""
    if not isinstance(raw.dtype, str) or raw.dtype not in DTYPE_SIZES:
        raise ValueError(f"unknown embed_dtype {str(raw.dtype)[:20]!r} in the answer")
    if not isinstance(raw.endianness, str) or raw.endianness not in ENDIANNESS:
        raise ValueError(f"unknown endianness {str(raw.endianness)[:20]!r} in the answer")
    if not raw.data or len(raw.data) % DTYPE_SIZES[raw.dtype]:
        raise ValueError("the raw values are not a whole number of values")
    flat = vectors.decode(raw.data, raw.dtype, raw.endianness)
    width = raw.width
    if width is None:
        return flat
    if width < 1 or len(flat) % width:
        raise ValueError(f"{len(flat)} values are not rows of {width}")
    return [flat[i : i + width] for i in range(0, len(flat), width)]


def _one(answer: ParsedAnswer, position: int, wanted: Wanted, body: bytes | None) -> Values:
    if answer.values is not None:
        values = answer.values(position, body)
        if not isinstance(values, Values):  # a reader's bug, not the server's: say so rather than compare it
            raise ValueError(f"the reader gave {type(values).__name__}, not Values")
        if isinstance(values.data, Raw):
            values = Values(values.kind, _decoded(values.data, wanted.settings))
        elif values.kind == "vectors":
            values = Values("vectors", vector_values(values.data, wanted.settings))
        if values.kind == "vectors" and wanted.settings.pooling_task == "classify":  # probabilities by class
            return Values("labels", values.data)
        return values
    if position < 0:
        if answer.scores is None:
            raise ValueError("the answer's reader gives no scores")
        return Values("scores", answer.scores())
    if position >= len(answer.vectors):
        raise ValueError(f"the answer holds no vector {position}")
    return json_values(answer.vectors[position], wanted)
