"""--find-capacity as a load shape: the users stay at -u (the most requests in flight) while a driver on
the master (or the only process) sets the open loop's rate of each probe, as a sweep's steps set theirs
(workload/arrival.py's rate message), measures it after a settle period, and lets search.py choose the
next. When the search is over the shape ends the run by itself; -t is only a cap."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import gevent
from locust import LoadTestShape
from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner

from poolbench_locust.capacity import lanes as lanes_
from poolbench_locust.capacity.host_figures import listen_for_route, send_route
from poolbench_locust.capacity.lanes import Lane, new_lanes
from poolbench_locust.capacity.probes import CLIENT, CpuWatch, Mark, Probe, judge, mark, measure, server_gauge
from poolbench_locust.capacity.repeated import Searches
from poolbench_locust.capacity.report import Outcome
from poolbench_locust.capacity.search import Search
from poolbench_locust.consistency.state import consistency_of
from poolbench_locust.lifecycle import exit_early
from poolbench_locust.locust_options import locust_options
from poolbench_locust.metrics.checks import EXIT_CODE
from poolbench_locust.options import OptionError, Settings, settings_of
from poolbench_locust.workload.arrival import DROP_DUE_MESSAGE, PAUSE_MESSAGE, RATE_MESSAGE

logger = logging.getLogger("poolbench_locust")
console = logging.getLogger("locust.stats_logger")

SETTLE_SHARE = 0.25
"""A probe's settle period, as a share of --sweep-step-time (at least SETTLE_MIN_S): the queue of the
new rate forms, the previous probe's requests in flight end, and none of them count."""
SETTLE_MIN_S = 1.0
FLUSH_MESSAGE = "poolbench_capacity_flush"
"""The master asks every worker for its report now, so that a probe's marks are not up to 3 s (Locust's
WORKER_REPORT_INTERVAL) behind the workers' counters."""
FLUSH_WAIT_S = 0.5
"""How long the master waits for the workers' reports after asking for them."""
DRAIN_CHECK_S = 0.5
"""--ab-host: how often the other host's count of requests is read while its requests still in flight end."""


def users_of(environment: Environment) -> int:
    """-u, or the web UI form's Users: the most requests in flight at once."""
    return locust_options(environment).num_users


def settle_seconds(step_time: float) -> float:
    return max(SETTLE_MIN_S, SETTLE_SHARE * step_time)


