"""A sweep: the same test at rising request rates (open loop) or user counts (closed loop), a fixed
time per step, with one row per step (sweep/steps.py) to find the knee of the server's curve."""

from __future__ import annotations

import logging
from typing import Any

from locust import LoadTestShape
from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner

from poolbench_locust.lifecycle import exit_early
from poolbench_locust.locust_options import locust_options
from poolbench_locust.options import OptionError, Settings, settings_of
from poolbench_locust.sweep.steps import StepTable
from poolbench_locust.workload.arrival import RATE_MESSAGE

logger = logging.getLogger("poolbench_locust")


class SweepShape(LoadTestShape):
    abstract = True  # not picked up from a locustfile: made by poolbench_locust when --sweep-* is given

    def __init__(self, environment: Environment, settings: Settings) -> None:
        super().__init__()
        self.environment = environment
        self.settings = settings
        self.by_rate = bool(settings.sweep_rates)
        self.targets: tuple[float, ...] = settings.sweep_rates or tuple(settings.sweep_users or ())
        self.users = locust_options(environment).num_users
        if self.by_rate and not self.users:
            raise OptionError("--sweep-rates", "needs --users: the most requests in flight at once")
        self.step = -1
        self.table = StepTable(environment, self.targets)
        self._ended_at: float | None = None
        self._finished = False

    def tick(self) -> tuple[int, float] | None:
        step = int(self.get_run_time() // self.settings.sweep_step_time)
        if step >= len(self.targets):
            # the last step's row is written at quitting, after the workers' last reports; its time ends now
            self._ended_at = self._ended_at or self.get_run_time()
            return None
        if step != self.step:
            self._close_step()
            self.step = step
            if self.by_rate:
                assert self.runner is not None
                self.runner.send_message(RATE_MESSAGE, self.targets[step])
            logger.info(
                "Sweep step %d of %d: %s %g",
                step + 1,
                len(self.targets),
                "rate" if self.by_rate else "users",
                self.targets[step],
            )
        users = self.users if self.by_rate else int(self.targets[self.step])
        return users, float(users)

    @property
    def rows(self) -> list[list[Any]]:
        return self.table.rows

    def _close_step(self) -> None:
        self.table.close(self.step, self._ended_at or self.get_run_time())

    def finish(self) -> None:
        """Close the last step when the run ends, once, whoever asks first (this module's quitting
        listener or the charts'): its figures are final only then."""
        if self.step >= 0 and not self._finished:
            self._finished = True
            self._close_step()


def _on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner) or runner is None:
        return
    settings = settings_of(environment)
    if not (settings.sweep_rates or settings.sweep_users):
        return
    try:
        shape = SweepShape(environment, settings)
    except OptionError as e:
        exit_early(environment, str(e))
    shape.runner = runner
    environment.shape_class = shape

    @environment.events.reset_stats.add_listener
    def restart_the_step(**_: Any) -> None:
        # Reset stats (the end of --warmup, or the web UI's button): the step's figures start again
        # from zero now, so its seconds do too; a mark from before would make them negative.
        shape.table.restart(shape.get_run_time())

    @environment.events.quitting.add_listener
    def finish(**_: Any) -> None:
        shape.finish()
        prefix = locust_options(environment).csv_prefix
        if prefix:
            shape.table.write(f"{prefix}_sweep.csv")


def setup(events: Events) -> None:
    events.init.add_listener(_on_init)
