"""What a server did during the run: counter and histogram deltas between scrapes, and its gauges over time.

Deltas are taken scrape by scrape and series by series, as Prometheus's `increase()` does: a
counter that drops was restarted, and counts from zero again; a series first seen after the
baseline was born during the run (the HTTP layer makes a handler's series at its first request),
so all of it counts. The run's figures are then sums of deltas, which no restart can make negative.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from poolbench_locust.servermetrics.flavors import AVERAGED, COUNTERS, EACH, GAUGES, HISTOGRAMS, Flavor
from poolbench_locust.servermetrics.parse import MAX_SERIES, Hist, Reading, SeriesKey

WINDOW_S = 10.0
"""The current window, as long as Locust's (CURRENT_RESPONSE_TIME_PERCENTILE_WINDOW)."""
HISTORY_KEPT = 2_000
"""Gauge readings kept for the report: at the default 5 s interval, more than 2.5 hours."""
MAX_BOUNDS = 4_096
"""Distinct bucket bounds one figure keeps: a server that changes its bounds at every scrape is cut off."""
MAX_EACH = 64
"""Series of one gauge kept one by one (GPUs of a host): a server inventing labels is cut off there."""


@dataclass
class BoundCounts:
    """Observations per upper bound (not cumulative), so series with other bounds still add up."""

    per_bound: dict[float, float] = field(default_factory=dict)
    sum: float = 0.0
    count: float = 0.0

    def add(self, bounds: tuple[float, ...], counts: tuple[float, ...], total: float, n: float) -> bool:
        """Add one series' delta; False (and nothing added) when its bounds would pass MAX_BOUNDS."""
        if len(self.per_bound) + len(bounds) > MAX_BOUNDS and not all(b in self.per_bound for b in bounds):
            return False
        below = 0.0
        for bound, cumulative in zip(bounds, counts, strict=True):
            self.per_bound[bound] = self.per_bound.get(bound, 0.0) + cumulative - below
            below = cumulative
        self.sum += total
        self.count += n
        return True

    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None

    def percentile(self, fraction: float) -> float | None:
        """The upper bound of the bucket that holds this share of the observations: the server's
        histogram says no more than that (its buckets may be coarse; vLLM's first is 0.3 s)."""
        if self.count <= 0:
            return None
        rank, seen = fraction * self.count, 0.0
        for bound in sorted(self.per_bound):
            seen += self.per_bound[bound]
            if seen >= rank and self.per_bound[bound] > 0:
                return bound
        return math.inf


def _delta(now: Hist, before: Hist | None) -> tuple[tuple[float, ...], float, float]:
    """Cumulative counts, sum and count added since `before` (all of `now` after a restart)."""
    if (
        before is None
        or before.bounds != now.bounds
        or now.count < before.count
        or any(a < b for a, b in zip(now.cumulative, before.cumulative, strict=True))
    ):
        return now.cumulative, now.sum, now.count
    cumulative = tuple(a - b for a, b in zip(now.cumulative, before.cumulative, strict=True))
    return cumulative, max(now.sum - before.sum, 0.0), now.count - before.count


def _forget_unseen(prev: dict[SeriesKey, Any], now: Mapping[SeriesKey, object]) -> None:
    """A series missing from one scrape (left out for a bad value) keeps its last value, so that its
    next good value gives the delta; past MAX_SERIES kept (a server inventing labels at every scrape),
    only the current ones are."""
    if len(prev) > MAX_SERIES:
        for key in [k for k in prev if k not in now]:
            del prev[key]


@dataclass
class Gauge:
    last: float | None = None
    max: float = 0.0
    total: float = 0.0
    n: int = 0

    def add(self, value: float) -> None:
        self.last = value
        self.max = max(self.max, value)
        self.total += value
        self.n += 1

    def mean(self) -> float | None:
        return self.total / self.n if self.n else None


@dataclass
class Mark:
    """The run's totals at one scrape, for the current window."""

    at: float
    counters: dict[str, float]
    hists: dict[str, tuple[float, float]]


