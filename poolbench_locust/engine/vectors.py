"""Decoding one embedding from its wire bytes, for the sampled `--check-vectors` check.

Servers have been seen answering 200 with all-zero or NaN vectors under load; one vector per
answer is enough to catch that without costing the load generator a full decode.
"""

from __future__ import annotations

import math
import struct
import sys
from collections.abc import Sequence
from functools import cache


def _fp8_value(byte: int, exponent_bits: int, mantissa_bits: int, ieee_specials: bool) -> float:
    sign = -1.0 if byte & 0x80 else 1.0
    exponent = (byte >> mantissa_bits) & ((1 << exponent_bits) - 1)
    mantissa = byte & ((1 << mantissa_bits) - 1)
    bias = (1 << (exponent_bits - 1)) - 1
    top = (1 << exponent_bits) - 1
    if ieee_specials and exponent == top:  # e5m2 keeps IEEE infinities and NaNs
        return sign * math.inf if mantissa == 0 else math.nan
    if not ieee_specials and exponent == top and mantissa == (1 << mantissa_bits) - 1:  # e4m3fn: only NaN
        return math.nan
    if exponent == 0:
        return sign * mantissa / (1 << mantissa_bits) * 2.0 ** (1 - bias)
    return sign * (1 + mantissa / (1 << mantissa_bits)) * 2.0 ** (exponent - bias)


@cache
def _fp8_table(dtype: str) -> tuple[float, ...]:
    bits = (4, 3, False) if dtype == "fp8_e4m3" else (5, 2, True)
    return tuple(_fp8_value(b, *bits) for b in range(256))


def decode(raw: bytes, dtype: str, endianness: str) -> Sequence[float]:
    order = {"native": "=", "little": "<", "big": ">"}[endianness]
    if dtype == "float32":
        return struct.unpack(f"{order}{len(raw) // 4}f", raw[: len(raw) // 4 * 4])
    if dtype == "float16":
        return struct.unpack(f"{order}{len(raw) // 2}e", raw[: len(raw) // 2 * 2])
    if dtype == "bfloat16":  # the top half of a float32
        big = order == ">" or (order == "=" and sys.byteorder == "big")
        pairs = (raw[i : i + 2] for i in range(0, len(raw) - 1, 2))
        widened = b"".join(p + b"\0\0" if big else b"\0\0" + p for p in pairs)
        return struct.unpack(f"{'>' if big else '<'}{len(widened) // 4}f", widened)
    table = _fp8_table(dtype)
    return [table[b] for b in raw]


def problem(values: Sequence[float]) -> str | None:
    """Why a vector is not a usable embedding, or None."""
    if not values:
        return "empty embedding"
    if not all(math.isfinite(v) for v in values):
        return "embedding holds NaN or infinite values"
    if not any(values):
        return "embedding is all zeros"
    return None
