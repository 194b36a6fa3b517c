"""How much of an answer the client keeps: the bounds a hostile or broken server cannot push past.

A JSON answer is parsed whole, so it must be held whole; an endless chunked body or a gzip bomb
would otherwise fill the machine. Binary bodies are streamed and dropped, so they need no bound.
Headers are bounded like common servers bound theirs, by an option. vLLM's own `metadata` header of
a `bytes` answer grows with the batch, about 110 bytes an input (118 KB for 1,024 inputs, which
failed under the 64 KiB default): a `bytes` request's head may be larger by the largest metadata
header a valid answer to its batch can have, so no valid answer fails under the defaults and a
header that never ends still fails once it passes that.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from poolbench_locust.options import BY_FLAG, Settings
from poolbench_locust.wire import DTYPE_SIZES, ENDIANNESS

MB = 1_000_000
KIB = 1024
LIMITS = (BY_FLAG["--max-body-mb"], BY_FLAG["--max-header-kb"])


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
its id, model and usage are what --max-header-kb holds besides."""


@dataclass(frozen=True, slots=True)
class Limits:
    max_body_mb: int = LIMITS[0].default
    max_header_kb: int = LIMITS[1].default

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        return cls(settings.max_body_mb, settings.max_header_kb)

    @property
    def max_body_bytes(self) -> int:
        return self.max_body_mb * MB

    @property
    def max_header_bytes(self) -> int:
        return self.max_header_kb * KIB
