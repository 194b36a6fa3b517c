"""The run's history of pooling figures: a sample of the pooling table every second, kept on the
runner that shows the figures (the master, or the only process), for PREFIX_pooling_history.csv,
the charts and the JSON result.

A sample is the Aggregated row of `table.rows` (every name's row too with --csv-full-history),
with the time, the user count and the TTFB and E2E percentiles of the requests of the last
WINDOW_SECONDS (the run's percentiles flatten as the run grows; a chart needs the current ones).
Every second is kept for the first hour; memory stays the same however long the run, not only
bounded: past MAX_SAMPLES samples (an hour at one a second), each new sample makes two neighbours of
the narrowest width merge (`Tiers`), so exactly MAX_SAMPLES are held from then on, and what is shown
(charts, the JSON result) is evenly spread at one interval, the widest kept: 1 s up to an hour, 2 s up
to two, 4 s up to four, ..., 32 s for a day. A halving list (drop every other sample when full, then
fill again) would be bounded too, but would grow again for as long as it took to fill: memory would
rise for hours of a steady run. The samples themselves are on disk (`spool.SpooledList`): an hour of
them held as dicts would grow the process all that hour.
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
from poolbench_locust.metrics.histogram import Histogram
from poolbench_locust.metrics.table import rows
from poolbench_locust.spool import SpooledList
from poolbench_locust.store import Slot

MAX_SAMPLES = 3600
"""An hour at one sample a second; a longer run holds exactly this many, and shows at most this many,
further apart (2 s up to two hours, 4 s up to four, ..., 32 s for a day). Held on disk, so an hour of
samples costs the process 43 kB, not the ~10 MB they weigh as dicts (bench/soak.py)."""

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

WINDOW_TICKS = round(WINDOW_SECONDS / CSV_STATS_INTERVAL_SEC)


class Window:
    """The timing histograms of the requests of the last WINDOW_TICKS ticks, per request name: what
    each tick added (the difference between the histogram now and its copy at the last tick, holding
    only the buckets hit in that tick), summed over the window. Held: one copy of each name's
    histograms (the last tick's: dense rows, the histogram's own size, which does not grow with the
    buckets hit) and WINDOW_TICKS sparse dumps, so memory follows the requests of the window and the
    span of the timings, not every bucket the run has seen (eleven whole dumps of every histogram grew
    with its buckets for as long as new timings turned up)."""

    def __init__(self) -> None:
        self._last: dict[str | None, tuple[Entry, dict[str, Histogram]]] = {}
        """Name -> its entry and a copy of its timings at the last tick. The entry tells a reset apart:
        Locust's reset replaces every entry, and a count alone may come out equal."""
        self._added: dict[str | None, deque[dict[str, dict[str, Any]]]] = {}
        """Name -> what each of the last WINDOW_TICKS ticks added, per timing, oldest first."""

    def clear(self) -> None:
        self._last.clear()
        self._added.clear()

    def held(self) -> int:
        """The copies and dumps held: bounded by the names, never by the run's length."""
        return sum(len(copies) for _, copies in self._last.values()) + sum(
            len(added) for ticks in self._added.values() for added in ticks
        )

    def figures(self, entries: list[tuple[str | None, Entry]]) -> list[dict[str, Any]]:
        """WINDOW_COLUMNS of each (name, entry) for this tick; this tick's copies are kept for the next ones."""
        figures, last = [], {}
        for name, entry in entries:
            then, ticks = self._last.get(name), self._added.get(name)
            if then is None or then[0] is not entry or ticks is None:  # new, or reset: the window starts again
                ticks = self._added[name] = deque(maxlen=WINDOW_TICKS)
                before: dict[str, Histogram] = {}
            else:
                before = then[1]
            timings = {key: entry.timings[key] for key, _ in WINDOW_TIMINGS}
            ticks.append({key: histogram.since(before.get(key)) for key, histogram in timings.items()})
            last[name] = (entry, {key: histogram.copy() for key, histogram in timings.items()})
            values: dict[str, Any] = {}
            for key, title in WINDOW_TIMINGS:
                histogram = Histogram()
                for added in ticks:
                    histogram.merge(added[key])
                for p in WINDOW_PERCENTILES:
                    values[window_column(title, p)] = histogram.percentile(p) if histogram.n else None
            figures.append(values)
        self._last = last
        for name in [n for n in self._added if n not in last]:
            del self._added[name]  # a name no longer shown (reset): nothing of it held
        return figures


class Tiers:
    """The widths (in ticks) of a fixed number of kept entries, oldest first: each tick adds an entry of
    width 1; past `limit` entries, two neighbours of the narrowest width merge (the oldest such pair,
    starting on a multiple of twice their width). The widths stay powers of two, never narrower
    towards the past, and every entry starts on a multiple of its own width: grouped by the widest
    width they read as evenly spread entries, however long the run. The caller merges its own
    entries where `add` says.

    As the widths never narrow towards the past, the entries of one width are neighbours, and the
    oldest pair of the narrowest width that has two is the first two of its run, which starts on a
    multiple of twice that width (every wider entry before it is a multiple of it): so only how many
    entries each width has is kept (`_counts[k]`, width 2**k), and a tick costs a few steps, not one
    per entry (a limit of an hour of seconds is 3600 entries)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._counts: list[int] = []
        self._held = 0

    def __len__(self) -> int:
        return self._held

    def add(self) -> int | None:
        """One more tick; if two entries merge, the index of the first (the second, i + 1, is gone)."""
        if not self._counts:
            self._counts.append(0)
        self._counts[0] += 1
        self._held += 1
        if self._held <= self.limit:
            return None
        for k, count in enumerate(self._counts):
            if count >= 2:
                at = sum(self._counts[k + 1 :])  # the wider entries before the run of width 2**k
                self._counts[k] -= 2
                if k + 1 == len(self._counts):
                    self._counts.append(0)
                self._counts[k + 1] += 1
                self._held -= 1
                return at
        return None  # only with a limit below the number of widths (a handful): nothing merges

    @property
    def widths(self) -> list[int]:
        """Each entry's width, oldest first."""
        return [1 << k for k in reversed(range(len(self._counts))) for _ in range(self._counts[k])]

    @property
    def widest(self) -> int:
        return max((1 << k for k, count in enumerate(self._counts) if count), default=1)

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
        self._counts.clear()
        self._held = 0


class History:
    """The samples of the run: every second's for the first hour, then exactly MAX_SAMPLES held, shown
    evenly spread; on disk (spool.SpooledList), 12 bytes of memory a sample."""

    def __init__(self) -> None:
        self._kept = SpooledList(MAX_SAMPLES + 1)  # room for the hour made at once (one more as two merge)
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
