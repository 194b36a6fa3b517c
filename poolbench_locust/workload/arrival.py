"""Open-loop arrivals: requests are sent when an arrival process says, not when a user is done.

One schedule per process, shared by its users: gamma-distributed gaps (shape --burstiness, mean
1/rate; 1 is Poisson), as vLLM's benchmark draws them. Each process takes its share of the
run's --request-rate (its users over the run's users), so workers need not talk to each other.
A request whose slot was busy at its scheduled time is sent late and timed from its scheduled
time, as wrk2 does: the wait is part of the latency a client would see, and is reported as
`queue_ms`; without this a saturated server looks fast (coordinated omission).

The schedule also keeps a `Tally` of what it asked for and what left, and when: metrics/pacing.py
reads it to say when the client, not the server, is what holds the rate down.

A trace (workload/trace.py) is another arrival process: its lines' times instead of gamma gaps, each
arrival naming its line. It flows through the same queue, slots and late sends; when it is over,
the users waiting for an arrival stop, and the trace is told once every answer is in.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from time import perf_counter
from typing import Any, Protocol

import gevent
from gevent.event import Event
from gevent.queue import Queue
from locust.event import Events
from locust.runners import MasterRunner

from poolbench_locust.locust_options import locust_options
from poolbench_locust.options import Settings, settings_of
from poolbench_locust.store import Slot

RATE_MESSAGE = "poolbench_rate"
DROP_DUE_MESSAGE = "poolbench_drop_due"
PAUSE_MESSAGE = "poolbench_pause"
"""No arrivals until the next RATE_MESSAGE (capacity/capacity_shape.py: an overloaded probe's backlog at the
server ends before the next probe begins)."""
USERS_MESSAGE = "poolbench_users"
"""The master's users (-u, or its web form's Users) to every worker at test_start, before Locust's spawn
messages: a worker's share of the rate is its users over that total. Its own -u is its command line's
(Locust copies only plugins' options from the master's form), none when the web UI gives the users."""

DISPATCH_LATE_S = 0.05
"""An arrival the dispatcher itself put in the queue more than this after its due time: the process's loop
did not run it for 50 ms, far beyond gevent's timers on a loaded machine. The dispatcher catches up when it
runs, so the count of arrivals scheduled can look whole while they reached the users late: this count is
what says the schedule itself, not the users, fell behind (capacity/probes.py, `starved`)."""

Arrival = tuple[float, "int | None"]
"""The perf_counter time a request is due, and the trace's line it sends (None: the rate's)."""


class Schedule(Protocol):
    """A finite arrival process: a trace."""

    def arrivals(self, environment: Any) -> Iterable[tuple[float, int]]:
        """(perf_counter time due, line) of this process's arrivals, from now on."""
        ...

    def over(self, environment: Any, sent: int) -> None:
        """This process sent its `sent` arrivals and every answer is in."""
        ...


class Tally:
    """One process's arrivals: those that fell due and those that left, since the last `clear`.

    Kept apart from the schedule's own state, which is reset at each start and stop: the reports read
    the tally after the test stopped. It stops counting the arrivals that fall due when the run starts
    to stop, since those have nobody left to send them; a request that still leaves (a user that waited
    for a slot, let finish by --stop-timeout) is counted sent, as Locust counts its answer.
    """

    def __init__(self) -> None:
        self.on_sent: Callable[[float], None] = lambda lateness_ms: None
        """Told how late each request left, in ms (metrics/pacing.py keeps the histogram)."""
        self.clear()

    def clear(self) -> None:
        self.scheduled = 0
        self.dispatched_late = 0
        """Arrivals put in the queue more than DISPATCH_LATE_S after their due time (a starved dispatcher)."""
        self.sent = 0
        self.counting = True
        self.idle_users = 0
        """Users waiting for an arrival: none while arrivals queue means no free slot."""


