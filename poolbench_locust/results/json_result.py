"""--json-result FILE: the run's JSON result, written by the master (or the only process) at exit, and its
`series_seconds`, the width of the blocks its `series` hold."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import gevent
from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner

from poolbench_locust.json_sections import SERIES_JSON, JsonSection, ResultEvents
from poolbench_locust.lifecycle import exit_early
from poolbench_locust.metrics.collector import stats_of
from poolbench_locust.options import OptionError, settings_of
from poolbench_locust.results import document
from poolbench_locust.results.series import sample_blocks_while_running, series_of

logger = logging.getLogger("poolbench_locust")


def path_error(path: str) -> str | None:
    """Why the result could not be written there, found at start rather than after an hour's run."""
    if os.path.isdir(path):
        return f"{path} is a directory"
    folder = os.path.dirname(os.path.abspath(path))
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        return f"cannot write {path}: {existing} is not a writable directory"
    return None


def on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner) or runner is None:
        return  # a worker's figures reach the document through the master
    path = settings_of(environment).json_result
    if not path:
        return  # no blocks kept either: a run without a result pays nothing for it
    if (error := path_error(path)) is not None:
        exit_early(environment, str(OptionError("--json-result", error)))
    stats = stats_of(environment)
    series = series_of(environment)
    environment.events.reset_stats.add_listener(series.clear)
    environment.events.test_start.add_listener(lambda **_: series.clear())  # a web UI re-run starts anew
    gevent.spawn(sample_blocks_while_running, environment, stats)
    ended: list[float] = []
    workers = [0]
    """The most workers seen at a start or a stop: by quit, they have all left."""

    def count_workers() -> None:
        workers[0] = max(workers[0], getattr(runner, "worker_count", 1))

    environment.events.test_start.add_listener(lambda **_: count_workers())

    @environment.events.test_stop.add_listener
    def stopped(**_: Any) -> None:
        ended.append(time.time())
        count_workers()

    @environment.events.quit.add_listener
    def write(exit_code: int | None = None, **_: Any) -> None:
        # quit comes after every quitting listener: the workers' last reports are merged, the CSV
        # files written and the sweep's last step closed, so the document says what they say.
        doc = document.build(
            environment,
            stats,
            series.final(environment, stats),
            ended_at=ended[-1] if ended else None,
            exit_code=exit_code,
            workers=workers[0],
        )
        try:
            document.write(path, doc)
        except OSError as e:
            logger.error("--json-result %s: could not write it: %s", path, e.strerror or e)
            return
        logger.info("JSON result written to %s", path)


SERIES_SECONDS_SCHEMA = {
    "description": "Seconds each block of every `series` covers (results/series.py): 1 for a run up to an hour,"
    " then the smallest power of two that keeps at most 3600 blocks (2 up to two hours, 4 up to four, ..., 32 for a"
    " day).",
    "type": "number",
    "exclusiveMinimum": 0,
}


def json_fields(environment: Environment) -> dict[str, Any]:
    return {"series_seconds": series_of(environment).width}


def json_section(sections: list[JsonSection], **_: Any) -> None:
    sections.append(JsonSection(SERIES_JSON, json_fields, {"series_seconds": SERIES_SECONDS_SCHEMA}))


def setup(events: Events, results: ResultEvents) -> None:
    events.init.add_listener(on_init)
    results.json_sections.add_listener(json_section)
