"""Checks of a received answer against the request that asked for it.

Each function returns the server's token count (or None) and raises `BadResponse` with a
message that says what was expected and what came.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from poolbench_locust import lazyjson
from poolbench_locust.endpoints.spec import MAX_SERVER_MS, MAX_TOKENS, AnswerError, BinaryForm, Endpoint, token_count
from poolbench_locust.engine import packed, token_rows, vectors
from poolbench_locust.engine.body import BadResponse, Body
from poolbench_locust.engine.token_rows import TokenRows
from poolbench_locust.lazyjson import ARRAY, Numbers
from poolbench_locust.options import Settings
from poolbench_locust.wire import (
    DTYPE_SIZES,
    ENDIANNESS,
    METADATA_HEADER,
    TEI_PRESENCE_HEADER,
    TEI_TIMING_HEADERS,
    TEI_TOKENS_HEADER,
)
from poolbench_locust.workload import PreparedRequest


def _expect_items(got: int, req: PreparedRequest, what: str) -> None:
    if got != req.expected_items:
        raise BadResponse(f"expected {req.expected_items} {what}, got {got}")


VECTOR_HEAD_LIMIT = 1 << 20
"""Bytes of a binary answer kept for --check-vectors at most: a metadata header that claims a
first vector of a terabyte, or a bytes_only answer whose dimension is not known yet, keeps no more."""


LAZY_FROM_BYTES = 0 if lazyjson.SCANS else 32 * 1024
"""Float answers from this size on are read by lazyjson, which builds no number it only counts. With its C
pass, every one; with simdjson alone, from 32 kB: below it orjson's objects cost less than simdjson's
proxies (bench/json_readers.py)."""


def check_json(
    endpoint: Endpoint,
    body: Body,
    req: PreparedRequest,
    settings: Settings,
    context: dict[str, Any] | None = None,
    rows: TokenRows | None = None,
) -> int | None:
    """Check a JSON answer; return the server's token count (or None). The server's own timings it
    carries go into `context`, and with `rows` (a token-level answer) the rows it held, as `vectors`."""
    data = body.data or b""
    lazy = endpoint.vectors and settings.encoding_format == "float" and len(data) >= LAZY_FROM_BYTES
    try:
        doc = lazyjson.loads(data) if lazy else orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise BadResponse(f"garbled JSON body: {e}") from None
    try:
        answer = endpoint.answer(doc)
        tokens = answer.prompt_tokens if answer.prompt_tokens is not None else endpoint.tokens.read(doc)
    except AnswerError as e:
        raise BadResponse(str(e)) from None
    # --embedding-type's packed answers are engine/packed.py's to check: one attribute test when none is asked
    form = packed.form(settings) if settings.embedding_type is not None else None
    if settings.validate:
        _expect_items(answer.items, req, "results" if endpoint.shape == "pairs" else "embeddings")
        if rows is not None:
            counted = _token_rows(rows, answer.vectors, tokens, req, settings)
            if counted is not None and context is not None:
                context["vectors"] = counted
        elif form is not None:
            packed.check(answer.vectors, form, settings.dimensions, data)
        else:
            _check_shapes(answer.vectors, settings)
        # NaN and infinity are written as null (vLLM's orjson): one memchr-speed look at the body finds
        # whether it holds a null, true or false at all, and only then is every vector's every value read.
        if form is None and answer.vectors and settings.encoding_format == "float" and lazyjson.may_hold_literal(data):
            _check_numbers(answer.vectors)
    if settings.check_vectors and answer.vectors:
        if form is not None:
            packed.check_first(answer.vectors[0], form)
        else:
            _check_vector(answer.vectors[0], settings)
    if context is not None:
        if answer.server_ms:
            context.update(answer.server_ms)
        if answer.image_tokens is not None:  # Cohere's billed image tokens, apart from its input tokens
            context["image_tokens"] = answer.image_tokens
    return tokens  # nothing that reads the lazy document outlives this call


SERVER_USAGE = "the server's usage"


def _token_rows(
    rows: TokenRows, answer: Sequence[Any], tokens: int | None, req: PreparedRequest, settings: Settings
) -> int | None:
    """A token-level JSON answer's rows, checked against the tokens (engine/token_rows.py); Σ rows."""
    if settings.encoding_format == "base64":
        sizes = token_rows.base64_sizes(answer)
        width = DTYPE_SIZES[settings.embed_dtype]
        return rows.judge_size("base64 token rows", sizes, len(sizes), width, tokens, SERVER_USAGE, req.input_tokens)
    counts, width = token_rows.rows_of_json(answer)
    return rows.judge_rows(counts, width, tokens, SERVER_USAGE, req.input_tokens)