class CapacityShape(LoadTestShape):
    abstract = True  # not picked up from a locustfile: made by poolbench_locust when --find-capacity is given

    use_common_options = True
    """The web UI's form shows Users (the most requests in flight), as for a run without a shape."""

    def __init__(self, environment: Environment, settings: Settings) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # LoadTestShape's is unannotated
        self.environment = environment
        self.settings = settings
        self.users = users_of(environment)
        if not self.users and locust_options(environment).headless:
            raise OptionError("--find-capacity", "needs --users: the most requests in flight at once")
        self.replaced: LoadTestShape | None = None
        """The shape this search took the place of (a locustfile's), put back when the web form turns it off."""
        self._driver: gevent.Greenlet[..., Any] | None = None
        self._resets = 0
        self._generation = 0
        self._new_run()

    def _new_run(self) -> None:
        """A start: the first search of the run (--repeat N runs N), of each host with --ab-host."""
        self._generation += 1
        self.lanes: list[Lane] = new_lanes(self.settings, self.environment.host)
        self.done = False
        self._finished = False
        self.current: tuple[int, float] | None = None
        """The probe measuring now: its number and target rate (the web UI's Capacity tab shows it)."""
        self.current_side: str | None = None
        """With --ab-host, whose probe measures now ("A" or "B")."""
        self._last_lane: Lane | None = None
        """The lane of the probe before: its host's requests still in flight end before the other host's probe."""
        self._last_probe: Probe | None = None

    @property
    def searches(self) -> Searches:
        """The searches of the run's host (of A, --host, with --ab-host: each host's are its lane's)."""
        return self.lanes[0].searches

    @property
    def search(self) -> Search:
        return self.lanes[0].search

    @property
    def outcome(self) -> Outcome:
        return self.lanes[0].outcome

    def reset_time(self) -> None:
        """A start (Locust calls this before the first tick): a new search, with the options as the web
        UI's form left them (the form's checks have passed them)."""
        super().reset_time()  # type: ignore[no-untyped-call]  # LoadTestShape's is unannotated
        if self._driver is not None:
            self._driver.kill(block=False)
            self._driver = None
        with contextlib.suppress(OptionError):  # refused in the form, and again at test_start
            self.settings = settings_of(self.environment)
        self.users = users_of(self.environment) or 1
        self._new_run()

    def tick(self) -> tuple[int, float] | None:
        if self.done:
            return None
        # Locust starts -t's timer only after a shape has ended: the shape keeps it itself, as the cap.
        run_time = locust_options(self.environment).run_time
        if run_time and self.get_run_time() >= run_time:
            logger.info("Capacity search cut short by the run time (-t %gs)", run_time)
            self.finish()
            return None
        if self._driver is None:
            self._driver = gevent.spawn(self._drive)
        return self.users, float(self.users)

    @property
    def running(self) -> bool:
        """A search is under way: its driver started and has not ended."""
        return self._driver is not None and not self.done and not self._finished

    def stats_reset(self) -> None:
        """The stats were reset (the end of --warmup, or the web UI's button): a probe measuring across it is
        measured again."""
        self._resets += 1

    def _processes(self) -> int:
        runner = self.runner
        return max(runner.worker_count, 1) if isinstance(runner, MasterRunner) else 1

    def _drive(self) -> None:
        # A driver killed by reset_time ends after the new search began (Locust's master calls reset_time
        # again in runner.start, after the first tick spawned this driver): it must not end the new one.
        generation = self._generation
        lanes = self.lanes
        try:
            while self.get_run_time() < self.settings.warmup:
                gevent.sleep(0.2)
            # The lanes take turns, a probe each: with --ab-host A's probe, then B's, then A's next, each its own
            # search's; a lane whose searches are over gives its turns to the other.
            turn = 0
            while not all(lane.done for lane in lanes):
                lane = lanes[turn % len(lanes)]
                turn += 1
                if (rate := lane.next_rate()) is not None:
                    self._step(lane, rate)
            logger.info("Capacity search over: the run ends")
        except Exception:  # the driver must end the run, never leave it spinning at its last rate
            logger.exception("capacity search")
            for lane in lanes:
                lane.outcome.ended = lane.outcome.ended or "error"
        finally:
            if generation == self._generation:
                self.current = self.current_side = None
                self.done = True
            if len(lanes) > 1 and self.runner is not None:
                with contextlib.suppress(Exception):  # the run may be quitting: no process to tell
                    send_route(self.runner, None)

    def _step(self, lane: Lane, rate: float) -> None:
        """One probe of the lane's search at `rate`, and its verdict recorded."""
        lane.number += 1
        number = lane.number
        self.current, self.current_side = (number, rate), lane.side
        probe = self._probe(lane, number, rate)
        self.current = self.current_side = None
        lane.outcome.probes.append(probe)
        self._last_probe = probe
        logger.info(
            "Capacity probe %s%d: %.1f requests/s %s (limited by %s)%s",
            lane.prefix,
            number,
            rate,
            "passed" if probe.passed else "failed",
            probe.limited_by,
            f": {'; '.join(probe.why)}" if probe.why else "",
        )
        lane.search.record(rate, probe.passed)
        if not probe.passed and probe.limited_by == CLIENT:
            lane.outcome.ended = "client"

    def _probe(self, lane: Lane, number: int, rate: float) -> Probe:
        runner = self.runner
        assert runner is not None
        previous, drained = self._last_lane, False
        if previous is not None and self._last_probe is not None and not self._last_probe.passed:
            # A failed probe may have left a queue at the server: it ends, no arrival joining it, before this
            # probe's rate starts. Without it, a 75/s probe after one at 100/s of a server of 100/s drained the
            # backlog through its settle period and failed where the steady state passes (a CI run).
            runner.send_message(PAUSE_MESSAGE)
            self._drain(previous)
            drained = True
        if lane.side is not None:  # every scheduled request of this probe to its host alone
            send_route(runner, lane.side)
        runner.send_message(RATE_MESSAGE, rate)
        if previous is not None and previous is not lane and not drained:
            self._drain(previous)
            runner.send_message(DROP_DUE_MESSAGE)  # what queued meanwhile is no probe's load
        self._last_lane = lane
        step = self.settings.sweep_step_time
        while True:
            resets = self._resets
            gevent.sleep(settle_seconds(step))
            cpu = None if isinstance(runner, MasterRunner) else CpuWatch()
            if cpu is not None:
                cpu.start()
            before = self._mark(lane.side)
            # The answers compared from now are this probe's, as its counters' differences are: the settle
            # period's are in no probe's window (the workers' reports were flushed into the mark's figures).
            consistency_of(self.environment).open_window(self.label(lane, number, rate))
            end = time.monotonic() + step
            while (left := end - time.monotonic()) > 0:
                gevent.sleep(min(1.0, left))
                if cpu is not None:
                    cpu.tick()
            after = self._mark(lane.side)
            compared = consistency_of(self.environment).close_window()
            if resets == self._resets:
                break
        # The arrivals still queued in the client are this probe's backlog: sent later, they would be the
        # next probe's latencies.
        runner.send_message(DROP_DUE_MESSAGE)
        probe = measure(number, rate, before, after, cpu, self._processes(), self.users)
        probe.server_waiting = server_gauge(self.environment, "waiting", before.wall, after.wall)
        probe.server_running = server_gauge(self.environment, "running", before.wall, after.wall)
        probe.consistency = compared
        return judge(probe, self.settings)

    def _drain(self, lane: Lane) -> None:
        """Wait until the lane's requests still in flight have ended (its host's count of requests stopped
        growing), at most --request-timeout: an overloaded probe's backlog at that host holds users and the
        server's slots, and the next probe would be measured short of them."""
        last = self._last_probe
        held_s = (last.e2e_p50_ms or 0.0) / 1000 if last is not None else 0.0
        quiet = max(DRAIN_CHECK_S, 2 * held_s)  # no request of that host ended for twice its usual time
        deadline = time.monotonic() + self.settings.request_timeout
        count = self._mark(lane.side).requests
        still = time.monotonic()
        while time.monotonic() < deadline:
            gevent.sleep(DRAIN_CHECK_S)
            if (now := self._mark(lane.side).requests) != count:
                count, still = now, time.monotonic()
            elif time.monotonic() - still >= quiet:
                return

    def label(self, lane: Lane, number: int, rate: float) -> str:
        """The probe's load, as a gate's line names it: "capacity probe 3 (40.0 requests/s)" ("capacity probe
        A3" with --ab-host)."""
        search = f"search {len(lane.searches.outcomes)}, " if self.settings.repeat > 1 else ""
        return f"{search}capacity probe {lane.prefix}{number} ({rate:,.1f} requests/s)"

    def _mark(self, side: str | None = None) -> Mark:
        """The run's counters now (one host's, with `side`); on a master, once the workers' reports asked for
        now are in."""
        at = time.monotonic()
        runner = self.runner
        if isinstance(runner, MasterRunner):
            runner.send_message(FLUSH_MESSAGE)
            gevent.sleep(FLUSH_WAIT_S)
        return mark(self.environment, at, side)

    def finish(self, ended: str = "cut short") -> None:
        """The run is ending (the search ended it, -t, the web UI's Stop): stop the driver, once; a search
        that had not ended by itself ended so."""
        if self._finished:
            return
        self._finished = True
        if self._driver is not None and not self._driver.dead:
            self._driver.kill(block=False)
        self.current = self.current_side = None
        for lane in self.lanes:
            lane.finish(ended)


