"""--find-capacity as a load shape: the users stay at -u (the most requests in flight) while a driver on
the master (or the only process) sets the open loop's rate of each probe, as a sweep's steps set theirs
(workload/arrival.py's rate message), measures it after a settle period, and lets search.py choose the
next. When the search is over the shape ends the run by itself; -t is only a cap."""

from __future__ import annotations

import logging
import time
from typing import Any

import gevent
from locust import LoadTestShape
from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner

from poolbench_locust.capacity.probes import CLIENT, CpuWatch, Mark, Probe, judge, mark, measure, server_gauge
from poolbench_locust.capacity.repeated import Searches
from poolbench_locust.capacity.report import Outcome, probe_sheet
from poolbench_locust.capacity.search import Search
from poolbench_locust.lifecycle import exit_early
from poolbench_locust.metrics.checks import EXIT_CODE
from poolbench_locust.options import OptionError, Settings, settings_of
from poolbench_locust.workload.arrival import DROP_DUE_MESSAGE, RATE_MESSAGE

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


def settle_seconds(step_time: float) -> float:
    return max(SETTLE_MIN_S, SETTLE_SHARE * step_time)


class CapacityShape(LoadTestShape):
    abstract = True  # not picked up from a locustfile: made by poolbench_locust when --find-capacity is given

    def __init__(self, environment: Environment, settings: Settings) -> None:
        super().__init__()
        self.environment = environment
        self.settings = settings
        self.users = int(getattr(environment.parsed_options, "num_users", 0) or 0)
        if not self.users:
            raise OptionError("--find-capacity", "needs --users: the most requests in flight at once")
        self._driver: gevent.Greenlet | None = None
        self._resets = 0
        self._new_run()

    def _new_run(self) -> None:
        self.searches = Searches(self.settings.repeat)
        self._new_search()
        self.done = False
        self._finished = False

    def _new_search(self) -> None:
        """The next search (--repeat N runs N), from the start rate: it knows nothing of the one before."""
        s = self.settings
        self.search = Search(s.capacity_start_rate, s.capacity_precision)
        self.outcome = Outcome(str(s.slo), s.capacity_attainment, s.capacity_precision)
        self.searches.outcomes.append(self.outcome)

    def reset_time(self) -> None:
        """A start (Locust calls this before the first tick): a new search."""
        super().reset_time()
        if self._driver is not None:
            self._driver.kill(block=False)
            self._driver = None
        self._new_run()

    def tick(self) -> tuple[int, float] | None:
        if self.done:
            return None
        # Locust starts -t's timer only after a shape has ended: the shape keeps it itself, as the cap.
        run_time = getattr(self.environment.parsed_options, "run_time", None)
        if run_time and self.get_run_time() >= run_time:
            logger.info("Capacity search cut short by the run time (-t %gs)", run_time)
            self.finish()
            return None
        if self._driver is None:
            self._driver = gevent.spawn(self._drive)
        return self.users, float(self.users)

    def stats_reset(self) -> None:
        """The stats were reset (the end of --warmup, or the web UI's button): a probe measuring across it is
        measured again."""
        self._resets += 1

    def _processes(self) -> int:
        runner = self.runner
        return max(runner.worker_count, 1) if isinstance(runner, MasterRunner) else 1

    def _drive(self) -> None:
        try:
            self._search()
            while not self.searches.over():
                self._new_search()
                self._search()
        except Exception:  # the driver must end the run, never leave it spinning at its last rate
            logger.exception("capacity search")
            self.outcome.ended = self.outcome.ended or "error"
        finally:
            # A driver killed by reset_time ends no search: Locust's master calls reset_time again after
            # test_start, whose listeners may yield (--server-metrics' first scrape) after a tick spawned it.
            if gevent.getcurrent() is self._driver:
                self.done = True

    def _search(self) -> None:
        settings = self.settings
        while self.get_run_time() < settings.warmup:
            gevent.sleep(0.2)
        if settings.repeat > 1:
            logger.info("Capacity search %d of %d", len(self.searches.outcomes), settings.repeat)
        number = 0
        while (rate := self.search.next_rate()) is not None:
            number += 1
            probe = self._probe(number, rate)
            self.outcome.probes.append(probe)
            logger.info(
                "Capacity probe %d: %.1f requests/s %s (limited by %s)%s",
                number,
                rate,
                "passed" if probe.passed else "failed",
                probe.limited_by,
                f": {'; '.join(probe.why)}" if probe.why else "",
            )
            self.search.record(rate, probe.passed)
            if not probe.passed and probe.limited_by == CLIENT:
                self.outcome.ended = "client"
                break
        else:
            if self.search.converged():
                self.outcome.ended = "converged"
            else:
                self.outcome.ended = "no rate passed" if self.search.passed is None else "every rate passed"
        last = self.searches.over()
        logger.info("Capacity search over after %d probes (%s)%s", number, self.outcome.ended, ": the run ends" * last)

    def _probe(self, number: int, rate: float) -> Probe:
        runner = self.runner
        assert runner is not None
        runner.send_message(RATE_MESSAGE, rate)
        step = self.settings.sweep_step_time
        while True:
            resets = self._resets
            gevent.sleep(settle_seconds(step))
            cpu = None if isinstance(runner, MasterRunner) else CpuWatch()
            if cpu is not None:
                cpu.start()
            before = self._mark()
            end = time.monotonic() + step
            while (left := end - time.monotonic()) > 0:
                gevent.sleep(min(1.0, left))
                if cpu is not None:
                    cpu.tick()
            after = self._mark()
            if resets == self._resets:
                break
        # The arrivals still queued in the client are this probe's backlog: sent later, they would be the
        # next probe's latencies.
        runner.send_message(DROP_DUE_MESSAGE)
        probe = measure(number, rate, before, after, cpu, self._processes())
        probe.server_waiting = server_gauge(self.environment, "waiting", before.wall, after.wall)
        probe.server_running = server_gauge(self.environment, "running", before.wall, after.wall)
        return judge(probe, self.settings)

    def _mark(self) -> Mark:
        """The run's counters now; on a master, once the workers' reports asked for now are in."""
        at = time.monotonic()
        runner = self.runner
        if isinstance(runner, MasterRunner):
            runner.send_message(FLUSH_MESSAGE)
            gevent.sleep(FLUSH_WAIT_S)
        return mark(self.environment, at)

    def finish(self) -> None:
        """The run is ending (the search ended it, or -t): stop the driver, once."""
        if self._finished:
            return
        self._finished = True
        if self._driver is not None and not self._driver.dead:
            self._driver.kill(block=False)
        if self.outcome.ended is None and self.outcome.probes:
            self.outcome.ended = "cut short"
        if not self.outcome.probes and len(self.searches.outcomes) > 1:  # cut short before its first probe
            self.searches.outcomes.pop()
            self.outcome = self.searches.outcomes[-1]