class ServerView:
    """One server's figures over the run, fed one Reading at a time."""

    def __init__(self, url: str, shown: str | None = None, side: str | None = None) -> None:
        self.url = url
        self.shown = shown or url
        """The URL as it may be shown: without credentials (with --ab-host, its host's mark after it)."""
        self.side = side
        """With --ab-host: "A" or "B", the host whose metrics these are (hosts.py); None without."""
        self.flavor: Flavor | None = None
        self.scrapes = 0
        self.failures = 0
        self.rejected = 0
        self.resets = 0
        self.last_error: str | None = None
        self.started: float | None = None
        self.last: float | None = None
        self._prev_values: dict[str, dict[SeriesKey, float]] = {}
        self._prev_hists: dict[str, dict[SeriesKey, Hist]] = {}
        self.seen: set[str] = set()
        """Roles some scrape had a series of: a GPU without an energy counter has no energy, not 0 J."""
        self.first_gauges: tuple[float, dict[str, float | None]] | None = None
        """The gauges of the run's first scrape (before any user started), kept across rebases: a queue
        full since the warm-up is still one that grew (saturation.py)."""
        self.rebase()

    def rebase(self) -> None:
        """Count from here on (a new run, or Locust's stats reset): keep the last reading as the base."""
        self.counters: dict[str, float] = {role: 0.0 for role in COUNTERS}
        self.hists: dict[str, BoundCounts] = {role: BoundCounts() for role in HISTOGRAMS}
        self.gauges: dict[str, Gauge] = {role: Gauge() for role in GAUGES}
        self.each: dict[str, dict[SeriesKey, Gauge]] = {role: {} for role in EACH}
        """The gauges of EACH, series by series (a GPU each)."""
        self.moved: dict[str, list[int]] = {role: [0, 0] for role in COUNTERS}
        """Per counter: the scrapes since the base at which it grew, and all of them (an exporter that
        samples less often than it is scraped leaves it unchanged between its samples)."""
        self.history: deque[tuple[float, dict[str, float | None]]] = deque(maxlen=HISTORY_KEPT)
        self.marks: deque[Mark] = deque()
        self.started = self.last

    def has(self, role: str) -> bool:
        return self.flavor is not None and role in self.flavor.refs

    def failed(self, message: str) -> None:
        self.failures += 1
        self.last_error = message

    def observe_nothing(self, at: float) -> None:
        """A scrape that answered with no series yet (TEI before its first request): a base of zeros, so
        that every series that appears later counts whole."""
        self.scrapes += 1
        if self.scrapes == 1:
            self.started = at
        self.last = at

    def observe(self, reading: Reading, at: float) -> None:
        first = self.scrapes == 0
        if self.flavor is not None and reading.flavor is not self.flavor:
            first = True  # another server now answers at this URL: a new base, not a delta
        self.flavor = reading.flavor
        self.scrapes += 1
        self.rejected += reading.rejected
        for role, series in reading.values.items():
            if series:
                self.seen.add(role)
            if role in COUNTERS:
                self._count(role, series, first)
            elif role in EACH:
                self._observe_each(role, series)
            else:
                self.gauges[role].add(sum(series.values()))
        for role, hist_series in reading.hists.items():
            self._observe_hists(role, hist_series, first)
        self.last = at
        if first:
            self.started = at
        gauges: dict[str, float | None] = {role: g.last for role, g in self.gauges.items()}
        if self.has("latency"):  # its running totals: how its own latency moved within the window (saturation.py)
            gauges["latency_sum"], gauges["latency_count"] = self.hists["latency"].sum, self.hists["latency"].count
        self.history.append((at, gauges))
        if self.first_gauges is None:
            self.first_gauges = self.history[-1]
        self._mark(at)

    def _count(self, role: str, series: dict[SeriesKey, float], first: bool) -> None:
        prev = self._prev_values.setdefault(role, {})
        if first:
            prev.clear()
        was = self.counters[role]
        for key, value in series.items():
            before = prev.get(key)
            if before is None:
                self.counters[role] += 0.0 if first else value
            elif value >= before:
                self.counters[role] += value - before
            else:
                self.resets += 1
                self.counters[role] += value
            prev[key] = value
        _forget_unseen(prev, series)
        if not first and series:
            self.moved[role][0] += int(self.counters[role] > was)
            self.moved[role][1] += 1

    def _observe_each(self, role: str, series: dict[SeriesKey, float]) -> None:
        """A scrape with no good series of it adds nothing (not a 0); past MAX_EACH series, new ones
        are left out and counted."""
        if not series:
            return
        total = sum(series.values())
        self.gauges[role].add(total / len(series) if role in AVERAGED else total)
        kept = self.each[role]
        for key, value in series.items():
            if key not in kept and len(kept) >= MAX_EACH:
                self.rejected += 1
                continue
            kept.setdefault(key, Gauge()).add(value)

    def _observe_hists(self, role: str, series: dict[SeriesKey, Hist], first: bool) -> None:
        prev = self._prev_hists.setdefault(role, {})
        if first:
            prev.clear()
        for key, hist in series.items():
            before = prev.get(key)
            if not first:
                if before is not None and hist.count < before.count:
                    self.resets += 1
                if not self.hists[role].add(hist.bounds, *_delta(hist, before)):
                    self.rejected += 1
            prev[key] = hist
        _forget_unseen(prev, series)

    def _mark(self, at: float) -> None:
        mark = Mark(at, dict(self.counters), {r: (b.sum, b.count) for r, b in self.hists.items()})
        self.marks.append(mark)
        while len(self.marks) > 2 and self.marks[1].at <= at - WINDOW_S:
            self.marks.popleft()

    def seconds(self) -> float:
        if self.started is None or self.last is None:
            return 0.0
        return self.last - self.started

    def current_rate(self, role: str) -> float | None:
        """Per second over the last WINDOW_S (or the scrapes there are)."""
        if len(self.marks) < 2 or not self.has(role):
            return None
        old, new = self.marks[0], self.marks[-1]
        span = new.at - old.at
        return (new.counters[role] - old.counters[role]) / span if span > 0 else None

    def current_mean(self, role: str) -> float | None:
        if len(self.marks) < 2 or not self.has(role):
            return None
        (s0, n0), (s1, n1) = self.marks[0].hists[role], self.marks[-1].hists[role]
        return (s1 - s0) / (n1 - n0) if n1 > n0 else None
