"""Replaying a trace (workload/trace.py reads it): when each line leaves, and how the processes share it.

The schedule is an arrival process of the open loop (workload/arrival.py): each request leaves at
its time whatever the server does, is timed from that time when no user was free to send it, and
counts in the open loop's late figures. With workers, line i is sent by the worker i mod n (the
master tells each worker its place at test start, and once all are ready a common start on its wall
clock: workers on other machines need synchronised clocks), so together they send the whole trace. When a
process has sent its last line and every answer is in, it says so; the run ends when all have.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import gevent
import gevent.event
from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner

from poolbench_locust.locust_options import locust_options
from poolbench_locust.options import OptionError, settings_of
from poolbench_locust.store import Slot

logger = logging.getLogger("poolbench_locust")

SHARE_MESSAGE = "poolbench_trace_share"
READY_MESSAGE = "poolbench_trace_ready"
GO_MESSAGE = "poolbench_trace_go"
OVER_MESSAGE = "poolbench_trace_over"


@dataclass(frozen=True, slots=True)
class TraceSchedule:
    """When each line of a trace leaves: seconds from the replay's start, at speed 1."""

    seconds: tuple[float, ...]

    def arrivals(self, environment: Any) -> Iterator[tuple[float, int]]:
        """(perf_counter time due, line index) of this process's share of the lines, from now on."""
        speed = settings_of(environment).trace_speed
        share = replay_of(environment).share
        index, count = share.of(environment)
        # With workers, their common start on the master's wall clock: no worker's spawn time shifts its share.
        start_at = share.wait_for_start(environment) if count > 1 else None
        start = perf_counter() + (start_at - time.time() if start_at is not None else 0.0)
        for line in range(index, len(self.seconds), count):
            yield start + self.seconds[line] / speed, line

    def over(self, environment: Any, sent: int) -> None:
        trace_over(environment, sent)


GO_LEAD_S = 0.5
"""From the master's go to the workers' common start: time for the message to reach every worker."""
GO_TIMEOUT_S = 60.0
"""A worker that hears no go (a master of another version, a lost worker) starts on its own after this."""


class Share:
    """This process's place among the processes that send a trace: (index, count), and when they all start.

    Each worker is ready when its first user asks for an arrival (its plans are built, which takes a
    while for a large trace); when all are, the master names a common start on its wall clock.
    """

    def __init__(self) -> None:
        self.index, self.count = 0, 1
        self.start_at: float | None = None
        """time.time() at which the workers' replay starts, once the master said it."""
        self.go = gevent.event.Event()

    def reset(self, index: int, count: int) -> None:
        self.index, self.count, self.start_at = index, count, None
        self.go.clear()

    def wait_for_start(self, environment: Any) -> float:
        environment.runner.send_message(READY_MESSAGE)
        self.go.wait(GO_TIMEOUT_S)
        return self.start_at if self.start_at is not None else time.time()

    def of(self, environment: Any) -> tuple[int, int]:
        return (self.index, self.count) if isinstance(getattr(environment, "runner", None), WorkerRunner) else (0, 1)


class Ending:
    """Ends the run once every process has sent its share of the trace and had every answer."""

    def __init__(self) -> None:
        self.expected = 1
        self.sent = 0
        self.reported = 0
        self.ready = 0
        """Workers whose users are ready to replay (the master starts them together)."""
        self.started = time.monotonic()

    def begin(self, processes: int) -> None:
        self.expected, self.sent, self.reported, self.ready, self.started = processes, 0, 0, 0, time.monotonic()

    def process_over(self, environment: Environment, sent: int) -> None:
        """One process (this one, or a worker by its message) has sent its share and had its answers."""
        self.sent += sent
        self.reported += 1
        if self.reported < self.expected:
            return
        runner = environment.runner
        settings = settings_of(environment)
        logger.info(
            "Trace over: the %d requests of %s were sent (in %.1f s, --trace-speed %g); ending the run",
            self.sent,
            settings.trace,
            time.monotonic() - self.started,
            settings.trace_speed,
        )
        if runner is None:
            return
        # as Locust ends a LoadTestShape's run: a headless run quits (its usual exit code), a web UI's stops
        headless = locust_options(environment).headless or not getattr(environment, "web_ui", None)
        gevent.spawn(runner.quit if headless else runner.stop)


class Replay:
    """This process's part in replaying a trace, for one run: its share of the lines and their common
    start (a worker's), and when every process has sent its share (the master's, or the one process's)."""

    def __init__(self) -> None:
        self.share = Share()
        self.ending = Ending()


_REPLAY = Slot("trace_replay", Replay)
"""A replayed trace's share of this process and its ending (--dataset trace:)."""


def replay_of(environment: Any) -> Replay:
    """The run's trace replay (one per environment)."""
    return _REPLAY.of(environment)


def trace_over(environment: Any, sent: int) -> None:
    """Called by the open loop when this process's share is sent and answered."""
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        runner.send_message(OVER_MESSAGE, {"sent": sent})
    else:
        replay_of(environment).ending.process_over(environment, sent)


def _configured(environment: Environment) -> bool:
    try:
        return settings_of(environment).trace is not None
    except OptionError:
        return False  # said at start by poolbench_locust.start_checks


def _on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    replay = replay_of(environment)
    if isinstance(runner, WorkerRunner):

        def take_share(msg: Any, **_: Any) -> None:
            replay.share.reset(int(msg.data["index"]), int(msg.data["count"]))

        def go(msg: Any, **_: Any) -> None:
            replay.share.start_at = float(msg.data["start_at"])
            replay.share.go.set()

        runner.register_message(SHARE_MESSAGE, take_share)
        runner.register_message(GO_MESSAGE, go)
    elif isinstance(runner, MasterRunner):

        def worker_over(msg: Any, **_: Any) -> None:
            sent = msg.data.get("sent") if isinstance(msg.data, dict) else None
            replay.ending.process_over(environment, sent if isinstance(sent, int) and sent >= 0 else 0)

        def worker_ready(msg: Any, **_: Any) -> None:
            replay.ending.ready += 1
            if replay.ending.ready == replay.ending.expected:
                runner.send_message(GO_MESSAGE, {"start_at": time.time() + GO_LEAD_S})

        runner.register_message(OVER_MESSAGE, worker_over)
        runner.register_message(READY_MESSAGE, worker_ready)


def _on_test_start(environment: Environment, **_: Any) -> None:
    runner = environment.runner
    if not _configured(environment):
        return
    ending = replay_of(environment).ending
    if not isinstance(runner, MasterRunner):
        ending.begin(1)
        return
    # Sent before the spawn messages, on the same connection: a worker knows its share before its first user.
    workers = sorted(c.id for c in (*runner.clients.ready, *runner.clients.running, *runner.clients.spawning))
    users = locust_options(environment).num_users
    if users < len(workers):
        logger.error(
            "-u %d: a trace sent by %d workers needs a user on each: at least -u %d", users, *[len(workers)] * 2
        )
        gevent.spawn(runner.stop)
        return
    ending.begin(len(workers))
    for index, worker in enumerate(workers):
        runner.send_message(SHARE_MESSAGE, {"index": index, "count": len(workers)}, client_id=worker)


def setup(events: Events) -> None:
    events.init.add_listener(_on_init)
    events.test_start.add_listener(_on_test_start)
