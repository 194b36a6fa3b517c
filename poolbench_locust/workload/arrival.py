"""Open-loop arrivals: requests are sent when an arrival process says, not when a user is done.

One schedule per process, shared by its users: gamma-distributed gaps (shape --burstiness, mean
1/rate; 1 is Poisson), as vLLM's benchmark draws them. Each process takes its share of the
run's --request-rate (its users over the run's users), so workers need not talk to each other.
A request whose slot was busy at its scheduled time is sent late and timed from its scheduled
time, as wrk2 does: the wait is part of the latency a client would see, and is reported as
`queue_ms`; without this a saturated server looks fast (coordinated omission).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from time import perf_counter
from typing import Any

import gevent
from gevent.event import Event
from gevent.queue import Queue
from locust.event import Events

from poolbench_locust.options import Settings
from poolbench_locust.run_state import state_of

RATE_MESSAGE = "poolbench_rate"


class OpenLoop:
    """One dispatcher greenlet per process wakes at each arrival and hands its due time to a free user;
    arrivals that find no free user wait in the queue, and are timed from their due time."""

    rate_override: float | None = None
    """The rate of the current sweep step, set by the master's message."""

    def __init__(self) -> None:
        self._dispatcher: gevent.Greenlet | None = None
        self.reset()

    def reset(self, seed: int = 0) -> None:
        if self._dispatcher is not None:
            self._dispatcher.kill(block=False)
        self._dispatcher = None
        self._due: Queue[float] = Queue()
        self.in_flight = 0
        self._freed = Event()
        self._rng = random.Random(seed)

    def _share(self, environment: Any) -> float:
        runner = environment.runner
        total = getattr(environment.parsed_options, "num_users", None) or 0
        here = runner.user_count if runner is not None else 0
        return min(here / total, 1.0) if total and here else 1.0

    def _dispatch(self, environment: Any, settings: Settings) -> None:
        due = perf_counter()
        while True:
            if (wait := due - perf_counter()) > 0:
                gevent.sleep(wait)
            self._due.put(due)
            rate = (self.rate_override or settings.request_rate or 1.0) * self._share(environment)
            due += self._rng.gammavariate(settings.burstiness, 1.0 / (rate * settings.burstiness))

    def next_send_time(self, environment: Any, settings: Settings) -> float:
        """Block until an arrival is due; return the perf_counter time it was due (maybe in the past)."""
        if self._dispatcher is None or self._dispatcher.dead:
            self._dispatcher = gevent.spawn(self._dispatch, environment, settings)
        return self._due.get()

    @contextmanager
    def slot(self, environment: Any, settings: Settings) -> Iterator[None]:
        """At most this process's share of --max-concurrency requests in flight."""
        cap = max(1, round(settings.max_concurrency * self._share(environment))) if settings.max_concurrency else None
        while cap is not None and self.in_flight >= cap:
            self._freed.clear()
            self._freed.wait()
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1
            self._freed.set()


def open_loop_of(environment: Any) -> OpenLoop:
    """The run's open-loop schedule (one per environment)."""
    state = state_of(environment)
    if state.open_loop is None:
        state.open_loop = OpenLoop()
    return state.open_loop


def _on_init(environment: Any, runner: Any = None, **_: Any) -> None:
    def set_rate(msg: Any, **_: Any) -> None:  # a sweep step on the master changes every process's rate
        open_loop_of(environment).rate_override = float(msg.data)

    if runner is not None and hasattr(runner, "register_message"):
        runner.register_message(RATE_MESSAGE, set_rate)


def _on_test_start(environment: Any, **_: Any) -> None:
    # each worker its own stream: the same seed on every worker would send their bursts together
    worker = getattr(environment.runner, "worker_index", 0) or 0
    open_loop_of(environment).reset(seed=int(getattr(environment.parsed_options, "seed", 0) or 0) * 1000 + worker)


def _on_test_stop(environment: Any, **_: Any) -> None:
    open_loop = open_loop_of(environment)
    open_loop.rate_override = None
    open_loop.reset()


def setup(events: Events) -> None:
    events.init.add_listener(_on_init)
    events.test_start.add_listener(_on_test_start)
    events.test_stop.add_listener(_on_test_stop)