class OpenLoop:
    """One dispatcher greenlet per process wakes at each arrival and hands its due time to a free user;
    arrivals that find no free user wait in the queue, and are timed from their due time."""

    rate_override: float | None = None
    """The rate of the current sweep step, set by the master's message."""
    total_users: int | None = None
    """The run's users on every process together, as the master said (USERS_MESSAGE); None: this process's -u."""

    def __init__(self) -> None:
        self._dispatcher: gevent.Greenlet[..., Any] | None = None
        self.tally = Tally()
        self.reset()

    def reset(self, seed: int = 0) -> None:
        if self._dispatcher is not None:
            self._dispatcher.kill(block=False)
        self._dispatcher = None
        self._due: Queue[Arrival | None] = Queue()
        """Arrivals due and not yet taken; None once a schedule is over (it stays for the next taker)."""
        self.in_flight = 0
        self._freed = Event()
        self._rng = random.Random(seed)
        self._going = Event()
        """Clear while paused: the rate's arrivals wait for the next rate."""
        self._going.set()

    def pause(self) -> None:
        """No arrival of the rate falls due until `resume` (the one the dispatcher waits for may still)."""
        self._going.clear()

    def resume(self) -> None:
        self._going.set()

    def end(self) -> None:
        """The run stops: no arrival falls due any more, the ones due and not taken are dropped, and every user
        waiting for one gets None (and stops) now. Locust lets a user in its task finish within the stop
        timeout (--request-timeout here, stop_timeout.py): a user waiting on a paused schedule (a capacity
        search that ended on a failed probe) held the run's end, and a web UI's Ctrl+C, that long (60 s)."""
        if self._dispatcher is not None:
            self._dispatcher.kill(block=False)  # dead and successful: next_arrival starts no other
        self.drop_due()
        self._due.put(None)

    def _share(self, environment: Any) -> float:
        runner = environment.runner
        total = self.total_users or locust_options(environment).num_users
        here = runner.user_count if runner is not None else 0
        return min(here / total, 1.0) if total and here else 1.0

    def _rate_arrivals(self, environment: Any, settings: Settings) -> Iterator[Arrival]:
        due = perf_counter()
        while True:
            yield due, None
            if not self._going.is_set():  # paused: the schedule goes on from the moment it resumes, no burst
                self._going.wait()
                due = perf_counter()
            rate = (self.rate_override or settings.request_rate or 1.0) * self._share(environment)
            due += self._rng.gammavariate(settings.burstiness, 1.0 / (rate * settings.burstiness))

    def _dispatch(self, environment: Any, settings: Settings, schedule: Schedule | None) -> None:
        sent = 0
        arrivals = schedule.arrivals(environment) if schedule else self._rate_arrivals(environment, settings)
        for due, line in arrivals:
            if (wait := due - perf_counter()) > 0:
                gevent.sleep(wait)
            self._due.put((due, line))
            sent += 1
            if self.tally.counting:
                self.tally.scheduled += 1
                if wait < -DISPATCH_LATE_S:
                    self.tally.dispatched_late += 1
        # Taken from the queue, an arrival is in flight before its taker yields (slot() counts it).
        while len(self._due) or self.in_flight:
            self._freed.clear()
            self._freed.wait(0.05)
        self._due.put(None)
        if schedule is not None:
            schedule.over(environment, sent)

    def drop_due(self) -> int:
        """Drop the arrivals due and not yet taken (a capacity probe's backlog, which would otherwise be sent
        during the next probe and charged to its latencies); how many. The end-of-schedule None stays."""
        dropped = 0
        kept: list[Arrival | None] = []
        while not self._due.empty():
            arrival = self._due.get_nowait()
            if arrival is None:
                kept.append(arrival)
            else:
                dropped += 1
        for arrival in kept:
            self._due.put(arrival)
        return dropped

    def next_arrival(self, environment: Any, settings: Settings, schedule: Schedule | None = None) -> Arrival | None:
        """Block until an arrival is due: (the perf_counter time it was due, maybe in the past; the schedule's
        line or None). None once `schedule` is over."""
        if self._dispatcher is None or (self._dispatcher.dead and not self._dispatcher.successful()):
            self._dispatcher = gevent.spawn(self._dispatch, environment, settings, schedule)
        tally = self.tally
        tally.idle_users += 1
        try:
            arrival = self._due.get()
        finally:
            tally.idle_users -= 1
        if arrival is None:
            self._due.put(None)  # every user waiting, and any that asks later, learns it too
        return arrival

    def next_send_time(self, environment: Any, settings: Settings) -> float:
        """Block until an arrival of the rate is due; return the perf_counter time it was due (maybe in the past)."""
        arrival = self.next_arrival(environment, settings)
        assert arrival is not None, "the rate's arrivals never end"
        return arrival[0]

    def current_rate(self, environment: Any, request_rate: float | None) -> float:
        """This process's target now, requests/s: its share of the run's rate (or of the sweep step's)."""
        return (self.rate_override or request_rate or 0.0) * self._share(environment)

    @contextmanager
    def slot(self, environment: Any, settings: Settings, due: float) -> Iterator[None]:
        """At most this process's share of --max-concurrency requests in flight; the tally hears when
        the request due at `due` left."""
        cap = max(1, round(settings.max_concurrency * self._share(environment))) if settings.max_concurrency else None
        while cap is not None and self.in_flight >= cap:
            self._freed.clear()
            self._freed.wait()
        tally = self.tally
        # Counted even once the run began to stop (tally.counting is for the arrivals that fall due): with
        # --stop-timeout a user that waited for a slot still sends its arrival, and Locust counts its answer.
        tally.sent += 1
        tally.on_sent((perf_counter() - due) * 1000)
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1
            self._freed.set()


