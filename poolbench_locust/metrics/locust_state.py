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
  time axis: the older points, further apart, are drawn where they were taken).
- the per-second counts older than COUNTS_KEPT_S: Locust reads only the last 12 s of them (its
  current requests/s and failures/s); the run's totals are counted apart and stay whole.
"""

from __future__ import annotations

from typing import Any

import gevent
from locust import stats as locust_stats
from locust.env import Environment
from locust.event import Events
from locust.runners import Runner
from locust.stats import RequestStats, StatsEntry

from poolbench_locust.metrics.history import Tiers

HISTORY_KEPT_S = 3600
"""Every point of Locust's history is kept for the first hour, as the plugin's own history keeps every second."""
COUNTS_KEPT_S = 60
"""Seconds of per-second counts kept: Locust's current rates read the last 12 (stats.StatsEntry.current_rps)."""


def history_kept() -> int:
    """Points of Locust's history held at most: an hour at its interval (720 at 5 s)."""
    return max(2, round(HISTORY_KEPT_S / locust_stats.HISTORY_STATS_INTERVAL_SEC))


class HistoryBound:
    """Thins a Locust `stats.history` list in place, as `Tiers` says, one new point at a time."""

    def __init__(self, limit: int) -> None:
        self._tiers = Tiers(limit)
        self._list: list[dict[str, Any]] | None = None

    def thin(self, history: list[dict[str, Any]]) -> None:
        """Account for the points added since the last call; drop those the merges leave out."""
        if history is not self._list or len(history) < len(self._tiers):
            # Locust's reset (a new run of the web UI, --reset-stats) makes a new list: start again.
            self._tiers.clear()
            self._list = history
        while len(self._tiers) < len(history):
            merged = self._tiers.add()
            if merged is not None:
                del history[merged + 1]


def drop_old_counts(entry: StatsEntry, before: int) -> None:
    """Forget an entry's per-second counts of the seconds before `before` (epoch seconds)."""
    for counts in (entry.num_reqs_per_sec, entry.num_fail_per_sec):
        if counts and min(counts) < before:
            for second in [s for s in counts if s < before]:
                del counts[second]


def bound_forever(runner: Runner, bound: HistoryBound) -> None:
    """Run in a greenlet: every interval of Locust's history, its history thinned and old counts dropped."""
    while True:
        gevent.sleep(locust_stats.HISTORY_STATS_INTERVAL_SEC)
        stats: RequestStats = runner.stats
        bound.thin(stats.history)
        if (last := stats.total.last_request_timestamp) is not None:
            before = int(last) - COUNTS_KEPT_S
            for entry in [stats.total, *list(stats.entries.values())]:
                drop_old_counts(entry, before)


def setup(events: Events) -> None:
    def on_init(environment: Environment, runner: Runner | None = None, **_: Any) -> None:
        if runner is not None:
            gevent.spawn(bound_forever, runner, HistoryBound(history_kept()))

    events.init.add_listener(on_init)
