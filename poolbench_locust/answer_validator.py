"""Which validator checks the run's JSON answers, said once in the start log and kept in the JSON result.

A large float answer is validated by lazyjson's C pass (`_jsonscan`, built at install with a C compiler)
or, where it was not built, by simdjson: the same verdicts at about three times the client CPU. Which one
runs depends on the install (a wheel, a source install with or without a compiler, the Docker image), so
the user is told rather than left to guess from the CPU figures.

The processes that send requests are the ones that validate: a local run says its own at init; in a
distributed run each worker sends its own in its reports (Locust's report_to_master), and the master says
each validator the first time a worker reports it, naming the worker. The JSON result's `validator` is
`c` or `simdjson`, `mixed` when the workers differ, null when no worker reported.
"""

from __future__ import annotations

import logging
from typing import Any

from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner

from poolbench_locust import lazyjson
from poolbench_locust.json_sections import SERIES_JSON, JsonSection, ResultEvents
from poolbench_locust.store import Slot

logger = logging.getLogger("poolbench_locust")

REPORT_KEY = "poolbench_validator"
"""A worker's validator in each of its reports to the master."""
MIXED = "mixed"
VALIDATORS = (lazyjson.C_PASS, lazyjson.SIMDJSON)
MAX_WORKERS = 10_000
"""Workers whose validator the master keeps: a bound on what reports can make it hold."""
VALIDATOR_JSON = SERIES_JSON // 2
"""The key's place in the JSON result: before the per-second series, with the run's own facts."""

MESSAGES = {
    lazyjson.C_PASS: "JSON answers validated by the C pass",
    lazyjson.SIMDJSON: "JSON answers validated by simdjson: the C pass is not built here (no compiler at install)",
}


class Seen:
    """The master's record of each worker's validator (by client id), and the validators already logged."""

    def __init__(self) -> None:
        self.by_worker: dict[str, str] = {}
        self.logged: set[str] = set()

    def summary(self) -> str | None:
        found = set(self.by_worker.values())
        return None if not found else found.pop() if len(found) == 1 else MIXED


SEEN: Slot[Seen] = Slot("answer_validator", Seen)


def message(validator: str, where: str = "") -> str:
    """The start log's line for `validator`; `where` names a worker ("worker 2"), whose "here" it becomes."""
    line = MESSAGES[validator]
    return f"{where}: {line.replace(' here ', ' there ')}" if where else line


def record(environment: Environment, client_id: str, value: Any, index: int) -> None:
    """A worker's report taken on the master: an unknown value or one worker too many is left out."""
    if not isinstance(value, str) or value not in VALIDATORS:
        return
    seen = SEEN.of(environment)
    if client_id not in seen.by_worker and len(seen.by_worker) >= MAX_WORKERS:
        return
    seen.by_worker[client_id] = value
    if value not in seen.logged:
        seen.logged.add(value)
        say(value, message(value, f"worker {index}"))


def say(validator: str, line: str) -> None:
    """The C pass is said as news; simdjson as a warning, since it costs the client CPU."""
    logger.log(logging.INFO if validator == lazyjson.C_PASS else logging.WARNING, "%s", line)


def on_init(environment: Environment, **_: Any) -> None:
    runner = environment.runner
    if runner is None:  # no run (an environment built without a runner)
        return
    if isinstance(runner, WorkerRunner):

        @environment.events.report_to_master.add_listener
        def report(data: dict[str, Any], **_: Any) -> None:
            data[REPORT_KEY] = lazyjson.validator()

        return
    if isinstance(runner, MasterRunner):

        @environment.events.worker_report.add_listener
        def merge(client_id: str, data: dict[str, Any], **_: Any) -> None:
            if REPORT_KEY in data:
                record(environment, client_id, data[REPORT_KEY], runner.get_worker_index(client_id))

        return
    say(lazyjson.validator(), message(lazyjson.validator()))


def json_fields(environment: Environment) -> dict[str, Any]:
    """The JSON result's `validator`: this process's, or on a master what its workers reported."""
    if isinstance(environment.runner, MasterRunner):
        return {"validator": SEEN.of(environment).summary()}
    return {"validator": lazyjson.validator()}


VALIDATOR_SCHEMA = {
    "description": "Which validator checked the large float JSON answers: `c` (lazyjson's C pass), `simdjson` (the C"
    " pass not built in that install: the same verdicts, more CPU), `mixed` (the workers differ), null (no worker"
    " reported)",
    "enum": [*VALIDATORS, MIXED, None],
}


def json_section(sections: list[JsonSection], **_: Any) -> None:
    sections.append(JsonSection(VALIDATOR_JSON, json_fields, {"validator": VALIDATOR_SCHEMA}, ("validator",)))


def setup(events: Events, results: ResultEvents) -> None:
    events.init.add_listener(on_init)
    results.json_sections.add_listener(json_section)
