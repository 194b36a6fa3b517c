"""The run's history of pooling figures: a sample of the pooling table every second, kept on the
runner that shows the figures (the master, or the only process), for PREFIX_pooling_history.csv,
the charts and the JSON result.

A sample is the Aggregated row of `report.rows` (every name's row too with --csv-full-history),
with the time and the user count. Memory stays bounded however long the run: past MAX_SAMPLES,
every other sample is dropped and the interval between samples doubles, so a day's run keeps the
same number of samples as half an hour's, evenly spread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gevent
from locust.env import Environment
from locust.stats import CSV_STATS_INTERVAL_SEC

from poolbench_locust.metrics.collector import PoolingStats
from poolbench_locust.metrics.report import rows

MAX_SAMPLES = 1800
"""Half an hour at one sample a second; a longer run keeps this many, further apart."""

Sample = dict[str, Any]
"""{"time": epoch seconds, "user_count": users, "rows": [row, ...]}: rows as `report.rows` makes them,
the Aggregated row last (and alone unless --csv-full-history)."""


@dataclass
class History:
    samples: list[Sample] = field(default_factory=list)
    interval: float = CSV_STATS_INTERVAL_SEC
    """Seconds between kept samples: doubles each time the list is thinned."""
    _skip: int = 0
    """Samples still to skip before the next one is kept, once the interval has grown."""

    def add(self, sample: Sample) -> bool:
        """Keep the sample if it falls on the current interval; True if it was kept."""
        if self._skip:
            self._skip -= 1
            return False
        self.samples.append(sample)
        if len(self.samples) > MAX_SAMPLES:
            del self.samples[1::2]
            self.interval *= 2
        self._skip = round(self.interval / CSV_STATS_INTERVAL_SEC) - 1
        return True

    def clear(self) -> None:
        self.samples.clear()
        self.interval = CSV_STATS_INTERVAL_SEC
        self._skip = 0


def history_of(environment: Environment) -> History:
    """The environment's history (created on first use, one per environment)."""
    history = getattr(environment, "poolbench_history", None)
    if history is None:
        history = environment.poolbench_history = History()  # type: ignore[attr-defined]
    return history


def take_sample(environment: Environment, stats: PoolingStats) -> Sample:
    full = bool(getattr(environment.parsed_options, "stats_history_enabled", False))
    table = rows(stats)
    runner = environment.runner
    return {
        "time": time.time(),
        "user_count": runner.user_count if runner is not None else 0,
        "rows": table if full else table[-1:],
    }


def sample_while_running(
    environment: Environment, stats: PoolingStats, on_sample: Callable[[Sample], None] | None = None
) -> None:
    """Run forever in a greenlet: one sample per interval while users run; `on_sample` sees every one
    (the CSV writer writes a row per second, as Locust's PREFIX_stats_history.csv does)."""
    history = history_of(environment)
    while True:
        gevent.sleep(CSV_STATS_INTERVAL_SEC)
        runner = environment.runner
        if runner is None or runner.state not in ("spawning", "running"):
            continue
        sample = take_sample(environment, stats)
        history.add(sample)
        if on_sample is not None:
            on_sample(sample)
