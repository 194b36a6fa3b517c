"""The values of a well-answered request's reference inputs (PreparedRequest.refs), for the consistency
check (docs/consistency.md): an item's vector as floats, or the whole answer's scores in the documents'
order. Asked only for the few requests that carry a reference: every other request costs one attribute test."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

from poolbench_locust.endpoints.spec import AnswerError, ParsedAnswer
from poolbench_locust.engine import vectors
from poolbench_locust.lazyjson import Numbers
from poolbench_locust.options import Settings


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


def answer_values(
    answer: ParsedAnswer, refs: tuple[tuple[int, int], ...], settings: Settings
) -> tuple[tuple[int, Sequence[float]], ...]:
    """(reference id, values) of each reference the request carried; ValueError when one cannot be read."""
    found = []
    for position, ref_id in refs:
        if position < 0:
            if answer.scores is None:
                raise ValueError("the answer's reader gives no scores")
            try:
                found.append((ref_id, answer.scores()))
            except AnswerError as e:
                raise ValueError(str(e)) from None
        else:
            if position >= len(answer.vectors):
                raise ValueError(f"the answer holds no vector {position}")
            found.append((ref_id, vector_values(answer.vectors[position], settings)))
    return tuple(found)
