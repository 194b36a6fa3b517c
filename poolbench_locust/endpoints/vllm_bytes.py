"""vLLM's binary answers (WIRE.md, "vLLM pooling routes"): `bytes`, raw values described by its `metadata`
header, and `bytes_only`, raw values alone. Both bodies are streamed and dropped but for their first vector.

`bytes`: the header holds one item per input (its offsets, dtype, endianness and shape) and the usage; the
offsets must describe the body exactly. `bytes_only`: only the body's size can be checked, against the
items asked for and a dimension learned from the first good answer (or --dimensions); its tokens are the
client's own count, as nothing else holds one. A token-level `bytes_only` body is Σ rows x width x dtype
bytes: its rows are checked against each input's exact count where the client has one, else its size gives
its tokens once one float answer asked at start (`RawForm.row_probe`) told the rows' width.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from poolbench_locust import lazyjson
from poolbench_locust.endpoints.forms import SERVER_HEADERS, JsonForm, StreamedForm
from poolbench_locust.endpoints.spec import (
    AnswerError,
    AnswerForm,
    Endpoint,
    ParsedAnswer,
    Raw,
    Values,
    ValuesOf,
    token_count,
)
from poolbench_locust.options import Settings
from poolbench_locust.wire import DTYPE_SIZES, ENDIANNESS, METADATA_HEADER

VECTOR_HEAD_LIMIT = 1 << 20
"""Bytes of a binary answer kept for --check-vectors at most: a metadata header that claims a
first vector of a terabyte, or a bytes_only answer whose dimension is not known yet, keeps no more."""

_WIDEST_INT = 2**63 - 1
"""Wider than any offset or dimension a body that can be sent holds."""
SHAPE_DIMS = 3
"""Dimensions of an item's `shape` allowed for: [dim] for an embedding, [tokens, dim] for a token-level
/pooling answer, one more to spare."""
METADATA_ITEM_BYTES = len(
    json.dumps(  # vLLM writes the header with json.dumps: ", " and ": " between items and keys
        {
            "index": _WIDEST_INT,
            "embed_dtype": max(DTYPE_SIZES, key=len),
            "endianness": max(ENDIANNESS, key=len),
            "start": _WIDEST_INT,
            "end": _WIDEST_INT,
            "shape": [_WIDEST_INT] * SHAPE_DIMS,
        }
    )
    + ", "
)
"""The most one input adds to a valid `metadata` header (WIRE.md's item, every field at its widest):
its id, model and usage are what --max-header-kb holds besides. The head of a `bytes` answer may be
larger than --max-header-kb by this much an input (about 110 bytes a valid input: 118 KB for 1,024)."""
METADATA_WHERE = "metadata usage.prompt_tokens"


class BytesForm(StreamedForm):
    """`bytes`: the body described by the `metadata` header."""

    head_allowance = METADATA_ITEM_BYTES
    head_allowance_why = "the largest metadata header of the batch"
    looked_for = SERVER_HEADERS.looked_for(METADATA_WHERE)

    def __init__(self, settings: Settings, token_level: bool, each_item: bool | None = None) -> None:
        self._token_level = token_level  # every item's shape is checked
        self._each_item = token_level if each_item is None else each_item  # orjson reads every item
        self._validate = settings.validate
        self._check_vectors = settings.check_vectors
        self._dtype = settings.embed_dtype
        self._endianness = settings.endianness
        self._width = DTYPE_SIZES[settings.embed_dtype]

    def head(self, headers: Any, hidden: int | None) -> tuple[int, Any]:
        meta = metadata(headers, each_item=self._each_item)
        return (first_vector_size(meta) if self._check_vectors else 0), meta

    def read(self, headers: Any, note: Any, body: bytes, size: int, expected: int) -> ParsedAnswer:
        answer = SERVER_HEADERS.read(headers, self.judge(note, body, size, expected))
        answer.values = self._values(headers)
        return answer

    def _values(self, headers: Any) -> ValuesOf:
        """An item's values from the kept body, where the metadata header says they are (read anew, every
        item: the first reading kept only the offsets' sum)."""

        def values(position: int, body: bytes | None) -> Values:
            if body is None:
                raise ValueError("the binary body was not kept")
            items = metadata(headers, each_item=True)["data"]
            if not 0 <= position < len(items) or not isinstance(item := items[position], Mapping):
                raise AnswerError(f"metadata has no item {position}")
            start, end = item.get("start"), item.get("end")
            if type(start) is not int or type(end) is not int or not 0 <= start <= end <= len(body):
                raise AnswerError(f"metadata item {position} has offsets outside the body")
            dtype, endianness = item.get("embed_dtype", self._dtype), item.get("endianness") or self._endianness
            raw = body[start:end]
            if not self._token_level:
                return Values("vectors", Raw(raw, dtype, endianness))
            shape = item.get("shape")
            width = shape[1] if isinstance(shape, list) and len(shape) == 2 and type(shape[1]) is int else 1
            return Values("rows", Raw(raw, dtype, endianness, width))

        return values

    def judge(self, meta: Mapping[str, Any], head: bytes, size: int, expected: int) -> ParsedAnswer:
        """The metadata against the body: its items, their offsets (and shapes, token-level), its usage."""
        usage = meta.get("usage")
        tokens = token_count(usage.get("prompt_tokens"), METADATA_WHERE) if isinstance(usage, Mapping) else None
        items = meta["data"]
        answer = ParsedAnswer(len(items), tokens, tokens_where=METADATA_WHERE, token_source="metadata")
        if self._validate:
            if len(items) != expected:
                raise AnswerError(f"expected {expected} embeddings in metadata, got {len(items)}")
            if type(items) is lazyjson.Offsets:  # added up in C, each a JSON integer
                described = items.described
            else:
                try:
                    described = sum(int(item["end"]) - int(item["start"]) for item in items)
                except (KeyError, TypeError, ValueError, OverflowError):
                    raise AnswerError("metadata items lack integer start/end offsets") from None
            if described != size:
                raise AnswerError(
                    "metadata offsets do not match the body: bytes received differ from sum of end - start"
                )
            if self._token_level:
                answer.rows = rows_of_metadata(items, self._width)
        if self._check_vectors and items:
            if not isinstance(first := items[0], Mapping):
                raise AnswerError("metadata item 0 is not an object")
            answer.raw = head
            answer.raw_dtype = first.get("embed_dtype", self._dtype)
            answer.raw_endianness = first.get("endianness")
        return answer


def metadata(headers: Any, *, each_item: bool = False) -> dict[str, Any]:
    """The `metadata` header's JSON. Its `data` may be a `lazyjson.Offsets` (its length, its first item and the
    sum of end - start over all) unless `each_item` asks for every item as a dict (token-level shapes)."""
    raw = headers.get(METADATA_HEADER)
    if raw is None:
        raise AnswerError("no metadata header in the bytes answer (use bytes_only for servers that send none)")
    if not isinstance(raw, str):
        raise AnswerError("metadata header sent more than once")
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
        raise AnswerError("metadata header is not valid JSON") from None
    if not isinstance(meta, Mapping) or not isinstance(meta.get("data"), list):
        raise AnswerError("metadata header has no 'data' list")
    return meta


def first_vector_size(meta: Mapping[str, Any]) -> int:
    """Bytes of the first vector per the metadata (0 when it does not say), to keep for --check-vectors."""
    try:
        first = meta["data"][0]
        return min(max(int(first["end"]) - int(first["start"]), 0), VECTOR_HEAD_LIMIT)
    except (IndexError, KeyError, TypeError, ValueError):
        return 0


def _shown_width(width: int) -> str:
    return "1 value" if width == 1 else f"{width} values"


def rows_of_metadata(items: Sequence[Any], dtype_bytes: int) -> tuple[list[int], int]:
    """Each `bytes` metadata item's `shape` ([tokens, dim], or [tokens] for one number a token), checked
    against its own offsets; the rows of each and their one width."""
    rows: list[int] = []
    width: int | None = None
    for i, item in enumerate(items):
        shape = item.get("shape") if isinstance(item, Mapping) else None
        if (
            not isinstance(shape, list)
            or not 1 <= len(shape) <= 2
            or not all(type(n) is int and 0 < n <= 1 << 40 for n in shape)
        ):
            raise AnswerError(f"metadata item {i} has no [tokens, dim] shape")
        item_rows, item_width = shape[0], shape[1] if len(shape) == 2 else 1
        size = int(item["end"]) - int(item["start"])  # integers: the offsets were added up before
        if size != item_rows * item_width * dtype_bytes:
            raise AnswerError(
                f"metadata item {i} shape {shape} does not match its offsets: end - start = {size} bytes, "
                f"the shape says {item_rows * item_width * dtype_bytes}"
            )
        if width is None:
            width = item_width
        elif item_width != width:
            raise AnswerError(f"metadata item {i} has token rows of {_shown_width(item_width)}, expected {width}")
        rows.append(item_rows)
    return rows, width or 0


_RAW_FIELDS = frozenset({"encoding_format", "embed_dtype", "endianness"})
"""The request fields that ask for a binary answer's values (WIRE.md, "encoding_format")."""


class RawForm(StreamedForm):
    """`bytes_only`: raw values alone, items x dimension x dtype bytes (or, token-level, Σ rows x width x
    dtype bytes, which the engine's token-row checks judge). The dimension is learned from the first good
    answer (or --dimensions) and shared by the plan's users."""

    def __init__(self, settings: Settings, token_level: bool) -> None:
        self.dims: int | None = settings.dimensions
        """Embedding dimension: --dimensions, or learned from the first good answer."""
        self._token_level = token_level
        self._validate = settings.validate
        self._check_vectors = settings.check_vectors
        self._dtype = settings.embed_dtype
        self._endianness = settings.endianness
        self._width = DTYPE_SIZES[settings.embed_dtype]
        self._values = self.values_at  # bound once: an answer is given it, never a new closure
        if token_level:
            self.not_compared = "a token-level bytes_only body does not say where each input's rows begin"

    def values_at(self, position: int, body: bytes | None) -> Values:
        """Item `position`'s vector from the kept body: the raw values cut at the learned dimension. A
        token-level body has no boundaries between its inputs' rows: not compared (ValueError)."""
        if body is None:
            raise ValueError("the binary body was not kept")
        if self._token_level:
            raise ValueError("a bytes_only token-level body does not say where each input's rows begin")
        dims, width = self.dims, self._width
        if not dims or position < 0 or len(body) < (position + 1) * dims * width:
            raise AnswerError(f"the bytes_only body holds no vector {position}")
        vector = body[position * dims * width : (position + 1) * dims * width]
        return Values("vectors", Raw(vector, self._dtype, self._endianness))

    def row_probe(self, body: bytes) -> bytes | None:
        """A token-level request asked in float JSON (no embed_dtype, no endianness): its answer gives each
        input's rows and vLLM's usage, which a token-level raw body does not (engine/row_probe.py)."""
        if not self._token_level:
            return None
        doc = orjson.loads(body)  # the plan's own request body: a JSON object
        return orjson.dumps({**{k: v for k, v in doc.items() if k not in _RAW_FIELDS}, "encoding_format": "float"})

    def head(self, headers: Any, hidden: int | None) -> tuple[int, Any]:
        if not self._check_vectors:
            return 0, None
        # Before the dimension (a token row's width) is known, the first vector is somewhere in the first
        # VECTOR_HEAD_LIMIT bytes.
        known = hidden if self._token_level else self.dims
        return (min(known * self._width, VECTOR_HEAD_LIMIT) if known else VECTOR_HEAD_LIMIT), None

    def read(self, headers: Any, note: Any, body: bytes, size: int, expected: int) -> ParsedAnswer:
        answer = ParsedAnswer(expected, client_counted=True, values=self._values)
        if not self._validate:
            return answer
        width = self._width
        if self._token_level:  # Σ tokens x hidden x width: a size of its own each request
            answer.rows_bytes = ("bytes_only body", size)
            answer.raw, answer.raw_dtype, answer.raw_endianness = body, self._dtype, self._endianness
            return answer
        dims = self.dims
        if dims is None:
            if size == 0 or size % (expected * width):
                raise AnswerError(f"bytes_only body of {size} bytes is not {expected} embeddings of {self._dtype}")
            dims = self.dims = size // (expected * width)
        elif size != expected * dims * width:
            raise AnswerError(f"expected {expected} x {dims} x {width} = {expected * dims * width} bytes, got {size}")
        if self._check_vectors:  # the head was kept before the dimension was known: the first vector is its start
            answer.raw, answer.raw_dtype, answer.raw_endianness = body[: dims * width], self._dtype, self._endianness
        return answer


def forms(endpoint: Endpoint, settings: Settings, token_level: bool) -> AnswerForm:
    """The form of a vLLM route's answers in --encoding-format."""
    if settings.encoding_format == "bytes":
        return BytesForm(settings, token_level)
    if settings.encoding_format == "bytes_only":
        return RawForm(settings, token_level)
    return JsonForm(endpoint, settings)
