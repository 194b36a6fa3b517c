"""How much of an answer the client keeps: the bounds a hostile or broken server cannot push past.

A JSON answer is parsed whole, so it must be held whole; an endless chunked body or a gzip bomb
would otherwise fill the machine. Binary bodies are streamed and dropped, so they need no bound.
Headers are bounded like common servers bound theirs, by an option. An answer form whose header grows
with the batch (vLLM's `metadata`: 118 KB for 1,024 inputs, which failed under the 64 KiB default)
declares what each input may add (`AnswerForm.head_allowance`): a request's head may be larger by the
largest header a valid answer to its batch can have, so no valid answer fails under the defaults and a
header that never ends still fails once it passes that.
"""

from __future__ import annotations

from dataclasses import dataclass

from poolbench_locust.options import BY_FLAG, Settings

MB = 1_000_000
KIB = 1024
LIMITS = (BY_FLAG["--max-body-mb"], BY_FLAG["--max-header-kb"])


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
