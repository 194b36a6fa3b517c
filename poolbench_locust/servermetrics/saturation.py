"""Whether the server was saturated over the measured window, by its own gauges: the requests waiting in its
queue (vLLM's num_requests_waiting, TEI's te_queue_size, SGLang's and llama.cpp's) grew while it ran
requests. An open loop that found no free slot then waited on the server, and more users (-u) would only
have lengthened its queue: the fell-behind warning names the server (metrics/pace_causes.py asks here).

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


def saturated(views: Iterable[ServerView]) -> Saturation | None:
    """The server whose queue grew the most, when one did."""
    found = [s for view in views if (s := saturation(view)) is not None]
    return max(found, key=lambda s: s.waiting_to - s.waiting_from, default=None)


def cause(views: Iterable[ServerView]) -> str | None:
    """The fell-behind warning's cause when the server was the limit (metrics/pace_causes.ServerCause)."""
    found = saturated(views)
    return None if found is None else found.phrase()
