"""--repeat N: the measured window (-t less --warmup) cut into N repeats of equal length, Locust's stats
reset between them, as --warmup resets them at its end, so each repeat's figures are its own.

How long a repeat is: -t less --warmup, divided by N, rather than an option of its own, so that -t
stays the whole run's length (a Kubernetes job's deadline, the web UI's run time) and a run with
--repeat takes as long as the same run without it. --repeat therefore needs -t.

The master drives the resets: at a repeat's end it asks every worker to send what it has counted and
reset, waits for each worker's answer (its report arrives before the answer, on the same socket), then
takes the repeat's row from the merged stats and resets its own. The last repeat's row is taken at
quitting, after the workers' last reports, as the sweep's last step is. The rows and their intervals go
into the JSON result's top level (`repeats`, `<figure>_ci95`, `repeats_interval`).

Consecutive windows and not N runs each after a settle of its own: a settle gap only parts windows by
a few seconds, and whatever makes a server slow for minutes (heat, a neighbour, a cache) spans it all
the same. So the repeats are batch means and their correlation is measured instead (batch_means.py):
the interval widened when consecutive repeats are correlated, none when they are too correlated to
average or too few (under 5) to tell. Independent samples come from separate runs, or from
--find-capacity's repeated searches."""

from __future__ import annotations

import logging
import time
from typing import Any, cast

from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner

from poolbench_locust.consistency.state import WINDOW_SCHEMA
from poolbench_locust.json_sections import REPEATS_JSON, JsonSection, ResultEvents
from poolbench_locust.lifecycle import exit_early, stop_run
from poolbench_locust.locust_options import locust_options
from poolbench_locust.options import OptionError, settings_of
from poolbench_locust.repeats.clock import DONE_MESSAGE, REPEAT_MESSAGE, repeats_of, reset_stats
from poolbench_locust.repeats.repeat_table import HEADLINE

logger = logging.getLogger("poolbench_locust")


def _planned(environment: Environment) -> int:
    try:
        return settings_of(environment).repeat
    except OptionError:  # a bad value is refused before the run (start_checks, webform.validation)
        return 1


def _searching(environment: Environment) -> bool:
    """--find-capacity repeats whole searches itself (capacity/repeated.py): no window to cut."""
    try:
        return settings_of(environment).find_capacity
    except OptionError:
        return False


NEEDS_RUN_TIME = "needs -t longer than --warmup: the repeats share the time after warm-up"


def _needs_run_time(environment: Environment, planned: int) -> bool:
    if _searching(environment):
        return False
    run_time = locust_options(environment).run_time
    return planned > 1 and (not run_time or run_time <= settings_of(environment).warmup)


def _on_init(environment: Environment, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner):

        def reset_on_ask(msg: Any, **_: Any) -> None:
            runner._send_stats()  # what this worker counted in the repeat that ended, before the reset
            reset_stats(environment)
            runner.send_message(DONE_MESSAGE)

        runner.register_message(REPEAT_MESSAGE, reset_on_ask)
        return
    if runner is None:
        return
    if web_ui is None and _needs_run_time(environment, _planned(environment)):
        exit_early(environment, str(OptionError("--repeat", NEEDS_RUN_TIME)))
    repeats = repeats_of(environment)
    if isinstance(runner, MasterRunner):
        runner.register_message(DONE_MESSAGE, lambda msg, **_: repeats.acked())

    @environment.events.test_start.add_listener
    def start(**_: Any) -> None:
        planned = _planned(environment)
        repeats.stop()
        repeats.table = None
        if planned <= 1 or _searching(environment):
            return
        if _needs_run_time(environment, planned):
            stop_run(environment, str(OptionError("--repeat", NEEDS_RUN_TIME)))
            return
        run_time = cast(float, locust_options(environment).run_time)  # set: _needs_run_time said so
        repeats.start(environment, planned, settings_of(environment).warmup, run_time)

    @environment.events.spawning_complete.add_listener
    def spawned(**_: Any) -> None:
        repeats.spawned.set()

    @environment.events.test_stopping.add_listener
    def stopped(**_: Any) -> None:
        # The end of -t, or of the web UI's Stop: a master's test_stop comes after its workers stopped,
        # polled once a second, which would lengthen the last repeat by up to a second.
        repeats.stop()
        repeats.ended_at = time.time()

    @environment.events.quitting.add_listener
    def finish(**_: Any) -> None:
        repeats.finish()
        table = repeats.table
        if table is None or not table.repeats:
            return
        logger.info("%s", table.console())
        prefix = locust_options(environment).csv_prefix
        if prefix:
            table.write(f"{prefix}_repeats.csv")