_OPEN_LOOP = Slot("open_loop", OpenLoop)
"""This process's open-loop schedule (--request-rate), shared by its users."""


def open_loop_of(environment: Any) -> OpenLoop:
    """The run's open-loop schedule (one per environment)."""
    return _OPEN_LOOP.of(environment)


def _on_init(environment: Any, runner: Any = None, **_: Any) -> None:
    def set_rate(msg: Any, **_: Any) -> None:  # a sweep step on the master changes every process's rate
        schedule = open_loop_of(environment)
        schedule.rate_override = float(msg.data)
        schedule.resume()

    def pause(msg: Any, **_: Any) -> None:
        open_loop_of(environment).pause()

    def drop_due(msg: Any, **_: Any) -> None:  # a capacity probe ended: its backlog is not the next one's
        open_loop_of(environment).drop_due()

    def set_users(msg: Any, **_: Any) -> None:
        if isinstance(msg.data, int) and not isinstance(msg.data, bool) and 0 < msg.data <= 10_000_000:
            open_loop_of(environment).total_users = msg.data

    if runner is not None and hasattr(runner, "register_message"):
        runner.register_message(RATE_MESSAGE, set_rate)
        runner.register_message(DROP_DUE_MESSAGE, drop_due)
        runner.register_message(PAUSE_MESSAGE, pause)
        runner.register_message(USERS_MESSAGE, set_users)


def _on_test_start(environment: Any, **_: Any) -> None:
    runner = environment.runner
    if isinstance(runner, MasterRunner) and (users := locust_options(environment).num_users) > 0:
        runner.send_message(USERS_MESSAGE, users)  # type: ignore[arg-type]  # Locust types a dict; any msgpack value goes
    # each worker its own stream: the same seed on every worker would send their bursts together
    worker = getattr(environment.runner, "worker_index", 0) or 0
    open_loop_of(environment).reset(seed=settings_of(environment).seed * 1000 + worker)


def _on_test_stopping(environment: Any, **_: Any) -> None:
    open_loop_of(environment).end()  # before Locust stops the users: the waiting ones stop at once


def _on_test_stop(environment: Any, **_: Any) -> None:
    open_loop = open_loop_of(environment)
    open_loop.rate_override = None
    open_loop.reset()


def setup(events: Events) -> None:
    events.init.add_listener(_on_init)
    events.test_start.add_listener(_on_test_start)
    events.test_stopping.add_listener(_on_test_stopping)
    events.test_stop.add_listener(_on_test_stop)
