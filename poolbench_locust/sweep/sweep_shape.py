"""A sweep: the same test at rising request rates (open loop) or user counts (closed loop), a fixed
time per step, with one row per step (sweep/steps.py) to find the knee of the server's curve, and its
`sweep` in the JSON result."""

from __future__ import annotations

import logging
from typing import Any

from locust import LoadTestShape
from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner

from poolbench_locust.consistency.state import TOTAL, WINDOW_SCHEMA, consistency_of
from poolbench_locust.json_sections import SWEEP_JSON, JsonSection, ResultEvents
from poolbench_locust.lifecycle import exit_early
from poolbench_locust.locust_options import locust_options
from poolbench_locust.metrics.collector import stats_of
from poolbench_locust.options import OptionError, Settings, settings_of
from poolbench_locust.sweep.steps import STEP_COLUMNS, StepTable
from poolbench_locust.workload.arrival import RATE_MESSAGE

logger = logging.getLogger("poolbench_locust")


class SweepShape(LoadTestShape):
    abstract = True  # not picked up from a locustfile: made by poolbench_locust when --sweep-* is given

    def __init__(self, environment: Environment, settings: Settings) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # LoadTestShape's is unannotated
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
            consistency_of(self.environment).open_window(self.label(step))
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

    def label(self, step: int) -> str:
        """The step's load, as a gate's line names it: "sweep step 3 (8 users)", "sweep step 2 (40 requests/s)"."""
        target = self.targets[step]
        return f"sweep step {step + 1} ({target:g} {'requests/s' if self.by_rate else 'users'})"

    def _close_step(self) -> None:
        closed = len(self.table.rows)
        self.table.close(self.step, self._ended_at or self.get_run_time())
        if len(self.table.rows) > closed and (found := self.table.consistency[-1]) is not None:
            total = found[TOTAL]
            logger.info(
                "Sweep step %d (%s): %d answers compared with their reference, %.1f %% identical%s",
                self.step + 1,
                self.label(self.step).partition("(")[2].rstrip(")"),
                total["compared"],
                100 * total["identical_ratio"],
                f", cosine min {total['cosine_min']:.6f}" if "cosine_min" in total else "",
            )

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


STEP_SCHEMA = {
    "type": "object",
    "required": [*STEP_COLUMNS[:8], "E2E 99%", "start_time", "end_time", "consistency"],
    "properties": {
        "Step": {"type": "integer", "minimum": 1},
        "Target": {"type": "number"},
        "Seconds": {"type": "number"},
        "Request Count": {"type": "integer", "minimum": 0},
        "Failure Count": {"type": "integer", "minimum": 0},
        "Requests/s": {"type": "number"},
        "Input Tokens/s": {"type": "number"},
        "E2E 50%": {"type": ["number", "null"]},
        "E2E 99%": {"type": ["number", "null"]},
        "start_time": {"type": "number"},
        "end_time": {"type": "number"},
        "consistency": WINDOW_SCHEMA,
    },
    "additionalProperties": {"type": ["number", "string", "null"]},
}
"""A step's row: PREFIX_sweep.csv's columns by their titles, when the step started and ended, and the answers
compared in it (`consistency`: each name's figures and the total's, as the result's top-level one)."""
SWEEP_SCHEMA = {
    "oneOf": [
        {"type": "null"},
        {
            "type": "object",
            "required": ["by", "step_time_s", "targets", "steps"],
            "properties": {
                "by": {"enum": ["rate", "users"]},
                "step_time_s": {"type": "number"},
                "targets": {"type": "array", "items": {"type": "number"}},
                "steps": {"type": "array", "items": STEP_SCHEMA},
            },
            "additionalProperties": False,
        },
    ]
}


def json_fields(environment: Environment) -> dict[str, Any]:
    """The JSON result's `sweep`: how it stepped and each step's row with its start and end time (epoch
    seconds), so that two sweeps compare step by step; None when the run swept nothing."""
    shape = environment.shape_class
    if not isinstance(shape, SweepShape):
        return {"sweep": None}
    steps = []
    at = stats_of(environment).start_time
    for row, compared in zip(shape.rows, shape.table.consistency, strict=True):
        step = {title: (None if value == "" else value) for title, value in zip(STEP_COLUMNS, row, strict=True)}
        step["start_time"], at = at, at + float(step["Seconds"] or 0)
        step["end_time"] = at
        step["consistency"] = compared
        steps.append(step)
    sweep = {"by": "rate" if shape.by_rate else "users", "step_time_s": shape.settings.sweep_step_time}
    return {"sweep": {**sweep, "targets": list(shape.targets), "steps": steps}}


def json_section(sections: list[JsonSection], **_: Any) -> None:
    sections.append(JsonSection(SWEEP_JSON, json_fields, {"sweep": SWEEP_SCHEMA}, ("sweep",)))


def setup(events: Events, results: ResultEvents) -> None:
    events.init.add_listener(_on_init)
    results.json_sections.add_listener(json_section)
