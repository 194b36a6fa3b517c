"""Packed answers (--embedding-type): int8 and uint8 values, binary and ubinary bytes of 8 dimensions each,
Cohere's base64 of little-endian float32; each answer checked in one pass over its values, and the
options that cannot go with a type refused at start.

What is checked, per embedding: a list (a base64 string) of whole numbers in the type's range; with
--dimensions, its length (dimensions / 8 for binary and ubinary, the base64 string's for dimensions x 4
bytes); without, the same length as the answer's first embedding. A JSON integer list is checked in C:
bytes()'s own range check of a small answer's list, byte operations on lazyjson's int64 copy of a large
one's (no Python int built). Whole numbers written as floats (Infinity's `-14.0`) take the slower path
that finds and names the first bad value.
"""

from __future__ import annotations

import base64
import binascii
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from poolbench_locust.endpoints.spec import Endpoint
from poolbench_locust.engine import vectors
from poolbench_locust.engine.body import BadResponse
from poolbench_locust.lazyjson import ARRAY, Numbers
from poolbench_locust.options import OptionError, Settings
from poolbench_locust.wire import BIT_PACKED, PACKED_RANGES

FLOAT32_BYTES = 4


@dataclass(frozen=True, slots=True)
class PackedForm:
    """How the embeddings of one --embedding-type look in a JSON answer."""

    name: str
    low: int = 0
    high: int = 0
    per_value: int = 1
    """Dimensions one value holds: 8 for binary and ubinary."""
    base64: bool = False
    """Each embedding a base64 string of little-endian float32 (Cohere's and vLLM's `base64` type)."""


FORMS: dict[str, PackedForm] = {
    name: PackedForm(name, low, high, 8 if name in BIT_PACKED else 1) for name, (low, high) in PACKED_RANGES.items()
}
FORMS["base64"] = PackedForm("base64", base64=True)


def form(settings: Settings) -> PackedForm | None:
    """The packed form of the answers under `settings`, or None: floats, or --encoding-format's base64 (an
    int8 or uint8 Infinity's base64 is float32 of whole values), checked as ever."""
    if settings.encoding_format != "float":
        return None
    return FORMS.get(settings.embedding_type or "float")


def offered(endpoint: Endpoint, settings: Settings) -> frozenset[str]:
    """The --embedding-type values the endpoint's server answers, for this --model."""
    types = endpoint.embedding_types
    return types(settings.model.strip()) if callable(types) else types


def check_settings(name: str, endpoint: Endpoint, settings: Settings) -> None:
    """Raise OptionError for an --embedding-type the class's server does not answer, or an option that
    cannot go with it. `float` is every embedding class's own answer."""
    kind = settings.embedding_type
    if kind is None:
        return
    where = f"{name} ({endpoint.route})"
    types = offered(endpoint, settings)
    if kind not in types and not (kind == "float" and endpoint.vectors):
        answers = f"its server answers {', '.join(sorted(types))}" if types else "its server answers no packed types"
        if callable(endpoint.embedding_types):  # the types depend on the model (Cohere's API or vLLM's /v2/embed)
            answers += f" for --model {settings.model.strip() or '(none)'}"
        raise OptionError("--embedding-type", f"{where} cannot answer --embedding-type {kind}: {answers}")
    if kind in BIT_PACKED:
        if settings.dimensions is not None and settings.dimensions % 8:
            why = f"{kind} packs 8 dimensions a byte: give a multiple of 8, not {settings.dimensions}"
            raise OptionError("--dimensions", f"{where}: {why}")
        if settings.encoding_format != "float":
            raise OptionError(
                "--encoding-format",
                f"{where}: a {kind} server answers JSON lists only (Infinity: 500 'does not support base64 "
                f"encoding'); leave --encoding-format at float",
            )


