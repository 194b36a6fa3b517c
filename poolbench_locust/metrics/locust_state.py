"""Locust's own state that grows with run time, kept bounded as the plugin keeps its own: its
`stats.history` and its per-second request and failure counts.

Locust appends a point to `environment.stats.history` every HISTORY_STATS_INTERVAL_SEC (5 s: its
`stats_history` greenlet), for the charts of its web UI and its HTML report, and never drops one;
and each of its entries (every request name and the Aggregated row) adds a key a second to
`num_reqs_per_sec` and `num_fail_per_sec`. In a day that is 17,280 points and 86,400 keys an entry,
some MB that only grow (docs/results.md). The plugin bounds them from a greenlet of its own, without
patching Locust:

- `stats.history` by the same rule as the plugin's history (metrics/history.py's `Tiers`): every point
  of the first hour (HISTORY_KEPT, at Locust's interval), then exactly as many, two neighbours of the
  narrowest width making one (the older point kept: each point is a moment's figures, not a sum).
  Each point stays as Locust made it, so its report's and web UI's charts draw them as before (on a
  time axis: the older points, further apart, are drawn where they were taken). The points are kept
  on disk, as the plugin's own history (`SpooledHistory`): held as dicts, the first hour's would grow
  the process all that hour.
- the per-second counts older than COUNTS_KEPT_S: Locust reads only the last 12 s of them (its
  current requests/s and failures/s); the run's totals are counted apart and stay whole.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator
from typing import Any, SupportsIndex, overload

import gevent
from locust import stats as locust_stats
from locust.env import Environment
from locust.event import Events
from locust.runners import Runner
from locust.stats import RequestStats, StatsEntry

from poolbench_locust.metrics.history import Tiers
from poolbench_locust.spool import SpooledList

HISTORY_KEPT_S = 3600
"""Every point of Locust's history is kept for the first hour, as the plugin's own history keeps every second."""
COUNTS_KEPT_S = 60
"""Seconds of per-second counts kept: Locust's current rates read the last 12 (stats.StatsEntry.current_rps)."""


def history_kept() -> int:
    """Points of Locust's history held at most: an hour at its interval (720 at 5 s)."""
    return max(2, round(HISTORY_KEPT_S / locust_stats.HISTORY_STATS_INTERVAL_SEC))


class SpooledHistory(list[dict[str, Any]]):
    """Locust's `stats.history` with its points on disk (spool.SpooledList: 12 bytes of memory a point,
    where a point held as Locust makes it, a dict of seven lists, weighs about 1 kB: 12 kB a minute
    for the first hour), thinned as each point is appended: every point of the first `limit`, then
    exactly `limit`, two neighbours of the narrowest width making one (`Tiers`; the older point kept).

    Locust only appends to its history and reads it: its HTML report reads the last point and
    iterates the rest, its web UI's page serializes them (json encodes a list subclass through its
    iterator). Those go through the methods below; the list itself stays empty."""

    def __init__(self, points: Iterable[dict[str, Any]] = (), limit: int | None = None) -> None:
        super().__init__()
        limit = limit if limit is not None else history_kept()
        self._points = SpooledList(limit + 1)  # room for every point kept, made at once
        self._tiers = Tiers(limit)
        for point in points:
            self.append(point)

    def append(self, point: dict[str, Any]) -> None:
        self._points.append(point)
        merged = self._tiers.add()
        if merged is not None:
            del self._points[merged + 1]

    def __len__(self) -> int:
        return len(self._points)

    def __bool__(self) -> bool:
        return len(self._points) > 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        points = self._points
        return (points[i] for i in range(len(points)))

    def __reversed__(self) -> Iterator[dict[str, Any]]:
        points = self._points
        return (points[i] for i in reversed(range(len(points))))

    @overload
    def __getitem__(self, index: SupportsIndex) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: SupportsIndex | slice) -> dict[str, Any] | list[dict[str, Any]]:
        points = self._points
        if isinstance(index, slice):
            return [points[i] for i in range(*index.indices(len(points)))]
        i = operator.index(index)
        if not -len(points) <= i < len(points):
            raise IndexError("history index out of range")
        point: dict[str, Any] = points[i % len(points)]
        return point

    def __eq__(self, other: object) -> bool:
        return list(self) == other

    __hash__ = None

    def __repr__(self) -> str:
        return f"SpooledHistory({len(self)} points)"


def spool_history(stats: RequestStats) -> None:
    """Give Locust's stats a SpooledHistory in place of the plain list Locust made (at its start, and at
    each reset of its stats), with the points that list holds."""
    if type(stats.history) is list:
        stats.history = SpooledHistory(stats.history)


def drop_old_counts(entry: StatsEntry, before: int) -> None:
    """Forget an entry's per-second counts of the seconds before `before` (epoch seconds)."""
    for counts in (entry.num_reqs_per_sec, entry.num_fail_per_sec):
        if counts and min(counts) < before:
            for second in [s for s in counts if s < before]:
                del counts[second]


def bound_forever(runner: Runner) -> None:
    """Run in a greenlet: every interval of Locust's history, its history spooled and old counts dropped."""
    while True:
        gevent.sleep(locust_stats.HISTORY_STATS_INTERVAL_SEC)
        stats: RequestStats = runner.stats
        spool_history(stats)
        if (last := stats.total.last_request_timestamp) is not None:
            before = int(last) - COUNTS_KEPT_S
            for entry in [stats.total, *list(stats.entries.values())]:
                drop_old_counts(entry, before)


def setup(events: Events) -> None:
    def on_init(environment: Environment, runner: Runner | None = None, **_: Any) -> None:
        if runner is not None:
            gevent.spawn(bound_forever, runner)

    events.init.add_listener(on_init)