REPEAT_SCHEMA = {
    "type": "object",
    "required": [
        *("repeat", "seconds", "requests", "failures"),
        *("requests_per_s", "input_tokens_per_s", "e2e_p50_ms", "e2e_p99_ms", "consistency"),
    ],
    "properties": {
        "repeat": {"type": "integer", "minimum": 1},
        "seconds": {"type": "number", "minimum": 0},
        "requests": {"type": "integer", "minimum": 0},
        "failures": {"type": "integer", "minimum": 0},
        "requests_per_s": {
            "type": ["number", "null"],
            "minimum": 0,
            "description": "With --find-capacity each repeat is one search: its capacity (null when it claimed none).",
        },
        "input_tokens_per_s": {"type": ["number", "null"], "minimum": 0},
        "e2e_p50_ms": {"type": ["number", "null"]},
        "e2e_p99_ms": {"type": ["number", "null"]},
        "consistency": {
            **WINDOW_SCHEMA,
            "description": "The answers compared with their reference in the repeat (with --find-capacity: in its"
            " search's passing probe of the highest rate); null when none was.",
        },
    },
    "additionalProperties": False,
}
CHECK_SCHEMA = {
    "type": "object",
    "required": ["windows", "lag1_autocorrelation", "phi", "widened_by", "verdict"],
    "properties": {
        "windows": {"type": "integer", "minimum": 2, "description": "The repeats with this figure."},
        "lag1_autocorrelation": {
            "type": ["number", "null"],
            "description": "The repeats' lag-1 autocorrelation as measured; null with too few repeats or no spread.",
        },
        "phi": {
            "type": ["number", "null"],
            "description": "The correlation of one repeat with the next that lag1_autocorrelation points to (a"
            " first-order autoregression's whose expected lag-1 autocorrelation it is); the interval is refused"
            " at phi_refused or above.",
        },
        "widened_by": {
            "type": "number",
            "minimum": 1,
            "description": "The interval's half-width over Student's t's for independent repeats.",
        },
        "verdict": {"enum": ["independent", "widened", "refused: correlated", "refused: too few"]},
    },
    "additionalProperties": False,
}
"""One figure's check of its repeats' correlation (batch_means.Interval.as_dict)."""
REPEATS_SCHEMA = {
    "repeats": {
        "description": "--repeat N: one object per repeat, its figures over its own seconds (stats reset between"
        " repeats); null without --repeat",
        "oneOf": [{"type": "null"}, {"type": "array", "items": REPEAT_SCHEMA}],
    },
    **{
        f"{key}_ci95": {
            "description": f"--repeat: the 95 % confidence interval [low, high] of the repeats' mean {key} (Student's"
            " t, widened when consecutive repeats are correlated: repeats_interval); null when refused (fewer"
            " than 5 repeats, or repeats too correlated). With --find-capacity, over the independent searches"
            " (Student's t alone, from 2)",
            "oneOf": [{"type": "null"}, {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}],
        }
        for key, _ in HEADLINE
    },
    "repeats_interval": {
        "description": "--repeat: how the `<figure>_ci95` intervals were made (repeats/batch_means.py): the method,"
        " and for each figure the check of its consecutive repeats' correlation; null without --repeat and with"
        " --find-capacity (whose searches are independent: Student's t alone)",
        "oneOf": [
            {"type": "null"},
            {
                "type": "object",
                "required": ["method", "check_min_repeats", "phi_refused", "figures"],
                "properties": {
                    "method": {"type": "string"},
                    "check_min_repeats": {"type": "integer", "minimum": 3},
                    "phi_refused": {"type": "number"},
                    "figures": {
                        "type": "object",
                        "required": [key for key, _ in HEADLINE],
                        "properties": {key: {"oneOf": [{"type": "null"}, CHECK_SCHEMA]} for key, _ in HEADLINE},
                        "additionalProperties": False,
                    },
                },
                "additionalProperties": False,
            },
        ],
    },
}
"""The JSON result's `repeats`, `<figure>_ci95` and `repeats_interval`, at its top level."""


def json_fields(environment: Environment) -> dict[str, Any]:
    """Each repeat's figures, each headline figure's 95 % interval [low, high] (None when refused:
    batch_means.py) and how it was made; all None without --repeat."""
    table = repeats_of(environment).table
    if table is None:
        return {"repeats": None, **{f"{key}_ci95": None for key, _ in HEADLINE}, "repeats_interval": None}
    return table.to_json()


def json_section(sections: list[JsonSection], **_: Any) -> None:
    sections.append(JsonSection(REPEATS_JSON, json_fields, REPEATS_SCHEMA, tuple(REPEATS_SCHEMA)))


def setup(events: Events, results: ResultEvents) -> None:
    events.init.add_listener(_on_init)
    results.json_sections.add_listener(json_section)