def shape_of(environment: Environment) -> CapacityShape | None:
    """The run's capacity search's shape, or None when the run searches none."""
    shape = environment.shape_class
    return shape if isinstance(shape, CapacityShape) else None


def capacity_of(environment: Environment) -> Outcome | None:
    """The run's capacity search, or None when the run is none."""
    shape = shape_of(environment)
    return None if shape is None else shape.outcome


def lanes_of(environment: Environment) -> list[Lane] | None:
    """The run's capacity searches, a lane a host (one without --ab-host), or None when the run searched none."""
    shape = shape_of(environment)
    return None if shape is None else shape.lanes


def searches_of(environment: Environment) -> Searches | None:
    """The run's capacity searches (N with --repeat N), or None when the run searched none."""
    shape = shape_of(environment)
    return None if shape is None else shape.searches


def install(environment: Environment, settings: Settings) -> CapacityShape:
    """Make the run a capacity search: its shape in the place of any other (kept, for `uninstall`)."""
    shape = CapacityShape(environment, settings)
    shape.runner = environment.runner
    shape.replaced = environment.shape_class
    environment.shape_class = shape
    return shape


def uninstall(environment: Environment) -> None:
    """The run is no capacity search any more (the web UI's form turned it off): the shape it replaced
    is back, if any."""
    if (shape := shape_of(environment)) is not None:
        environment.shape_class = shape.replaced


