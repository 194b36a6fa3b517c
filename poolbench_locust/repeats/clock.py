"""The repeats of one run: when each ends, and the resets between them (the master's or the only
process's clock; repeat_runs.py wires it into Locust's events)."""

from __future__ import annotations

import logging
import time

import gevent
from gevent.event import Event
from locust.env import Environment
from locust.runners import MasterRunner

from poolbench_locust.repeats.repeat_table import RepeatTable
from poolbench_locust.store import Slot
from poolbench_locust.workload.warmup import warmup_of

logger = logging.getLogger("poolbench_locust")

REPEAT_MESSAGE = "poolbench_repeat_over"
DONE_MESSAGE = "poolbench_repeat_reset"
ACK_WAIT_S = 2.0
"""How long the master waits for the workers' reports at a repeat's end: a lost worker must not stop the run."""


class Repeats:
    """One run's repeats, on the master or the only process."""

    def __init__(self) -> None:
        self.table: RepeatTable | None = None
        self.started_at = 0.0
        self.ended_at: float | None = None
        self._timer: gevent.Greenlet | None = None
        self._acks = 0
        self._all_acked = Event()

    def start(self, environment: Environment, planned: int, warmup: float, length: float) -> None:
        self.stop()
        self.table = RepeatTable(environment, planned)
        self.ended_at = None
        self._timer = gevent.spawn(self._run, environment, planned, warmup, length)

    def _run(self, environment: Environment, planned: int, warmup: float, length: float) -> None:
        gevent.sleep(warmup)  # warm-up's own timer, spawned first with the same delay, resets before this
        self.started_at = time.time()
        assert self.table is not None
        self.table.open()
        for k in range(1, planned):
            gevent.sleep(max(self.started_at + length - time.time(), 0.0))
            self.next_repeat(environment, k)

    def next_repeat(self, environment: Environment, k: int) -> None:
        runner = environment.runner
        assert runner is not None and self.table is not None
        # The boundary is when the workers are asked, not when the last of them answered: each worker
        # resets as the ask arrives, so a slow answer must not lengthen the repeat that ended (its
        # requests/s would read low) nor shorten the next.
        now = time.time()
        if isinstance(runner, MasterRunner) and runner.worker_count:
            self._acks = runner.worker_count
            self._all_acked.clear()
            runner.send_message(REPEAT_MESSAGE)
            if not self._all_acked.wait(ACK_WAIT_S):
                logger.warning("Repeat %d: not every worker sent its figures within %g s", k, ACK_WAIT_S)
        self.table.close(now - self.started_at)
        reset_stats(environment)
        self.table.open()
        self.started_at = now
        warmup_of(environment).counted_from = now  # a worker's later report starts no earlier (warmup.clamp_start)
        logger.info("Repeat %d of %d over: stats reset", k, self.table.planned)

    def acked(self) -> None:
        self._acks -= 1
        if self._acks <= 0:
            self._all_acked.set()

    def finish(self) -> None:
        """The last repeat's row, once, at quitting: the workers' last reports are merged by then."""
        if self.table is not None and len(self.table.repeats) < self.table.planned:
            end = self.ended_at or time.time()
            self.table.close(end - self.started_at)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.kill(block=False)
            self._timer = None


_REPEATS = Slot("repeats", Repeats)


def repeats_of(environment: Environment) -> Repeats:
    """The run's repeats (one per environment); its table is None when the run has no --repeat."""
    return _REPEATS.of(environment)


def reset_stats(environment: Environment) -> None:
    runner = environment.runner
    if runner is not None:
        runner.stats.reset_all()
        runner.exceptions = {}
    environment.events.reset_stats.fire()
