"""--find-capacity with --ab-host: what makes a probe one host's. Its requests go to that host alone (the
engine's route, engine/ab.py, set in every process by the driver's message), and its figures are that host's
request names' ([A] or [B]) added up, so that a request of the other host still ending in the window counts in
neither probe."""

from __future__ import annotations

from typing import Any

from locust.env import Environment

from poolbench_locust.engine.ab import ROUTE_MESSAGE, set_route, side_of
from poolbench_locust.metrics.collector import Entry, stats_of


def host_total(environment: Environment, side: str | None) -> Entry:
    """The run's counters so far: of every request (`side` None), or of one host's names alone."""
    stats = stats_of(environment)
    if side is None:
        return stats.total
    total = Entry(side)
    for entry in list(stats.entries.values()):
        if side_of(entry.name) == side:
            total.merge(entry.dump())
    return total


def send_route(runner: Any, side: str | None) -> None:
    """Every process sends its scheduled requests to `side` alone (None: to both in turn again)."""
    runner.send_message(ROUTE_MESSAGE, side)


def listen_for_route(environment: Environment, runner: Any) -> None:
    """A process that runs users (a worker, or the only one) takes the route the driver sends."""
    runner.register_message(ROUTE_MESSAGE, lambda msg, **_: set_route(environment, msg.data))
