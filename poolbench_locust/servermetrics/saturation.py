"""Whether the server was saturated over the measured window, by its own gauges: the requests waiting in its
queue (vLLM's num_requests_waiting, TEI's te_queue_size, SGLang's and llama.cpp's) grew while it ran
requests. An open loop that found no free slot then waited on the server, and more users (-u) would only
have lengthened its queue: the fell-behind warning names the server (metrics/pace_causes.py asks here).

A server that takes every request it holds into its batch (vLLM's pooling runner: against its CPU build
both its waiting and its running gauges stayed 0) has no queue to show; its own latency does: when its
mean latency at the end of the window is LATENCY_GROWTH times that at its start, it slowed down under the
load, and more requests in flight would only have slowed it further.

"Ran requests" matters where the server has a gauge of them: a queue that grew while nothing ran is no
server at its limit (the bundled mock counts its fixed --ttfb-ms wait as waiting; a real server queues
only what it has no room to run). TEI has no such gauge: its queue alone speaks."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from poolbench_locust.servermetrics.deltas import ServerView

MIN_GROWTH = 2.0
"""Requests the queue must have grown by: one request waiting a moment is any busy server's."""
MIN_RUNNING = 1.0
"""The mean of the requests running at the scrapes that found some waiting, at least (with a running gauge)."""


@dataclass(frozen=True)
class Saturation:
    server: str
    waiting_from: float
    """The least waiting before the most (the queue's level when it began to grow)."""
    waiting_to: float
    seconds: float
    """From the scrape of the least to that of the most."""
    running: float | None
    """The mean running at the scrapes that found requests waiting; None without a running gauge."""

    def phrase(self) -> str:
        ran = "" if self.running is None else f", running {self.running:,.1f} at once"
        return (
            f"the server was saturated: its waiting requests grew from {self.waiting_from:,.0f} to "
            f"{self.waiting_to:,.0f} in {self.seconds:,.0f} s{ran} ({self.server}); raising -u or "
            "--max-concurrency will not help"
        )


def _gauge(value: float | None) -> float | None:
    """A scrape's gauge as a count of requests (a server's value is untrusted: NaN or negative is none)."""
    return value if isinstance(value, int | float) and math.isfinite(value) and value >= 0 else None


def saturation(view: ServerView) -> Saturation | None:
    """The view's saturation over the measured window (its history since the last rebase), from the level
    of its queue before any user started (the run's first scrape), or None."""
    if not view.has("waiting"):
        return None
    history = list(view.history)
    if view.first_gauges is not None and (not history or view.first_gauges[0] < history[0][0]):
        history.insert(0, view.first_gauges)  # the window began after --warmup: the queue may be full by then
    points = [
        (at, waiting, _gauge(gauges.get("running")))
        for at, gauges in history
        if (waiting := _gauge(gauges.get("waiting"))) is not None
    ]
    if not points:
        return None
    top = max(range(len(points)), key=lambda i: points[i][1])  # the first scrape of the most
    low = min(range(top + 1), key=lambda i: points[i][1])
    if points[top][1] - points[low][1] < MIN_GROWTH:
        return None
    running = None
    if view.has("running"):
        ran = [r for _, w, r in points if w > 0 and r is not None]
        running = sum(ran) / len(ran) if ran else 0.0
        if running < MIN_RUNNING:
            return None
    return Saturation(view.shown, points[low][1], points[top][1], points[top][0] - points[low][0], running)


LATENCY_GROWTH = 3.0
"""How many times the server's own mean latency must have grown from the window's start to its end."""
MIN_ENDED = 10
"""Requests the server must have ended in each end of the window compared (and a fifth of all, at least)."""


@dataclass(frozen=True)
class Slowdown:
    server: str
    from_ms: float
    """The server's own mean latency of the first fifth (at least MIN_ENDED) of the requests it ended."""
    to_ms: float
    """The same of the last fifth."""
    alone: bool = False
    """from_ms is one request's alone (the preflight's), to_ms the window's mean: the server was as slow
    from the window's start."""

    def phrase(self) -> str:
        moved = (
            f"was {self.to_ms:,.0f} ms against {self.from_ms:,.0f} ms for one request alone (the preflight)"
            if self.alone
            else f"grew from {self.from_ms:,.0f} ms to {self.to_ms:,.0f} ms"
        )
        return (
            f"the server was saturated: its own mean latency {moved} ({self.server}); raising -u or "
            "--max-concurrency will not help"
        )


def slowdown(view: ServerView, alone_ms: float | None = None) -> Slowdown | None:
    """The view's own latency at the end of the measured window against its start, when it grew
    LATENCY_GROWTH times; else its mean over the window against one request alone (`alone_ms`, the
    preflight's), when that is LATENCY_GROWTH times; None without a latency histogram or too few requests."""
    points = [
        (total, count)
        for _, gauges in view.history
        if (total := _gauge(gauges.get("latency_sum"))) is not None
        and (count := _gauge(gauges.get("latency_count"))) is not None
    ]
    if len(points) < 2 or points[-1][1] - points[0][1] < MIN_ENDED:
        return None
    (sum0, count0), (sum1, count1) = points[0], points[-1]
    need = max(MIN_ENDED, (count1 - count0) / 5)
    early = next(((t, c) for t, c in points if c - count0 >= need), None)
    late = next(((t, c) for t, c in reversed(points) if count1 - c >= need), None)
    if len(points) >= 3 and early is not None and late is not None and early[1] <= late[1]:  # two ends apart
        from_ms = 1000 * (early[0] - sum0) / (early[1] - count0)
        to_ms = 1000 * (sum1 - late[0]) / (count1 - late[1])
        if from_ms > 0 and math.isfinite(to_ms) and to_ms >= LATENCY_GROWTH * from_ms:
            return Slowdown(view.shown, from_ms, to_ms)
    # as slow from the window's start (the load came at once): against one request alone
    mean_ms = 1000 * (sum1 - sum0) / (count1 - count0)
    if alone_ms is not None and alone_ms > 0 and math.isfinite(mean_ms) and mean_ms >= LATENCY_GROWTH * alone_ms:
        return Slowdown(view.shown, alone_ms, mean_ms, alone=True)
    return None


def saturated(views: Iterable[ServerView], alone_ms: float | None = None) -> Saturation | Slowdown | None:
    """The server whose queue grew the most, when one did; else the one whose own latency grew the most."""
    views = list(views)
    found = [s for view in views if (s := saturation(view)) is not None]
    if found:
        return max(found, key=lambda s: s.waiting_to - s.waiting_from)
    slowed = [d for view in views if (d := slowdown(view, alone_ms)) is not None]
    return max(slowed, key=lambda d: d.to_ms / d.from_ms, default=None)


def cause(views: Iterable[ServerView], alone_ms: float | None = None) -> str | None:
    """The fell-behind warning's cause when the server was the limit (metrics/pace_causes.ServerCause)."""
    found = saturated(views, alone_ms)
    return None if found is None else found.phrase()
