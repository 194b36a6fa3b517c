"""The one embedding the mock serves, as cached wire bytes per (dim, dtype, endianness, kind).

Every vector is the same 64-value pattern repeated to `dim`, so a body is built by bytes
multiplication and joins, never by a per-element Python loop. The values are odd multiples of
1/128 in (-0.5, 0.5): exact in float32, float16 and bfloat16, never zero, and their JSON text is short.

The `drift` kind is that vector turned away from itself (faults.py's --drift-above, --cache-drift): the
first value of every period negated (-63/128 becomes 63/128; in fp8 its sign bit set). Its norm, its
dimension and every other value are the honest vector's, so only a comparison with the honest vector
finds it: their cosine is 1 - 2 * 63**2 / 87360 = 1891/2080 (0.909135) exactly where the dimension is a
multiple of 64 (a shorter tail of a period lowers it a little), in every encoding of float32, float16 or
bfloat16, whose values are exact.
"""

from __future__ import annotations

import base64
import math
import struct
import sys
from functools import lru_cache
from typing import Literal

import orjson

from poolbench_locust.wire import DTYPE_SIZES

Kind = Literal["values", "zero", "nan", "drift"]
PERIOD = 64
VALUES: tuple[float, ...] = tuple((2 * k - 63) / 128 for k in range(PERIOD))
DRIFTED: tuple[float, ...] = (-VALUES[0], *VALUES[1:])
DRIFT_COSINE = 1891 / 2080
"""The cosine of a drifted vector with the honest one, for a dimension that is a multiple of PERIOD."""
# Exponent fields 4..7 (e4m3) / 8..15 (e5m2), half of them negative: finite, non-zero, never NaN.
_FP8 = bytes((0x20 + k % 32) | (0x80 if k >= 32 else 0) for k in range(PERIOD))
_FP8_NAN = 0x7F  # e4m3fn and e5m2 both read S.1111.111 as NaN
_FP8_DRIFTED = bytes([_FP8[0] ^ 0x80]) + _FP8[1:]  # the sign bit: the first value negated, exactly


def _order(endianness: str) -> str:
    if endianness == "native":
        endianness = sys.byteorder
    return ">" if endianness == "big" else "<"


def _period(dtype: str, endianness: str, kind: Kind) -> bytes:
    """PERIOD elements of the vector in `dtype`, the unit every vector repeats."""
    size = DTYPE_SIZES[dtype]
    if kind == "zero":
        return bytes(PERIOD * size)
    if dtype.startswith("fp8"):
        return bytes([_FP8_NAN]) * PERIOD if kind == "nan" else _FP8_DRIFTED if kind == "drift" else _FP8
    values = (math.nan,) * PERIOD if kind == "nan" else DRIFTED if kind == "drift" else VALUES
    order = _order(endianness)
    if dtype == "float16":
        return struct.pack(f"{order}{PERIOD}e", *values)
    wide = struct.pack(f"{order}{PERIOD}f", *values)
    if dtype == "float32":
        return wide
    # bfloat16 is the high half of a float32: its first two bytes big-endian, last two little-endian.
    high = slice(0, 2) if order == ">" else slice(2, 4)
    return b"".join(wide[i : i + 4][high] for i in range(0, len(wide), 4))


@lru_cache(maxsize=256)
def raw(dim: int, dtype: str, endianness: str, kind: Kind = "values") -> bytes:
    """One vector's raw array, as `bytes`/`bytes_only` bodies and base64 strings carry it."""
    unit = _period(dtype, endianness, kind)
    return (unit * -(-dim // PERIOD))[: dim * DTYPE_SIZES[dtype]]


def floats(dim: int, kind: Kind = "values") -> list[float]:
    """One vector's values, of kind `values` or `drift`."""
    return (list(DRIFTED if kind == "drift" else VALUES) * -(-dim // PERIOD))[:dim]


@lru_cache(maxsize=64)
def json_floats(dim: int, kind: Kind = "values") -> bytes:
    """One vector as a JSON list of numbers (NaN as the bare token Python's json module writes)."""
    if kind in ("values", "drift"):
        return orjson.dumps(floats(dim, kind))
    token = b"0.0" if kind == "zero" else b"NaN"
    return b"[" + b",".join([token] * dim) + b"]"


@lru_cache(maxsize=256)
def json_base64(dim: int, dtype: str, endianness: str, kind: Kind = "values") -> bytes:
    """One vector as a JSON string: base64 of its raw array."""
    return b'"' + base64.b64encode(raw(dim, dtype, endianness, kind)) + b'"'