def check(embeddings: Sequence[Any], packed: PackedForm, dims: int | None, body: bytes) -> None:
    """Every embedding is of the packed form and of one length: --dimensions' packed length when given."""
    expected = None
    if dims is not None:
        expected = 4 * -(-dims * FLOAT32_BYTES // 3) if packed.base64 else dims // packed.per_value
    # A JSON true or false passes bytes()'s range check as 1 or 0: only a body that holds one has each type read.
    booleans = not packed.base64 and (b"true" in body or b"false" in body)
    first: int | None = None
    for i, vector in enumerate(embeddings):
        if packed.base64:
            if not isinstance(vector, str):
                raise BadResponse(f"embedding {i} is not a base64 string")
        elif not isinstance(vector, ARRAY):
            raise BadResponse(f"embedding {i} is not a list of {packed.name} values")
        else:
            _check_values(vector, i, packed, booleans)
        size = len(vector)
        if expected is not None and size != expected:
            raise BadResponse(f"embedding {i} {_length(size, packed)}, expected {_expected(dims or 0, packed)}")
        if first is None:
            first = size
        elif size != first:
            raise BadResponse(f"embedding {i} {_length(size, packed)}, embedding 0 {_length(first, packed)}")


def _length(size: int, packed: PackedForm) -> str:
    return f"is {size} base64 characters" if packed.base64 else f"has {size} {packed.name} values"


def _expected(dims: int, packed: PackedForm) -> str:
    if packed.base64:
        return f"{4 * -(-dims * FLOAT32_BYTES // 3)} ({dims} float32 values)"
    if packed.per_value > 1:
        return f"{dims // packed.per_value} (--dimensions {dims} / 8)"
    return str(dims)


_PLUS_128 = (128).__add__
"""int8's -128..127 moved to bytes()'s 0..255 (a non-integer gives NotImplemented, which bytes() refuses)."""
_SIGN = bytes(0xFF if byte & 0x80 else 0 for byte in range(256))
"""A low byte -> the byte an int64 of -128..127 repeats above it: its sign, extended."""
_LOW = 7 if sys.byteorder == "big" else 0
"""Where an int64's low byte is in native order."""


def _check_values(vector: Any, i: int, packed: PackedForm, booleans: bool) -> None:
    signed = packed.low < 0
    if isinstance(vector, Numbers):
        raw = vector.as_int64()  # None when a value is not a JSON integer
        if raw is not None and _fits(raw, signed):
            return
        values: Any = vector.values()
    else:
        values = vector
        try:
            bytes(map(_PLUS_128, values) if signed else values)  # in C: integers (or booleans) of the range
            if not booleans or set(map(type, values)) == {int}:
                return
        except (TypeError, ValueError):  # a value out of range or not an integer: named below
            pass
    if (why := _bad_value(values, packed)) is not None:
        raise BadResponse(f"embedding {i} {why}")


def _fits(raw: bytes, signed: bool) -> bool:
    """Whether native int64s all hold a byte: 0..255, or -128..127 (`signed`), with byte operations in C:
    each one's seven high bytes are 0 (or its low byte's sign, extended)."""
    values = bytearray(raw)
    low = bytes(values[_LOW::8])
    fill = low.translate(_SIGN) if signed else bytes(len(low))
    values[_LOW::8] = fill  # each int64 must now be its fill byte 8 times
    expected = bytearray(len(values))
    for k in range(8):
        expected[k::8] = fill
    return values == expected


def _bad_value(values: Sequence[Any], packed: PackedForm) -> str | None:
    """The first value that is not a whole number in the type's range, said; None when there is none."""
    for j, value in enumerate(values):
        if type(value) is float and value.is_integer():  # Infinity writes its integers as floats: -14.0
            value = int(value)
        elif type(value) is not int:
            shown = "null" if value is None else repr(value)[:20]
            return f"value {j} is not a whole number: {shown}"
        if not packed.low <= value <= packed.high:
            return f"value {j} is {value}, outside {packed.name}'s {packed.low}..{packed.high}"
    return None


def check_first(vector: Any, packed: PackedForm) -> None:
    """--check-vectors on a packed answer: its first embedding is not a zero (or NaN) vector, packed: a
    base64 one decoded and looked at as floats; a packed one is not one value repeated."""
    if packed.base64:
        try:
            raw = base64.b64decode(vector, validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise BadResponse("embedding 0 is not valid base64") from None
        if (why := vectors.problem(vectors.decode(raw, "float32", "little"))) is not None:
            raise BadResponse(why)
        return
    values = vector.values() if isinstance(vector, Numbers) else vector
    if not values:
        raise BadResponse("empty embedding")
    try:
        constant = min(values) == max(values)
    except TypeError:  # unchecked (--no-validate) values that are not numbers
        raise BadResponse(f"embedding 0 is not a list of {packed.name} values") from None
    if constant:
        raise BadResponse(f"embedding 0 is {values[0]} in every value: a zero or NaN vector, packed")
