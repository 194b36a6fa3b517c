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
from typing import Any

from locust import events

from poolbench_locust.options import Option, parsed, register, whole
from poolbench_locust.wire import DTYPE_SIZES, ENDIANNESS

MB = 1_000_000
KIB = 1024

LIMITS = (
    Option(
        "--max-body-mb",
        whole(1),
        256,
        "Largest JSON answer kept in memory, in MB after inflating gzip/deflate; a larger one fails. "
        "Binary bodies are streamed, never kept.",
    ),
    Option(
        "--max-header-kb",
        whole(1),
        64,
        "Largest response head (status line and headers), in KiB. A `bytes` answer's head may be larger "
        "by the largest metadata header a valid answer to its batch can have.",
    ),
)

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


@events.init_command_line_parser.add_listener
def add_arguments(parser: Any) -> None:
    register(parser, "poolbench-locust limits", LIMITS)


@dataclass(frozen=True, slots=True)
class Limits:
    max_body_mb: int = 256
    max_header_kb: int = 64

    @classmethod
    def from_options(cls, options: Any) -> Limits:
        """Parse the options (command line, env or web UI strings); raise OptionError on a bad value."""
        return cls(**{opt.dest: parsed(options, opt) for opt in LIMITS})

    @property
    def max_body_bytes(self) -> int:
        return self.max_body_mb * MB

    @property
    def max_header_bytes(self) -> int:
        return self.max_header_kb * KIB
