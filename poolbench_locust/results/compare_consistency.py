"""poolbench-compare's answer consistency tables: the JSON result's `consistency` (docs/consistency.md), run
against run, one table per request name and the total's, where a run compared any answer.

Which change is beyond noise: a share (identical, top-1 changed, labels changed) is a count of answers out
of `compared`, so its noise is a binomial one (the standard error of a share of `compared` answers, a
Jeffreys estimate so that a share of 0 or 1 has some); a minimum (cosine, Kendall's tau) is the one worst
answer the server gave, with no noise: any change of it is marked. A worse share is judged in points, not
relative to the base's: from 0 % to 30 % of top documents changed is 30 points worse, where a relative
change from 0 would be nothing. --max-regression 5% then fails a run whose identical share fell by more
than 5 points, or whose cosine min fell by more than 5 %.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from poolbench_locust.results.noise import Change, Figure, Z, value

TOTAL = "total"
SOURCE = "consistency"
SHARES = frozenset(("identical_ratio", "top1_changed_ratio", "labels_changed_ratio"))
"""Figures that are shares of the compared answers: their noise is binomial, their change judged in points."""


def _none(_: Any) -> None:
    return None  # the consistency figures have no per-second blocks: their noise is known without them


FIGURES: tuple[Figure, ...] = (
    Figure("Identical share", "higher", SOURCE, "identical_ratio", _none),
    Figure("Cosine min", "higher", SOURCE, "cosine_min", _none),
    Figure("Cosine 1st percentile", "higher", SOURCE, "cosine_p01", _none),
    Figure("Top-1 changed share", "lower", SOURCE, "top1_changed_ratio", _none),
    Figure("Kendall tau min", "higher", SOURCE, "kendall_tau_min", _none),
    Figure("Labels changed share", "lower", SOURCE, "labels_changed_ratio", _none),
)


@dataclass(frozen=True)
class PointsChange(Change):
    """A share's change: how much worse is its difference itself (points), whatever the base."""

    def worse_by(self, figure: Figure) -> float:
        delta = self.delta or 0.0
        return max(-delta if figure.better == "higher" else delta, 0.0)


def judge(
    figure: Figure, base: float | None, new: float | None, base_error: float | None, new_error: float | None
) -> Change:
    """noise.change without the histogram's resolution (a figure here is no bucketed time): Z standard errors
    of the difference; a share's change judged in points (PointsChange)."""
    kind = PointsChange if figure.column in SHARES else Change
    if base is None or new is None or base_error is None or new_error is None:
        return kind(base, new, None)
    return kind(base, new, Z * math.hypot(base_error * base, new_error * new))


def figures_of(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A result's `consistency`: each name's figures, only those whose `compared` is a count above 0."""
    found = doc.get("consistency")
    if not isinstance(found, dict):
        return {}
    out = {}
    for name, figures in found.items():
        if isinstance(name, str) and isinstance(figures, dict):
            compared = figures.get("compared")
            if type(compared) is int and compared > 0:
                out[name] = figures
    return out


def relative_error(figure: Figure, figures: dict[str, Any] | None) -> float | None:
    """The figure's standard error over its value: binomial for a share, 0 for a minimum; None if unknown."""
    if figures is None or (found := value(figures.get(figure.column))) is None:
        return None
    if figure.column not in SHARES:
        return 0.0
    compared = figures["compared"]
    if not 0.0 <= found <= 1.0:
        return None
    share = (found * compared + 0.5) / (compared + 1)  # Jeffreys: a share of 0 or 1 is not certain
    error = math.sqrt(share * (1 - share) / compared)
    return error / found if found else 0.0


@dataclass
class Table:
    """One name's consistency figures in each run (compare.py makes it a ComparedSection)."""

    title: str
    figures: tuple[Figure, ...]
    rows: list[dict[str, dict[str, Any]] | None]
    """Per run: {"consistency": the name's figures}, or None where the run compared none of its answers."""
    errors: list[dict[str, float | None]]
    """Per run: figure title -> relative error (relative_error)."""


def tables(docs: Sequence[dict[str, Any]]) -> list[Table]:
    """One table per request name that a run compared answers of, then the total's."""
    per_run = [figures_of(doc) for doc in docs]
    names = [n for found in per_run for n in found if n != TOTAL]
    names = [*dict.fromkeys(names), *([TOTAL] if any(TOTAL in found for found in per_run) else [])]
    out = []
    for name in names:
        found = [f.get(name) for f in per_run]
        shown = tuple(fig for fig in FIGURES if any(value((f or {}).get(fig.column)) is not None for f in found))
        if not shown:
            continue
        counts = " vs ".join("-" if f is None else f"{f['compared']:,}" for f in found)
        out.append(
            Table(
                f"consistency {name} (compared {counts})",
                shown,
                [None if f is None else {SOURCE: f} for f in found],
                [{fig.title: relative_error(fig, f) for fig in shown} for f in found],
            )
        )
    return out
