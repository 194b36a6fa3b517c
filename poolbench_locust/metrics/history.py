"""The run's history of pooling figures: a sample of the pooling table every second, kept on the
runner that shows the figures (the master, or the only process), for PREFIX_pooling_history.csv,
the charts and the JSON result.

A sample is the Aggregated row of `table.rows` (every name's row too with --csv-full-history),
with the time, the user count and the TTFB and E2E percentiles of the requests of the last
WINDOW_SECONDS (the run's percentiles flatten as the run grows; a chart needs the current ones).
Memory stays bounded however long the run: past MAX_SAMPLES, every other sample is dropped and the
interval between samples doubles, so a day's run keeps the same number of samples as half an
hour's, evenly spread.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gevent
from locust.env import Environment
from locust.stats import CSV_STATS_INTERVAL_SEC, CURRENT_RESPONSE_TIME_PERCENTILE_WINDOW

from poolbench_locust.metrics.collector import Entry, PoolingStats
from poolbench_locust.metrics.histogram import difference
from poolbench_locust.metrics.table import rows
from poolbench_locust.store import Slot

MAX_SAMPLES = 1800
"""Half an hour at one sample a second; a longer run keeps this many, further apart."""

WINDOW_SECONDS = CURRENT_RESPONSE_TIME_PERCENTILE_WINDOW
"""As Locust's current response time percentiles: the requests of the last 10 s."""
WINDOW_TIMINGS = (("ttfb", "TTFB"), ("e2e", "E2E"))
WINDOW_PERCENTILES = (0.50, 0.95)


def window_column(title: str, fraction: float) -> str:
    return f"Current {title} {round(fraction * 100)}%"


WINDOW_COLUMNS = [window_column(title, p) for _, title in WINDOW_TIMINGS for p in WINDOW_PERCENTILES]
"""Added to every row of a sample: ms, None when no request ended in the window."""

Sample = dict[str, Any]
"""{"time": epoch seconds, "user_count": users, "rows": [row, ...]}: rows as `table.rows` makes them
plus WINDOW_COLUMNS, the Aggregated row last (and alone unless --csv-full-history)."""

Snapshot = dict[str | None, tuple[Entry, dict[str, dict[str, Any]]]]
"""Request name (None for the total) -> its entry and its timings' dumps, at one tick. The entry
tells a reset apart: Locust's reset replaces every entry, and a count alone may come out equal."""


class Window:
    """The timing histograms of the last WINDOW_SECONDS ticks: the difference between now and the
    oldest is the distribution of the requests of the window. Bounded: WINDOW_SECONDS + 1 dumps."""

    def __init__(self) -> None:
        self.snapshots: deque[Snapshot] = deque(maxlen=round(WINDOW_SECONDS / CSV_STATS_INTERVAL_SEC) + 1)

    def clear(self) -> None:
        self.snapshots.clear()

    def figures(self, entries: list[tuple[str | None, Entry]]) -> list[dict[str, Any]]:
        """WINDOW_COLUMNS of each (name, entry) for this tick; this tick's dumps are kept for the next ones."""
        now: Snapshot = {name: (e, {key: e.timings[key].dump() for key, _ in WINDOW_TIMINGS}) for name, e in entries}
        oldest = self.snapshots[0] if self.snapshots else {}
        figures = []
        for name, entry in entries:
            then = oldest.get(name)
            before = then[1] if then is not None and then[0] is entry else {}
            values: dict[str, Any] = {}
            for key, title in WINDOW_TIMINGS:
                histogram = type(entry.timings[key])()
                histogram.merge(difference(now[name][1][key], before.get(key)))
                for p in WINDOW_PERCENTILES:
                    values[window_column(title, p)] = histogram.percentile(p) if histogram.n else None
            figures.append(values)
        self.snapshots.append(now)
        return figures


@dataclass
class History:
    samples: list[Sample] = field(default_factory=list)
    interval: float = CSV_STATS_INTERVAL_SEC
    """Seconds between kept samples: doubles each time the list is thinned."""
    _skip: int = 0
    """Samples still to skip before the next one is kept, once the interval has grown."""
    window: Window = field(default_factory=Window)

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
        self.window.clear()


_HISTORY = Slot("history", History)


def history_of(environment: Environment) -> History:
    """The environment's history (created on first use, one per environment)."""
    return _HISTORY.of(environment)


def take_sample(environment: Environment, stats: PoolingStats) -> Sample:
    """One tick's sample; call it once a tick (the window of current percentiles moves with it)."""
    full = bool(getattr(environment.parsed_options, "stats_history_enabled", False))
    entries: list[tuple[str | None, Entry]] = [*((e.name, e) for e in stats.sorted_entries()), (None, stats.total)]
    window = history_of(environment).window.figures(entries)
    table = [{**row, **current} for row, current in zip(rows(stats), window, strict=True)]
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
