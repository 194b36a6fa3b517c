"""A sweep's step table: one row per step (PREFIX_sweep.csv, the JSON result, the charts' knee sheet),
the figures since the step began, the answers compared in the step among them (its consistency window,
consistency/state.py), so that the load at which answers begin to drift shows.

A step's E2E percentiles come from the pooling stats' precise histogram (0.05 %), as the Pooling
table's do: Locust's own response times keep two significant digits, so a server answering in
263.5 ms showed 260 or 270 and two steps a knee apart could show the same figure."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from typing import Any

from locust.env import Environment

from poolbench_locust.consistency.state import WINDOW_COLUMNS, consistency_of, window_cells
from poolbench_locust.metrics.collector import stats_of
from poolbench_locust.metrics.histogram import Histogram, difference
from poolbench_locust.metrics.table import PERCENTILES, shown_ms

STEP_COLUMNS = [
    "Step",
    "Target",
    "Seconds",
    "Request Count",
    "Failure Count",
    "Requests/s",
    "Input Tokens/s",
    "E2E 50%",
    "E2E 90%",
    "E2E 95%",
    "E2E 99%",
    *(title for title, _ in WINDOW_COLUMNS),
]


class StepTable:
    """The rows of the steps that have ended, from the figures at each step's start (its mark)."""

    def __init__(self, environment: Environment, targets: Sequence[float]) -> None:
        self.environment = environment
        self.targets = targets
        self.rows: list[list[Any]] = []
        self.consistency: list[dict[str, Any] | None] = []
        """Each row's answers compared in its step: each name's figures and the total's; None when none was."""
        self._mark: dict[str, Any] | None = None

    def _snapshot(self, at: float) -> dict[str, Any]:
        total = self.environment.runner.stats.total  # type: ignore[union-attr]
        pooling = stats_of(self.environment).total
        return {
            "requests": total.num_requests,
            "failures": total.num_failures,
            "e2e": pooling.timings["e2e"].dump(),
            "tokens": pooling.input_tokens,
            "at": at,
        }

    def close(self, step: int, at: float) -> None:
        """Write the row of `step`, which just ended at `at` (figures since the previous mark), and mark now."""
        now = self._snapshot(at)
        compared = consistency_of(self.environment).close_window()
        if self._mark is not None and step >= 0:
            before = self._mark
            seconds = max(now["at"] - before["at"], 1e-9)
            count = now["requests"] - before["requests"]
            e2e = Histogram()
            e2e.merge(difference(now["e2e"], before["e2e"]))
            self.rows.append(
                [
                    step + 1,
                    self.targets[step],
                    round(seconds, 1),
                    count,
                    now["failures"] - before["failures"],
                    round(count / seconds, 2),
                    round((now["tokens"] - before["tokens"]) / seconds, 1),
                    *(shown_ms(e2e.percentile(p)) if e2e.n else "" for p in PERCENTILES),
                    *("" if v is None else v for v in window_cells(compared).values()),
                ]
            )
            self.consistency.append(compared)
        self._mark = now

    def restart(self, at: float) -> None:
        """The stats were reset (the end of --warmup, or the web UI's button): the step's figures start
        again from zero now, so its seconds do too; a mark from before would make them negative."""
        if self._mark is not None:
            self._mark = {"requests": 0, "failures": 0, "e2e": None, "tokens": 0, "at": at}

    def write(self, path: str) -> None:
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(STEP_COLUMNS)
            writer.writerows(self.rows)