def token_row_head(rows: TokenRows, settings: Settings) -> int:
    """Bytes of a token-level bytes_only body to keep for --check-vectors: its first row, once the hidden
    size is known; before, the first VECTOR_HEAD_LIMIT bytes."""
    if rows.shapes is not None and len({hidden for _, hidden in rows.shapes}) == 1:
        ((_, hidden), *_) = rows.shapes
        return min(hidden * DTYPE_SIZES[settings.embed_dtype], VECTOR_HEAD_LIMIT)
    return VECTOR_HEAD_LIMIT


def check_token_bytes_only(rows: TokenRows, body: Body, req: PreparedRequest, settings: Settings) -> int | None:
    """A token-level bytes_only body: Σ tokens x hidden x width bytes, against this request's own exact
    counts (the hidden size learned from the answers); return Σ rows, or None where no count is exact."""
    if not settings.validate:
        return None
    width = DTYPE_SIZES[settings.embed_dtype]
    inputs = req.expected_items
    counted = rows.judge_size("bytes_only body", (body.size,), inputs, width, None, "", req.input_tokens)
    if settings.check_vectors and rows.shapes is not None and len({h for _, h in rows.shapes}) == 1:
        ((_, hidden), *_) = rows.shapes  # the first row is the body's start
        _check_raw_vector(body.head[: hidden * width], settings.embed_dtype, settings.endianness, settings)
    return counted


def looked_for(endpoint: Endpoint, settings: Settings) -> str:
    """Where the engine looks for the server's token count of an answer of `endpoint`."""
    paths = "metadata usage.prompt_tokens" if settings.encoding_format == "bytes" else str(endpoint.tokens)
    return f"{paths}, the {TEI_TOKENS_HEADER} header" if paths else f"the {TEI_TOKENS_HEADER} header"


def missing_tokens(endpoint: Endpoint, settings: Settings) -> str:
    """The failure of an answer without a token count, under --require-server-tokens."""
    return f"answer has no token count (looked for {looked_for(endpoint, settings)}); --require-server-tokens"


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


def check_binary_form(
    form: BinaryForm, headers: Any, body: Body, req: PreparedRequest, settings: Settings
) -> int | None:
    """Check a route's own binary answer (its JSON head kept, its tensors counted); return its token count."""
    try:
        answer = form.read(headers, body.head, body.size, settings)
    except AnswerError as e:
        raise BadResponse(str(e)) from None
    if settings.validate:
        _expect_items(answer.items, req, "embeddings")
    if settings.check_vectors and answer.vectors:
        _check_vector(answer.vectors[0], settings)
    return answer.prompt_tokens


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


def metadata(headers: Any, *, each_item: bool = False) -> dict[str, Any]:
    """The `metadata` header's JSON. Its `data` may be a `lazyjson.Offsets` (its length, its first item and the
    sum of end - start over all) unless `each_item` asks for every item as a dict (token-level shapes)."""
    raw = headers.get(METADATA_HEADER)
    if raw is None:
        raise BadResponse("no metadata header in the bytes answer (use bytes_only for servers that send none)")
    if not isinstance(raw, str):
        raise BadResponse("metadata header sent more than once")
    if not each_item:
        try:
            text = raw.encode()
        except UnicodeEncodeError:  # a lone surrogate: orjson refuses it below
            text = None
        if text is not None and (meta := lazyjson.offsets(text)) is not None:
            return meta
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
        return min(max(int(first["end"]) - int(first["start"]), 0), VECTOR_HEAD_LIMIT)
    except (IndexError, KeyError, TypeError, ValueError):
        return 0