def capacity_of(environment: Environment) -> Outcome | None:
    """The run's capacity search (the current one, with --repeat), or None when the run is none."""
    shape = environment.shape_class
    return shape.outcome if isinstance(shape, CapacityShape) else None


def searches_of(environment: Environment) -> Searches | None:
    """The run's capacity searches (N with --repeat N), or None when the run searched none."""
    shape = environment.shape_class
    return shape.searches if isinstance(shape, CapacityShape) else None


def _on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    if runner is None:
        return
    settings = settings_of(environment)
    if not settings.find_capacity:
        return
    if isinstance(runner, WorkerRunner):
        # Locust's own report (its stats, the pooling stats, the pacing figures), sent now, not in up to 3 s.
        runner.register_message(FLUSH_MESSAGE, lambda msg, **_: runner._send_stats())
        return
    try:
        shape = CapacityShape(environment, settings)
    except OptionError as e:
        exit_early(environment, str(e))
    shape.runner = runner
    environment.shape_class = shape
    environment.events.reset_stats.add_listener(lambda **_: shape.stats_reset())

    @environment.events.quitting.add_listener
    def finish(**_: Any) -> None:
        shape.finish()
        searches = shape.searches
        prefix = getattr(environment.parsed_options, "csv_prefix", None)
        if prefix:
            searches.write_csv(f"{prefix}_capacity.csv")
            if image := probe_sheet(shape.outcome, settings.slo.e2e_ms if settings.slo else None):
                with open(f"{prefix}_capacity.svg", "w") as f:
                    f.write(image)
        if searches.failed() and environment.process_exit_code in (None, 0):
            environment.process_exit_code = EXIT_CODE

    @environment.events.quit.add_listener
    def summary(**_: Any) -> None:
        for line in shape.searches.console_lines():  # after the pooling and client load tables
            console.info(line)
        if shape.searches.failed():
            failed = next(o for o in shape.searches.outcomes if o.failed())
            logger.error("Check failed: --find-capacity: %s", failed.answer())


def setup(events: Events) -> None:
    events.init.add_listener(_on_init)
