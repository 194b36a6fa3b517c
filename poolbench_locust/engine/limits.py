"""How much of an answer the client keeps: the bounds a hostile or broken server cannot push past.

A JSON answer is parsed whole, so it must be held whole; an endless chunked body or a gzip bomb
would otherwise fill the machine. Binary bodies are streamed and dropped, so they need no bound.
Headers are bounded like common servers bound theirs: vLLM's `metadata` header of a large `bytes`
batch is tens of kilobytes, hence a generous default and an option.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from poolbench_locust.options import BY_FLAG, parsed

MB = 1_000_000
KIB = 1024
LIMITS = (BY_FLAG["--max-body-mb"], BY_FLAG["--max-header-kb"])


@dataclass(frozen=True, slots=True)
class Limits:
    max_body_mb: int = LIMITS[0].default
    max_header_kb: int = LIMITS[1].default

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
