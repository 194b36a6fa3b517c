"""The repeats' table: one row per repeat (PREFIX_repeats.csv, the console, the JSON result's
`repeats`), then the mean and the 95 % confidence interval of each headline figure (batch_means.py: checked
for the correlation of consecutive repeats, widened or refused).

Locust's stats are reset between repeats (repeat_runs.py), so a repeat's figures are the stats as
they stand when it ends: requests/s and input tokens/s over its own seconds, E2E p50/p99 from the
pooling stats' precise histogram (as the sweep's step table), and the answers compared with their
reference in it (its consistency window, consistency/state.py)."""

from __future__ import annotations

import csv
import dataclasses
from typing import Any

from locust.env import Environment

from poolbench_locust.consistency.state import TOTAL, WINDOW_COLUMNS, consistency_of, window_cells
from poolbench_locust.metrics.collector import stats_of
from poolbench_locust.metrics.histogram import Histogram, difference
from poolbench_locust.metrics.table import shown_ms
from poolbench_locust.repeats.batch_means import CHECK_MIN, METHOD, PHI_REFUSED, Interval, batch_interval
from poolbench_locust.texttable import aligned

HEADLINE = (
    ("requests_per_s", "Requests/s"),
    ("input_tokens_per_s", "Input Tokens/s"),
    ("e2e_p50_ms", "E2E 50%"),
    ("e2e_p99_ms", "E2E 99%"),
)
"""The figures given as mean and interval: the JSON key (`<key>_ci95` at the result's top level), the column."""
REPEAT_COLUMNS = ["Repeat", "Seconds", "Request Count", "Failure Count", *(title for _, title in HEADLINE)]
CSV_COLUMNS = [*REPEAT_COLUMNS, *(title for title, _ in WINDOW_COLUMNS)]
ANSWER_COLUMNS = ["Identical %", "Cos Min"]
"""The console's columns of the answers compared in each repeat, shown when any repeat compared one."""


class RepeatTable:
    """The repeats that have ended, each a dict with the JSON result's keys."""

    def __init__(self, environment: Environment, planned: int) -> None:
        self.environment = environment
        self.planned = planned
        self.repeats: list[dict[str, Any]] = []

    def close(self, seconds: float) -> None:
        """The repeat that just ended, after `seconds` of counting: its figures are the stats as they stand."""
        total = self.environment.runner.stats.total  # type: ignore[union-attr]
        pooling = stats_of(self.environment).total
        e2e = Histogram()
        e2e.merge(difference(pooling.timings["e2e"].dump(), None))
        seconds = max(seconds, 1e-9)
        self.repeats.append(
            {
                "repeat": len(self.repeats) + 1,
                "seconds": round(seconds, 3),
                "requests": total.num_requests,
                "failures": total.num_failures,
                "requests_per_s": round(total.num_requests / seconds, 3),
                "input_tokens_per_s": round(pooling.input_tokens / seconds, 1),
                "e2e_p50_ms": shown_ms(e2e.percentile(0.50)),
                "e2e_p99_ms": shown_ms(e2e.percentile(0.99)),
                "consistency": consistency_of(self.environment).close_window(),
            }
        )

    def open(self) -> None:
        """The next repeat begins: its answers compared are its own (a window labelled with its number)."""
        consistency_of(self.environment).open_window(f"repeat {len(self.repeats) + 1}")

    def intervals(self) -> dict[str, Interval | None]:
        """Each headline figure's mean and checked interval over the repeats (batch_means.py); None with
        fewer than two. Every headline figure is a rate or a time, never below zero: nor is the low end."""
        found = {key: batch_interval([r[key] for r in self.repeats if r[key] is not None]) for key, _ in HEADLINE}
        return {
            key: dataclasses.replace(v, low=max(v.low, 0.0)) if v is not None and v.low is not None else v
            for key, v in found.items()
        }

    def summary_rows(self) -> list[list[Any]]:
        found = self.intervals().values()
        means = [round(v.mean, 3) if v else "" for v in found]
        lows = [round(v.low, 3) if v and v.low is not None else "" for v in found]
        highs = [round(v.high, 3) if v and v.high is not None else "" for v in found]
        return [["mean", "", "", "", *means], ["ci95_low", "", "", "", *lows], ["ci95_high", "", "", "", *highs]]

    def rows(self) -> list[list[Any]]:
        return [
            [r["repeat"], r["seconds"], r["requests"], r["failures"], *(r[k] for k, _ in HEADLINE)]
            for r in self.repeats
        ]

    def write(self, path: str) -> None:
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(CSV_COLUMNS)
            cells = (window_cells(r["consistency"]).values() for r in self.repeats)
            writer.writerows(
                [*row, *("" if v is None else v for v in more)] for row, more in zip(self.rows(), cells, strict=True)
            )
            writer.writerows(self.summary_rows())

    def console(self) -> str:
        """The repeats and one line per headline figure: mean [low, high]."""
        rows = [[("" if c is None else str(c)) for c in row] for row in self.rows()]
        header = list(REPEAT_COLUMNS)
        if any(r["consistency"] for r in self.repeats):
            header += ANSWER_COLUMNS
            for cells, r in zip(rows, self.repeats, strict=True):
                total = (r["consistency"] or {}).get(TOTAL, {})
                identical, cosine = total.get("identical_ratio"), total.get("cosine_min")
                cells += [
                    "" if identical is None else f"{100 * identical:.1f}",
                    "" if cosine is None else f"{cosine:.6f}",
                ]
        lines = ["Repeats", *aligned([header, *rows])]
        for (_, title), found in zip(HEADLINE, self.intervals().values(), strict=True):
            if found is not None:
                lines.append(f"{title}: {interval_line(found)}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The JSON result's `repeats`, the `<figure>_ci95` keys and `repeats_interval` at its top level."""
        out: dict[str, Any] = {"repeats": list(self.repeats)}
        found = self.intervals()
        for key, v in found.items():
            out[f"{key}_ci95"] = (
                [round(v.low, 3), round(v.high, 3)] if v and v.low is not None and v.high is not None else None
            )
        out["repeats_interval"] = {
            "method": METHOD,
            "check_min_repeats": CHECK_MIN,
            "phi_refused": PHI_REFUSED,
            "figures": {key: v.as_dict() if v else None for key, v in found.items()},
        }
        return out


def interval_line(found: Interval) -> str:
    """A figure's mean, and its interval with what the check found, or why there is none."""
    if found.low is None or found.high is None:
        return f"{found.mean:,.3f} (mean of {found.windows} repeats; {found.reason()})"
    check = "" if found.lag1 is None else f", lag-1 autocorrelation {found.lag1:.2f}"
    widened = f", widened x{found.widened_by:.2f} for correlated repeats" if found.verdict == "widened" else ""
    return f"{found.mean:,.3f} (95 % CI {found.low:,.3f} .. {found.high:,.3f}, {found.windows} repeats{check}{widened})"