def check_bytes(
    meta: Mapping[str, Any],
    body: Body,
    req: PreparedRequest,
    settings: Settings,
    rows: TokenRows | None = None,
    context: dict[str, Any] | None = None,
) -> int | None:
    """The `bytes` answer: its metadata must describe the body exactly; tokens come from its usage (or None).
    With `rows` (a token-level answer) each item's shape too, and the rows Σ go into `context` as `vectors`."""
    usage = meta.get("usage")
    try:
        tokens = (
            token_count(usage.get("prompt_tokens"), "metadata usage.prompt_tokens")
            if isinstance(usage, Mapping)
            else None
        )
    except AnswerError as e:
        raise BadResponse(str(e)) from None
    items = meta["data"]
    if settings.validate:
        _expect_items(len(items), req, "embeddings in metadata")
        if type(items) is lazyjson.Offsets:  # added up in C, each a JSON integer
            described = items.described
        else:
            try:
                described = sum(int(item["end"]) - int(item["start"]) for item in items)
            except (KeyError, TypeError, ValueError, OverflowError):
                raise BadResponse("metadata items lack integer start/end offsets") from None
        if described != body.size:
            raise BadResponse("metadata offsets do not match the body: bytes received differ from sum of end - start")
        if rows is not None:
            counts, width = token_rows.rows_of_metadata(items, DTYPE_SIZES[settings.embed_dtype])
            counted = rows.judge_rows(counts, width, tokens, "metadata usage.prompt_tokens", req.input_tokens)
            if context is not None:
                context["vectors"] = counted
    if settings.check_vectors and items:
        if not isinstance(first := items[0], Mapping):
            raise BadResponse("metadata item 0 is not an object")
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
    if settings.check_vectors:  # the head was kept before the dimension was known: the first vector is its start
        _check_raw_vector(body.head[: dims * width], settings.embed_dtype, settings.endianness, settings)
    return dims


def _check_raw_vector(head: bytes, dtype: Any, endianness: Any, settings: Settings) -> None:
    if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
        raise BadResponse(f"unknown embed_dtype {str(dtype)[:20]!r} in the answer")
    if endianness is not None and endianness not in ENDIANNESS:  # a list here is not hashable, but `in` a tuple is fine
        raise BadResponse(f"unknown endianness {str(endianness)[:20]!r} in the answer")
    if (why := vectors.problem(vectors.decode(head, dtype, endianness or settings.endianness))) is not None:
        raise BadResponse(why)


_HEADER_DIGITS = 12


def _header_number(headers: Any, header: str, most: int) -> int | None:
    value = headers.get(header)
    if value is None:
        return None
    # str.isdigit() alone passes '²' and other Unicode digits, which int() then rejects.
    if not isinstance(value, str) or not (value.isascii() and value.isdigit() and len(value) <= _HEADER_DIGITS):
        shown = repr(value[:20]) if isinstance(value, str) else "sent more than once"
        raise BadResponse(f"{header} header is not a whole number: {shown}")
    number = int(value)
    if number > most:
        raise BadResponse(f"{header} header is implausible: {number} (at most {most})")
    return number


def server_headers(headers: Any, context: dict[str, Any]) -> int | None:
    """Copy the server-side timings a server such as TEI sends into context; return its token count."""
    if headers.get(TEI_PRESENCE_HEADER) is None:  # TEI sends them all or none: one lookup, not six
        return None
    for header, key in TEI_TIMING_HEADERS.items():
        if (ms := _header_number(headers, header, MAX_SERVER_MS)) is not None:
            context[key] = ms
    return _header_number(headers, TEI_TOKENS_HEADER, MAX_TOKENS)
