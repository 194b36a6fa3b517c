"""Checks of an answer, as its form read it (endpoints/forms.py), against the request that asked for it.

The same for every server: the items asked for, each vector's type and dimension (JSON), its numbers,
the first vector's values (--check-vectors, JSON or raw), a token-level answer's rows against its count
(engine/token_rows.py), --embedding-type's packed answers (engine/packed.py). `judge` raises `BadResponse`
with a message that says what was expected and what came. A token-level raw body with no exact count of
each input gets its token count from its size here (token_source `body-size`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any

from poolbench_locust import lazyjson
from poolbench_locust.endpoints.spec import ParsedAnswer
from poolbench_locust.engine import packed, token_rows, vectors
from poolbench_locust.engine.body import BadResponse
from poolbench_locust.engine.context import RequestContext
from poolbench_locust.engine.token_rows import TokenRows
from poolbench_locust.lazyjson import ARRAY, Numbers
from poolbench_locust.options import Settings
from poolbench_locust.wire import DTYPE_SIZES, ENDIANNESS
from poolbench_locust.workload import PreparedRequest


def judge(
    answer: ParsedAnswer,
    data: bytes,
    req: PreparedRequest,
    settings: Settings,
    what: str,
    rows: TokenRows | None,
    context: RequestContext,
) -> None:
    """Check an answer (`data`: its JSON body, or b""), `what` naming its items in a failure; its rows
    (token-level), server timings and image tokens go into `context`."""
    # --embedding-type's packed answers are engine/packed.py's: one attribute test when none is asked
    form = packed.form(settings) if settings.embedding_type is not None else None
    if settings.validate:
        if answer.items != req.expected_items:
            raise BadResponse(f"expected {req.expected_items} {what}, got {answer.items}")
        if rows is not None:
            if (counted := _rows(rows, answer, req, settings)) is not None:
                context["vectors"] = counted
        elif form is not None:
            packed.check(answer.vectors, form, settings.dimensions, data)
        else:
            _check_shapes(answer.vectors, settings)
        # NaN and infinity are written as null (vLLM's orjson): one memchr-speed look at the body finds
        # whether it holds a null, true or false at all, and only then is every vector's every value read.
        if form is None and answer.vectors and settings.encoding_format == "float" and lazyjson.may_hold_literal(data):
            _check_numbers(answer.vectors)
    if settings.check_vectors:
        if answer.raw is not None:
            if (first := _first_row(answer, rows, settings)) is not None:
                _check_raw_vector(first, answer.raw_dtype, answer.raw_endianness, settings)
        elif answer.vectors:
            if form is not None:
                packed.check_first(answer.vectors[0], form)
            else:
                _check_vector(answer.vectors[0], settings)
    if answer.server_ms:
        context.update(answer.server_ms)  # type: ignore[typeddict-item]
    if answer.image_tokens is not None:  # Cohere's billed image tokens, apart from its input tokens
        context["image_tokens"] = answer.image_tokens


def _rows(rows: TokenRows, answer: ParsedAnswer, req: PreparedRequest, settings: Settings) -> int | None:
    """A token-level answer's rows, checked against its count and each input's (engine/token_rows.py); Σ rows,
    or None where nothing says how many there should be."""
    width = DTYPE_SIZES[settings.embed_dtype]
    tokens, where = answer.prompt_tokens, answer.tokens_where
    if answer.rows is not None:  # the form read each input's rows (vLLM's metadata shapes)
        counts, row_width = answer.rows
        return rows.judge_rows(counts, row_width, tokens, where, req.input_tokens)
    if answer.rows_bytes is not None:  # only the body's size: Σ tokens x hidden x width
        named, size = answer.rows_bytes
        # No exact count of each input: the size gives the tokens, once the rows' width is known (row_probe.py)
        if not req.input_tokens and (sized := rows.tokens_of_size(named, size, req.expected_items, width)):
            total, answer.prompt_tokens = sized
            answer.tokens_where, answer.token_source = token_rows.BODY_SIZE_WHERE, token_rows.BODY_SIZE
            return total
        return rows.judge_size(named, (size,), req.expected_items, width, None, "", req.input_tokens)
    if settings.encoding_format == "base64":
        sizes = token_rows.base64_sizes(answer.vectors)
        return rows.judge_size("base64 token rows", sizes, len(sizes), width, tokens, where, req.input_tokens)
    counts, row_width = token_rows.rows_of_json(answer.vectors)
    return rows.judge_rows(counts, row_width, tokens, where, req.input_tokens)


def _first_row(answer: ParsedAnswer, rows: TokenRows | None, settings: Settings) -> bytes | None:
    """The first vector of raw values: all of `raw`, or the first row of a token-level body known only by its
    size, once the rows' width is known (None before: nothing to check yet)."""
    if answer.rows_bytes is None or rows is None:
        return answer.raw
    hidden = rows.hidden()
    return answer.raw[: hidden * DTYPE_SIZES[settings.embed_dtype]] if hidden is not None and answer.raw else None