def _finish(environment: Environment) -> None:
    """The run quits: the search's CSV and chart beside the other CSV files; the checks' exit code when no
    capacity of the server could be claimed."""
    if (shape := shape_of(environment)) is None:
        return
    shape.finish()
    slo = shape.settings.slo
    prefix = locust_options(environment).csv_prefix
    if prefix:
        lanes_.write_csv(shape.lanes, f"{prefix}_capacity.csv")
        if image := lanes_.chart(shape.lanes, slo.e2e_ms if slo else None):
            with open(f"{prefix}_capacity.svg", "w") as f:
                f.write(image)
    if lanes_.failed(shape.lanes) and environment.process_exit_code in (None, 0):
        environment.process_exit_code = EXIT_CODE


def _summary(environment: Environment) -> None:
    if (shape := shape_of(environment)) is None:
        return
    width = settings_of(environment).console_width
    for line in lanes_.console_lines(shape.lanes, width):  # after the pooling and client load tables
        console.info(line)
    for lane in shape.lanes:  # the first search of each host that claimed no capacity
        if failed := next(iter(lanes_.failed([lane])), None):
            logger.error("Check failed: --find-capacity: %s", failed.answer())


def _on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    if runner is None:
        return
    if not isinstance(runner, MasterRunner):
        listen_for_route(environment, runner)  # --ab-host: a probe's requests to its host alone
    if isinstance(runner, WorkerRunner):
        # Locust's own report (its stats, the pooling stats, the pacing figures), sent now, not in up to 3 s.
        # Registered with or without --find-capacity: the web UI's form may start a search.
        runner.register_message(FLUSH_MESSAGE, lambda msg, **_: runner._send_stats())
        return
    events = environment.events

    def stats_reset(**_: Any) -> None:
        if (shape := shape_of(environment)) is not None:
            shape.stats_reset()

    def stopped(**_: Any) -> None:
        # The web UI's Stop button: the driver stops with the run (it would go on sending rates to stopped users).
        if (shape := shape_of(environment)) is not None:
            shape.finish("stopped")

    events.reset_stats.add_listener(stats_reset)
    events.test_stop.add_listener(stopped)
    events.quitting.add_listener(lambda **_: _finish(environment))
    events.quit.add_listener(lambda **_: _summary(environment))
    settings = settings_of(environment)
    if settings.find_capacity:
        try:
            install(environment, settings)
        except OptionError as e:
            exit_early(environment, str(e))


def setup(events: Events) -> None:
    events.init.add_listener(_on_init)
