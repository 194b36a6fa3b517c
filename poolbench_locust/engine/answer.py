"""Checks of a received answer against the request that asked for it.

Each function returns the server's token count (or None) and raises `BadResponse` with a
message that says what was expected and what came.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

import orjson

from poolbench_locust.endpoints.spec import Answer, AnswerError, Endpoint
from poolbench_locust.engine import vectors
from poolbench_locust.engine.body import BadResponse, Body
from poolbench_locust.options import Settings
from poolbench_locust.wire import DTYPE_SIZES, METADATA_HEADER
from poolbench_locust.workload import PreparedRequest


def _expect_items(got: int, req: PreparedRequest, what: str) -> None:
    if got != req.expected_items:
        raise BadResponse(f"expected {req.expected_items} {what}, got {got}")


def check_json(endpoint: Endpoint, body: Body, req: PreparedRequest, settings: Settings) -> Answer:
    try:
        doc = orjson.loads(body.data or b"")
    except orjson.JSONDecodeError as e:
        raise BadResponse(f"garbled JSON body: {e}") from None
    try:
        answer = endpoint.answer(doc)
    except AnswerError as e:
        raise BadResponse(str(e)) from None
    if endpoint.usage_required and answer.prompt_tokens is None:
        raise BadResponse("answer has no usage.prompt_tokens")
    if settings.validate:
        _expect_items(answer.items, req, "results" if endpoint.shape == "pairs" else "embeddings")
    if settings.check_vectors and answer.first_vector is not None:
        _check_vector(answer.first_vector, settings)
    return answer


def _check_vector(vector: list[float] | str, settings: Settings) -> None:
    if isinstance(vector, str):  # base64 of the raw array
        try:
            values = vectors.decode(base64.b64decode(vector, validate=True), settings.embed_dtype, settings.endianness)
        except (binascii.Error, ValueError):
            raise BadResponse("embedding is not valid base64") from None
    elif isinstance(vector, list) and vector and isinstance(vector[0], list):  # /pooling may nest
        values = vector[0]
    else:
        values = vector
    if (why := vectors.problem(values)) is not None:
        raise BadResponse(why)


def metadata(headers: Any) -> dict[str, Any]:
    raw = headers.get(METADATA_HEADER)
    if raw is None:
        raise BadResponse("no metadata header in the bytes answer (use bytes_only for servers that send none)")
    if not isinstance(raw, str):
        raise BadResponse("metadata header sent more than once")
    try:
        meta = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BadResponse("metadata header is not valid JSON") from None
    if not isinstance(meta, Mapping) or not isinstance(meta.get("data"), list):
        raise BadResponse("metadata header has no 'data' list")
    return meta


def first_vector_size(meta: Mapping[str, Any]) -> int:
    """Bytes of the first vector per the metadata (0 when it does not say), to keep for --check-vectors."""
    try:
        first = meta["data"][0]
        return max(int(first["end"]) - int(first["start"]), 0)
    except (IndexError, KeyError, TypeError, ValueError):
        return 0


def check_bytes(meta: Mapping[str, Any], body: Body, req: PreparedRequest, settings: Settings) -> int:
    """The `bytes` answer: its metadata must describe the body exactly; tokens come from its usage."""
    usage = meta.get("usage")
    tokens = usage.get("prompt_tokens") if isinstance(usage, Mapping) else None
    if not isinstance(tokens, int):
        raise BadResponse("metadata header has no usage.prompt_tokens")
    items = meta["data"]
    if settings.validate:
        _expect_items(len(items), req, "embeddings in metadata")
        try:
            described = sum(int(item["end"]) - int(item["start"]) for item in items)
        except (KeyError, TypeError, ValueError):
            raise BadResponse("metadata items lack integer start/end offsets") from None
        if described != body.size:
            raise BadResponse("metadata offsets do not match the body: bytes received differ from sum of end - start")
    if settings.check_vectors and items:
        first = items[0]
        _check_raw_vector(body.head, first.get("embed_dtype", settings.embed_dtype), first.get("endianness"), settings)
    return tokens


def check_bytes_only(body: Body, req: PreparedRequest, settings: Settings, dims: int | None) -> int | None:
    """The `bytes_only` answer carries no metadata: only its size can be checked.

    Returns the dimension the answer implies, so the caller can learn it from the first good answer.
    """
    width = DTYPE_SIZES[settings.embed_dtype]
    if not settings.validate:
        return dims
    if dims is None:
        if body.size == 0 or body.size % (req.expected_items * width):
            raise BadResponse(
                f"bytes_only body of {body.size} bytes is not {req.expected_items} embeddings of {settings.embed_dtype}"
            )
        dims = body.size // (req.expected_items * width)
    elif body.size != req.expected_items * dims * width:
        expected = req.expected_items * dims * width
        raise BadResponse(f"expected {req.expected_items} x {dims} x {width} = {expected} bytes, got {body.size}")
    if settings.check_vectors:
        _check_raw_vector(body.head, settings.embed_dtype, settings.endianness, settings)
    return dims


def _check_raw_vector(head: bytes, dtype: str, endianness: str | None, settings: Settings) -> None:
    if dtype not in DTYPE_SIZES:
        raise BadResponse(f"unknown embed_dtype {dtype!r} in the answer")
    if (why := vectors.problem(vectors.decode(head, dtype, endianness or settings.endianness))) is not None:
        raise BadResponse(why)
