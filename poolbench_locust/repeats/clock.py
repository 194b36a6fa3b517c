"""The repeats of one run: when each ends, and the resets between them (the master's or the only
process's clock; repeat_runs.py wires it into Locust's events)."""

from __future__ import annotations

import logging
import time
from typing import Any

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
        self.left_out = 0
        """The requests of the users' start left out when every user ran only after the warm-up's end."""
        self.spawned = Event()
        """Set when every user runs (Locust's spawning_complete, on the master once every worker's are)."""
        self._timer: gevent.Greenlet[..., Any] | None = None
        self._acks = 0
        self._all_acked = Event()

    def start(self, environment: Environment, planned: int, warmup: float, run_time: float) -> None:
        self.stop()
        self.table = RepeatTable(environment, planned)
        self.ended_at = None
        self.left_out = 0
        self.spawned.clear()
        self._timer = gevent.spawn(self._run, environment, planned, warmup, time.time() + run_time)

    def _run(self, environment: Environment, planned: int, warmup: float, run_end: float) -> None:
        gevent.sleep(warmup)  # warm-up's own timer, spawned first with the same delay, resets before this
        assert self.table is not None
        self.started_at = self._begin(environment, run_end)
        length = max(run_end - self.started_at, 0.0) / planned  # the repeats still end at -t
        self.table.open()
        for k in range(1, planned):
            gevent.sleep(max(self.started_at + length - time.time(), 0.0))
            self.next_repeat(environment, k)

    def _begin(self, environment: Environment, run_end: float) -> float:
        """When the first repeat begins: the warm-up's end, or once every user runs if that is later (a
        worker builds its pools and spawns its users after the master's start: a second or two on a busy
        machine, which would make the first repeat read low); what came before is then left out."""
        if self.spawned.is_set():
            return time.time()
        self.spawned.wait(max(run_end - time.time(), 0.0))
        now = self._ask_workers(environment, 0)
        runner = environment.runner
        assert runner is not None
        self.left_out = runner.stats.total.num_requests
        reset_stats(environment)
        warmup_of(environment).counted_from = now
        logger.log(
            logging.INFO if self.left_out else logging.DEBUG,
            "Repeats begin with every user running: %d requests of the users' start left out (--warmup leaves "
            "the start out by time)",
            self.left_out,
        )
        return now

    def _ask_workers(self, environment: Environment, k: int) -> float:
        """Each worker sends what it counted and resets; the boundary's time (when they were asked: each
        resets as the ask arrives, so a slow answer must not lengthen the repeat that ended, nor shorten
        the next), once they answered or ACK_WAIT_S passed."""
        runner = environment.runner
        now = time.time()
        if isinstance(runner, MasterRunner) and runner.worker_count:
            self._acks = runner.worker_count
            self._all_acked.clear()
            runner.send_message(REPEAT_MESSAGE)
            if not self._all_acked.wait(ACK_WAIT_S):
                logger.warning("Repeat %d: not every worker sent its figures within %g s", k, ACK_WAIT_S)
        return now

    def next_repeat(self, environment: Environment, k: int) -> None:
        assert environment.runner is not None and self.table is not None
        now = self._ask_workers(environment, k)
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
