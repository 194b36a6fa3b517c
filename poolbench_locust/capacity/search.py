"""The search's arithmetic alone: which rate to probe next, given what the probes so far said.

Doubling from the start rate while probes pass (an upper bound), halving while they fail (a lower one),
then bisection until the highest passing rate and the lowest failing one are within the precision (a
share of the passing rate). It assumes that a rate passes when every lower one does: one noisy probe
can only narrow the bracket on its side, never leave it."""

from __future__ import annotations

from dataclasses import dataclass

MAX_RATE = 1e7
"""Requests/s: a search that still passes here is measuring nothing a server does."""
LOWEST_SHARE = 1 / 1024
"""A search whose probes fail down to this share of its start rate stops: no rate meets the SLO."""


@dataclass
class Search:
    start: float
    precision: float
    passed: float | None = None
    """The highest rate that passed so far."""
    failed: float | None = None
    """The lowest rate that failed so far."""

    def next_rate(self) -> float | None:
        """The next probe's rate, or None when the search is over (the bracket is narrow enough, or it ran off)."""
        if self.failed is None:
            rate = self.start if self.passed is None else 2 * self.passed
            return rate if rate <= MAX_RATE else None
        if self.passed is None:
            rate = self.failed / 2
            return rate if rate >= self.start * LOWEST_SHARE else None
        if self.converged():
            return None
        return (self.passed + self.failed) / 2

    def converged(self) -> bool:
        return (
            self.passed is not None
            and self.failed is not None
            and self.failed - self.passed <= self.precision * self.passed
        )

    def record(self, rate: float, passed: bool) -> None:
        if passed:
            self.passed = rate if self.passed is None else max(self.passed, rate)
        else:
            self.failed = rate if self.failed is None else min(self.failed, rate)