NULL_IN_VECTOR = "holds null: a NaN or infinite value, written as null"


def _check_numbers(embeddings: Sequence[Any]) -> None:
    """Every value of every float embedding is a number: a null is a NaN or infinity the server wrote so."""
    for i, vector in enumerate(embeddings):
        rows = vector if type(vector) is list and vector and isinstance(vector[0], ARRAY) else (vector,)
        for row in rows:
            if not lazyjson.numbers_only(row):
                values = row.values() if isinstance(row, Numbers) else row
                if None in values:
                    raise BadResponse(f"embedding {i} {NULL_IN_VECTOR}")
                raise BadResponse(f"embedding {i} is not a list of numbers")


def _check_shapes(embeddings: Sequence[Any], settings: Settings) -> None:
    """Every embedding is of the encoding's type and, with --dimensions, of that many dimensions."""
    b64 = settings.encoding_format == "base64"
    width = DTYPE_SIZES[settings.embed_dtype]
    dims = settings.dimensions
    for i, vector in enumerate(embeddings):
        if b64:
            if not isinstance(vector, str):
                raise BadResponse(f"embedding {i} is not a base64 string")
            # base64 of n bytes is 4 * ceil(n / 3) characters: the dimension without decoding
            if dims is not None and len(vector) != 4 * -(-dims * width // 3):
                raise BadResponse(f"embedding {i} has {_base64_dims(vector, width)} dimensions, expected {dims}")
            continue
        if not isinstance(vector, ARRAY):
            raise BadResponse(f"embedding {i} is not a list of numbers")
        # A matrix is a token-level model's answer, which only --pooling-task counts row by row (token_rows.py);
        # an array of Numbers starts with a number, and its first value is not built
        if type(vector) is list and vector and isinstance(vector[0], ARRAY):
            raise BadResponse(f"embedding {i} {token_rows.TOKEN_MATRIX}")
        if dims is not None and len(vector) != dims:
            raise BadResponse(f"embedding {i} has {len(vector)} dimensions, expected {dims}")


def _base64_dims(vector: str, width: int) -> str:
    try:
        return str(len(base64.b64decode(vector, validate=True)) // width)
    except (binascii.Error, ValueError):
        return "an undecodable number of"


def _check_vector(vector: Any, settings: Settings) -> None:
    if settings.encoding_format == "base64":  # base64 of the raw array
        if not isinstance(vector, str):
            raise BadResponse("embedding 0 is not a base64 string")
        try:
            values = vectors.decode(base64.b64decode(vector, validate=True), settings.embed_dtype, settings.endianness)
        except (binascii.Error, ValueError):
            raise BadResponse("embedding is not valid base64") from None
    else:
        values = _built(vector[0] if type(vector) is list and vector and isinstance(vector[0], ARRAY) else vector)
        if not isinstance(values, list) or not all(type(v) in (float, int) for v in values):
            raise BadResponse(
                f"embedding 0 {NULL_IN_VECTOR}"
                if isinstance(values, list) and None in values
                else "embedding 0 is not a list of numbers"
            )
    if (why := vectors.problem(values)) is not None:
        raise BadResponse(why)


def _built(value: Any) -> Any:
    return value.values() if isinstance(value, Numbers) else value


def _check_raw_vector(head: bytes, dtype: Any, endianness: Any, settings: Settings) -> None:
    if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
        raise BadResponse(f"unknown embed_dtype {str(dtype)[:20]!r} in the answer")
    if endianness is not None and endianness not in ENDIANNESS:  # a list here is not hashable, but `in` a tuple is fine
        raise BadResponse(f"unknown endianness {str(endianness)[:20]!r} in the answer")
    if (why := vectors.problem(vectors.decode(head, dtype, endianness or settings.endianness))) is not None:
        raise BadResponse(why)
