"""The run's history of pooling figures: a sample of the pooling table every second, kept on the
runner that shows the figures (the master, or the only process), for PREFIX_pooling_history.csv,
the charts and the JSON result.

A sample is the Aggregated row of `table.rows` (every name's row too with --csv-full-history),
with the time, the user count and the TTFB and E2E percentiles of the requests of the last
WINDOW_SECONDS (the run's percentiles flatten as the run grows; a chart needs the current ones).
Memory stays the same however long the run, not only bounded: past MAX_SAMPLES samples (ten minutes
at one a second), each new sample makes two neighbours of the narrowest width merge (`Tiers`), so
exactly MAX_SAMPLES are held from then on, and what is shown (charts, the JSON result) is evenly spread
at one interval, the widest kept: 1 s up to 10 minutes, 2 s up to 20, 4 s up to 40, ..., 256 s for a
day. A halving list (drop every other sample when full, then fill again) would be bounded too, but
would grow again for as long as it took to fill: memory would rise for hours of a steady run.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import gevent
from locust.env import Environment
from locust.stats import CSV_STATS_INTERVAL_SEC, CURRENT_RESPONSE_TIME_PERCENTILE_WINDOW

from poolbench_locust.locust_options import locust_options
from poolbench_locust.metrics.collector import Entry, PoolingStats
from poolbench_locust.metrics.histogram import difference
from poolbench_locust.metrics.table import rows
from poolbench_locust.store import Slot

MAX_SAMPLES = 600
"""Ten minutes at one sample a second; a longer run holds exactly this many, and shows at most this
many, further apart. Smaller than the half hour it was, so that a half-hour soak stops growing after
ten minutes (bench/soak.py); a chart is no more than 600 points wide anyway."""

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


class Tiers:
    """The widths (in ticks) of a fixed number of kept entries, oldest first: each tick adds an entry of
    width 1; past `limit` entries, two neighbours of the narrowest width merge (the oldest such pair,
    starting on a multiple of twice their width). The widths stay powers of two, never narrower
    towards the past, and every entry starts on a multiple of its own width: grouped by the widest
    width they read as evenly spread entries, however long the run. The caller merges its own
    entries where `add` says."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.widths: list[int] = []

    def add(self) -> int | None:
        """One more tick; if two entries merge, the index of the first (the second, i + 1, is gone)."""
        self.widths.append(1)
        if len(self.widths) <= self.limit:
            return None
        best, at, start = 0, None, 0
        widths = self.widths
        for i in range(len(widths) - 1):
            width = widths[i]
            if width == widths[i + 1] and start % (2 * width) == 0 and (at is None or width < best):
                best, at = width, i
            start += width
        if at is not None:  # always, past a few dozen entries: limit entries cannot all differ in width
            widths[at] *= 2
            del widths[at + 1]
        return at

    @property
    def widest(self) -> int:
        return max(self.widths, default=1)

    def groups(self) -> list[list[int]]:
        """Indexes of the entries, grouped into spans of the widest width (each starts on a multiple of it)."""
        widest, start, out = self.widest, 0, []
        for i, width in enumerate(self.widths):
            if start % widest == 0:
                out.append([i])
            else:
                out[-1].append(i)
            start += width
        return out

    def clear(self) -> None:
        self.widths.clear()


class History:
    """The samples of the run: exactly MAX_SAMPLES held past ten minutes, shown evenly spread."""

    def __init__(self) -> None:
        self._kept: list[Sample] = []
        """Each the first sample of its entry in `_tiers` (the sample at the start of its span)."""
        self._tiers = Tiers(MAX_SAMPLES)
        self.window = Window()

    @property
    def samples(self) -> list[Sample]:
        """The kept samples, evenly spread: one every `interval` seconds from the first."""
        return [self._kept[group[0]] for group in self._tiers.groups()]

    @property
    def interval(self) -> float:
        """Seconds between the samples shown: 1 until MAX_SAMPLES seconds, then doubling."""
        return self._tiers.widest * CSV_STATS_INTERVAL_SEC

    def add(self, sample: Sample) -> bool:
        """Keep the sample (two older ones may merge, keeping the first of them); always True."""
        self._kept.append(sample)
        merged = self._tiers.add()
        if merged is not None:
            del self._kept[merged + 1]
        return True

    def clear(self) -> None:
        self._kept.clear()
        self._tiers.clear()
        self.window.clear()


_HISTORY = Slot("history", History)


def history_of(environment: Environment) -> History:
    """The environment's history (created on first use, one per environment)."""
    return _HISTORY.of(environment)


def take_sample(environment: Environment, stats: PoolingStats) -> Sample:
    """One tick's sample; call it once a tick (the window of current percentiles moves with it)."""
    full = locust_options(environment).stats_history_enabled
    entries: list[tuple[str | None, Entry]] = [*((e.name, e) for e in stats.sorted_entries()), (None, stats.total)]
    window = history_of(environment).window.figures(entries)
    table = [{**row, **current} for row, current in zip(rows(stats), window, strict=True)]
    runner = environment.runner
    return {
        "time": time.time(),
        "user_count": runner.user_count if runner is not None else 0,
        "rows": table if full else table[-1:],
    }


def sample_history_while_running(
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
