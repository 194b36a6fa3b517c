"""--warmup: the first seconds of a run send requests that no stats count, and every rate counts
from the end of warm-up.

Counting nothing is not enough: Locust's rates divide by the time since its stats started, so the
warm-up seconds would still count in every rate (-t 10s --warmup 5 halved the requests/s). At the
end of warm-up each process (the master and every worker, or the one local process) resets Locust's
stats and fires `reset_stats`, as Locust's own "Reset stats" does, so the pooling stats start again
with them. The master's clock decides, and its message ends every worker's warm-up: a worker's own
clock starts when the spawn message reaches it, which under load was 0.6 s after the master's, and
those 0.6 s of uncounted requests then counted in the master's rates. A report a worker sends
before the message reaches it holds no requests, only the time its last report began, which the
master must not take as the start of the counted run.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import gevent
from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner

from poolbench_locust.options import OptionError, settings_of
from poolbench_locust.store import Slot

logger = logging.getLogger("poolbench_locust")

OVER_MESSAGE = "poolbench_warmup_over"


class Warmup:
    """One process's warm-up: whether its requests count yet, and when counting began."""

    def __init__(self) -> None:
        self.counting = True
        self.counted_from: float | None = None
        """time.time() of this process's reset at the end of warm-up, None when there was none."""
        self._timer: gevent.Greenlet[..., Any] | None = None

    def start(self, environment: Environment, seconds: float) -> None:
        self.stop()
        self.counted_from = None
        if seconds <= 0:
            return
        self.counting = False
        if not isinstance(environment.runner, WorkerRunner):  # a worker waits for the master's message
            self._timer = gevent.spawn_later(seconds, self.end, environment)

    def end(self, environment: Environment) -> None:
        runner = environment.runner
        if runner is not None:
            runner.stats.reset_all()
            runner.exceptions = {}
        if isinstance(runner, MasterRunner):
            runner.send_message(OVER_MESSAGE)
        environment.events.reset_stats.fire()
        self.counted_from = time.time()
        self.counting = True
        logger.info("Warm-up over: counting from now on (stats reset)")

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.kill(block=False)
            self._timer = None
        self.counting = True

    def clamp_start(self, environment: Environment) -> None:
        """A worker's report may carry a start time from before the master's warm-up ended: not ours."""
        if self.counted_from is None or environment.runner is None:
            return
        stats = environment.runner.stats
        for entry in (stats.total, *stats.entries.values()):
            entry.start_time = max(entry.start_time, self.counted_from)


_WARMUP = Slot("warmup", Warmup)


def warmup_of(environment: Environment) -> Warmup:
    """The run's warm-up (one per environment)."""
    return _WARMUP.of(environment)


def _seconds(environment: Environment) -> float:
    try:
        return settings_of(environment).warmup
    except OptionError:  # a bad value is refused before the run (start_checks, webform.validation)
        return 0.0


def _on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner):
        warmup = warmup_of(environment)
        runner.register_message(OVER_MESSAGE, lambda msg, **_: warmup.end(environment) if not warmup.counting else None)
    if isinstance(runner, MasterRunner):

        @environment.events.worker_report.add_listener  # after Locust's own merge, registered before
        def clamp(**_: Any) -> None:
            warmup_of(environment).clamp_start(environment)


def _on_test_start(environment: Environment, **_: Any) -> None:
    warmup_of(environment).start(environment, _seconds(environment))


def _on_test_stop(environment: Environment, **_: Any) -> None:
    warmup_of(environment).stop()


def setup(events: Events) -> None:
    events.init.add_listener(_on_init)
    events.test_start.add_listener(_on_test_start)
    events.test_stop.add_listener(_on_test_stop)
