"""One process's state of the consistency check (docs/consistency.md): its references, its tallies, and
the reference requests a worker sent that the server counts and the stats do not (the server metrics'
reconciliation adds them to the client's side)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from locust.env import Environment

from poolbench_locust.consistency.measures import Comparison
from poolbench_locust.consistency.tally import Tally
from poolbench_locust.store import Slot

TOTAL = "total"
FIGURES = (
    "compared",
    "identical_ratio",
    "cosine_min",
    "cosine_p01",
    "abs_diff_max",
    "top1_changed_ratio",
    "kendall_tau_min",
    "labels_changed_ratio",
    "hamming_max",
)
"""The figures shown, in the order shown; each present only where it applies (Tally.figures)."""


@dataclasses.dataclass
class Sent:
    """Reference requests answered well: what the server counts of them."""

    requests: int = 0
    sequences: int = 0
    input_tokens: int = 0

    def add(self, other: Sent) -> None:
        self.requests += other.requests
        self.sequences += other.sequences
        self.input_tokens += other.input_tokens


@dataclasses.dataclass
class Consistency:
    """One process's references and tallies."""

    references: dict[str, dict[int, Sequence[float]]] = dataclasses.field(default_factory=dict)
    """By request name (the event's `name`, the plan's label): reference id -> its values."""
    kinds: dict[str, str] = dataclasses.field(default_factory=dict)
    """By request name: "vectors" or "scores", how its answers are compared."""
    tallies: dict[str, Tally] = dataclasses.field(default_factory=dict)
    """By request name, since the run began (the master's: merged from the workers)."""
    unshipped: dict[str, Tally] = dataclasses.field(default_factory=dict)
    """A worker's: what it tallied since its last report to the master."""
    skipped: int = 0
    """Answers that could not be compared (a value the measures refuse)."""
    sent: Sent = dataclasses.field(default_factory=Sent)
    """Reference requests sent after the server metrics' baseline: a worker's (its test_start comes after
    the master's, where the scrape begins; a local run takes its references before), and the master's
    merged from them. The reconciliation counts them on the client's side."""
    unshipped_sent: Sent = dataclasses.field(default_factory=Sent)

    def reset(self) -> None:
        self.tallies.clear()
        self.unshipped.clear()
        self.skipped = 0
        self.sent = Sent()
        self.unshipped_sent = Sent()

    def add(self, name: str, comparison: Comparison, ship: bool) -> None:
        self.tallies.setdefault(name, Tally()).add(comparison)
        if ship:
            self.unshipped.setdefault(name, Tally()).add(comparison)

    def total(self) -> Tally:
        total = Tally()
        for tally in self.tallies.values():
            total.merge(tally)
        return total

    def figures(self) -> dict[str, dict[str, Any]] | None:
        """Each name's figures and the total's, or None when nothing was compared."""
        if not self.tallies:
            return None
        found = {name: self.tallies[name].figures() for name in sorted(self.tallies)}
        found[TOTAL] = self.total().figures()
        return found

    def rows(self) -> list[dict[str, Any]]:
        """The table: each name's row, then the total's; a figure that does not apply is None."""
        figures = self.figures() or {}
        return [{"Name": name, **{f: found.get(f) for f in FIGURES}} for name, found in figures.items()]


_STATE = Slot("consistency", Consistency)


def consistency_of(environment: Environment) -> Consistency:
    return _STATE.of(environment)
