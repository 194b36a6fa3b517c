"""The values some options parse to: more than a number or a text, each with the little it does."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class Span:
    """A whole number, fixed (`8`) or drawn uniformly from a range (`4:16`) for each request."""

    lo: int
    hi: int

    def draw(self, rng: random.Random) -> int:
        return self.lo if self.lo == self.hi else rng.randint(self.lo, self.hi)

    def __str__(self) -> str:
        return str(self.lo) if self.lo == self.hi else f"{self.lo}:{self.hi}"


@dataclass(frozen=True, slots=True)
class Slo:
    """--slo: upper bounds in ms (a request meets one when its time is at most the bound); None: no bound.

    And the answers' terms, which no single request is judged by (`met` ignores them): `cosine`, the lowest
    cosine of an answer compared with its reference, and `top1_changed`, the highest share of compared
    rerank or score answers whose best document changed. They are figures of a window of load, so
    --find-capacity judges each probe by them (capacity/probes.py; docs/consistency.md)."""

    e2e_ms: float | None = None
    ttfb_ms: float | None = None
    transfer_ms: float | None = None
    """End-to-end minus time to headers minus the open loop's queueing: the body on the wire."""
    cosine: float | None = None
    """In (-1, 1]: a probe with a compared answer whose cosine is below it fails."""
    top1_changed: float | None = None
    """In [0, 1]: a probe whose share of compared answers with another best document is above it fails."""

    def met(self, e2e_ms: float, context: Mapping[str, Any]) -> bool:
        """Whether a successful request's times met every bound (a time it lacks meets none)."""
        if self.e2e_ms is not None and not e2e_ms <= self.e2e_ms:
            return False
        ttfb = context.get("ttfb_ms")
        if self.ttfb_ms is not None and not (ttfb is not None and ttfb <= self.ttfb_ms):
            return False
        if self.transfer_ms is not None:
            if ttfb is None:
                return False
            transfer = max(e2e_ms - ttfb - (context.get("queue_ms") or 0.0), 0.0)
            if not transfer <= self.transfer_ms:
                return False
        return True

    def __str__(self) -> str:
        bounds = ((f.name, getattr(self, f.name)) for f in fields(self))
        return ",".join(f"{key}={bound:g}" for key, bound in bounds if bound is not None)


SLO_KEYS = tuple(f.name for f in fields(Slo))
ANSWER_KEYS = ("cosine", "top1_changed")
"""The --slo terms on the answers, not on a request's times."""
TIME_KEYS = tuple(key for key in SLO_KEYS if key not in ANSWER_KEYS)
"""The --slo terms in ms."""
ANSWER_TERMS = "cosine=X in (-1, 1], top1_changed=R in [0, 1]"
"""How the answers' terms are written, for help and error texts."""


@dataclass(frozen=True, slots=True)
class ExtraBody:
    """--extra-body: a JSON object kept as its canonical text (sorted keys, no spaces), so that Settings
    stay hashable (they key the plans) and two spellings of one object are one value."""

    text: str

    def fields(self) -> dict[str, Any]:
        """The object, a fresh dict each call: merged into request bodies, never shared by two."""
        value = json.loads(self.text)
        assert isinstance(value, dict)  # the parser let nothing else in
        return value

    def names(self) -> tuple[str, ...]:
        return tuple(self.fields())

    def __str__(self) -> str:
        return self.text
