"""Answers that stay right under load (docs/consistency.md): the reference answers, taken alone before the
users start, the comparison of every answer that carries a reference input with its reference, and the
figures: the console's Answer consistency table, `PREFIX_consistency.csv`, the HTML report's section and
the JSON result's `consistency`.

Each process takes its own references at test_start (a worker too: its answers are compared with what the
server answered it alone) and tallies its own comparisons; a worker ships what it tallied since its last
report to the master with Locust's report_to_master, the master merges it (Tally.from_wire trusts nothing).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from locust.env import Environment
from locust.event import EventHook, Events
from locust.runners import MasterRunner, WorkerRunner

from poolbench_locust import htmltables, texttable
from poolbench_locust.consistency.measures import compare_scores, compare_vectors
from poolbench_locust.consistency.state import FIGURES, TOTAL, Consistency, Sent, consistency_of
from poolbench_locust.consistency.tally import MAX_COUNT, Tally
from poolbench_locust.engine.user import EndpointUser, endpoint_users
from poolbench_locust.json_sections import CLIENT_LOAD_JSON, REPEATS_JSON, JsonSection, ResultEvents
from poolbench_locust.locust_options import locust_options
from poolbench_locust.locust_pages import CAPACITY_SECTION, CLIENT_LOAD_SECTION, PageEvents, Section
from poolbench_locust.metrics.table import csv_text
from poolbench_locust.options import OptionError
from poolbench_locust.workload.warmup import Warmup

logger = logging.getLogger("poolbench_locust")
console = logging.getLogger("locust.stats_logger")

CONSISTENCY_SECTION = (CLIENT_LOAD_SECTION + CAPACITY_SECTION) // 2
"""The HTML report's Answer consistency section: after the client load, before the capacity search."""
CONSISTENCY_JSON = (CLIENT_LOAD_JSON + REPEATS_JSON) // 2
"""The JSON result's `consistency`: after client_load, before repeats."""
REPORT_KEY = "poolbench_consistency"
"""A worker's tallies in Locust's report to the master."""
NO_VALUES = "its answers' reader gives no scores or vectors to compare yet"
SENT_KEY = "poolbench_consistency_sent"
"""A worker's reference requests in its report: [requests, sequences, input tokens]."""
HEADER = ["Name", *FIGURES]

_FIGURES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["compared"],
    "properties": {
        "compared": {"type": "integer", "minimum": 0},
        "identical_ratio": {"type": "number", "minimum": 0, "maximum": 1},
        "cosine_min": {"type": "number", "minimum": -1, "maximum": 1},
        "cosine_p01": {"type": "number", "minimum": -1, "maximum": 1},
        "abs_diff_max": {"type": "number", "minimum": 0},
        "top1_changed_ratio": {"type": "number", "minimum": 0, "maximum": 1},
        "kendall_tau_min": {"type": "number", "minimum": -1, "maximum": 1},
        "labels_changed_ratio": {"type": "number", "minimum": 0, "maximum": 1},
        "hamming_max": {"type": "integer", "minimum": 0},
    },
}
CONSISTENCY_SCHEMA = {
    "description": "Answers under load compared with their reference answers, taken alone before the users "
    "started (docs/consistency.md): each request name's figures and the total's; null when no answer was "
    "compared (--no-consistency, answers not compared in this version, or no reference taken).",
    "oneOf": [
        {"type": "null"},
        {
            "type": "object",
            "required": [TOTAL],
            "additionalProperties": _FIGURES_SCHEMA,
        },
    ],
}


def _references(
    user_class: type[EndpointUser], environment: Environment, sent: Sent
) -> tuple[str, str, dict[int, Any]] | None:
    """(request name, kind, reference id -> values) of the class's reference requests, each measured alone,
    one at a time, on a client whose events reach no stats, those answered well counted in `sent`; None
    when its plan has no reference."""
    if environment.host:
        user_class.host = environment.host  # what Locust's runner does to every User class at start
    user = user_class(environment)
    plan = user.plan
    if plan is None or not plan.references:
        user.client.client.close()
        return None
    seen: list[dict[str, Any]] = []
    captured = EventHook()
    captured.add_listener(lambda **event: seen.append(event))
    user.client.request_event = captured
    user._warmup = Warmup()  # counting: its events go to the captured hook, not to warm-up's
    user.plan = dataclasses.replace(plan, settings=dataclasses.replace(plan.settings, warmup=0.0))
    found: dict[int, Any] = {}
    failed: list[str] = []
    try:
        for ref_id, request in enumerate(plan.references):
            seen.clear()
            user.measure(dataclasses.replace(request, refs=((-1 if plan.endpoint.shape == "pairs" else 0, ref_id),)))
            event = seen[-1] if seen else {"exception": "no request event was fired"}
            context = event.get("context") or {}
            answered = event.get("exception") is None
            if answered:
                sent.add(Sent(1, request.sequences, int(context.get("input_tokens", 0))))
            if answered and (answers := context.get("answers")):
                found[ref_id] = answers[0][1]
            elif answered:  # a good answer its reader gives no values of
                logger.info("consistency: %s (%s): not compared: %s", user_class.__name__, plan.route, NO_VALUES)
                return None
            else:
                failed.append(f"{ref_id}: {event.get('exception') or 'no values'}")
                if not getattr(event.get("response"), "status_code", 0):
                    break  # no answer at all (a timeout, a refused connection): the next would wait as long
    finally:
        user.client.client.close()
    if failed:
        logger.warning(
            "consistency: %s: %d of %d reference answers not taken: not compared (the first failure: %s)",
            user_class.__name__,
            len(plan.references) - len(found),
            len(plan.references),
            str(failed[0])[:300],
        )
    kind = "scores" if plan.endpoint.shape == "pairs" else "vectors"
    return plan.label, kind, found


def take_references(environment: Environment) -> Sent:
    """Every User class's references, taken anew (a web UI's next run may have other options or host); what
    the server counts of their requests."""
    state = consistency_of(environment)
    sent = Sent()
    state.references.clear()
    state.kinds.clear()
    for user_class in endpoint_users(environment):
        try:
            taken = _references(user_class, environment, sent)
        except OptionError:
            continue  # the start checks stop the run with the option's own line
        if taken is None:
            continue
        name, kind, found = taken
        if name in state.references:
            logger.warning(
                "consistency: %s shares its request name %s with another class: not compared", user_class.__name__, name
            )
            continue
        state.references[name] = found
        state.kinds[name] = kind
        if found:
            logger.info("consistency: %s: %d reference answers taken", user_class.__name__, len(found))
    return sent


def on_request(environment: Environment, state: Consistency, ship: bool) -> Any:
    def compare(name: str = "", exception: Any = None, context: Any = None, **_: Any) -> None:
        if exception is not None or not context or (answers := context.get("answers")) is None:
            return
        references = state.references.get(name)
        if references is None:
            return
        scores = state.kinds.get(name) == "scores"
        for ref_id, values in answers:
            if (reference := references.get(ref_id)) is None:
                continue
            try:
                comparison = compare_scores(reference, values) if scores else compare_vectors(reference, values)
            except ValueError as e:
                state.skipped += 1
                if state.skipped == 1:
                    logger.warning("consistency: an answer of %s could not be compared: %s", name, e)
                continue
            state.add(name, comparison, ship)

    return compare


def _merge(state: Consistency, client_id: str, shipped: Any) -> None:
    if not isinstance(shipped, dict):
        logger.error("consistency: worker %s shipped no mapping of tallies: ignored", client_id)
        return
    for name, wire in shipped.items():
        try:
            tally = Tally.from_wire(wire)
        except ValueError as e:
            logger.error("consistency: worker %s's tally of %r refused: %s", client_id, str(name)[:100], e)
            continue
        state.tallies.setdefault(str(name)[:1000], Tally()).merge(tally)


def _merge_sent(state: Consistency, client_id: str, shipped: Any) -> None:
    """A worker's reference requests: three whole numbers (requests, sequences, input tokens)."""
    if not (
        isinstance(shipped, list) and len(shipped) == 3 and all(type(n) is int and 0 <= n <= MAX_COUNT for n in shipped)
    ):
        logger.error("consistency: worker %s's count of reference requests refused: %.100r", client_id, shipped)
        return
    state.sent.add(Sent(*shipped))


def console_lines(state: Consistency) -> list[str]:
    if not (rows := state.rows()):
        return []
    shown = [f for f in FIGURES if any(row[f] is not None for row in rows)]
    cells = [["Name", *shown]]
    for row in rows:
        cells.append([row["Name"], *(_cell(row[f]) for f in shown)])
    title = "Answer consistency (answers under load against their reference alone; docs/consistency.md)"
    return [title, *texttable.aligned(cells)]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6f}"
    return f"{value:,}"


def on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    state = consistency_of(environment)
    worker = isinstance(runner, WorkerRunner)
    master = isinstance(runner, MasterRunner)
    if not master:
        environment.events.request.add_listener(on_request(environment, state, worker))

    @environment.events.test_start.add_listener
    def start(**_: Any) -> None:
        state.reset()
        if not master:
            sent = take_references(environment)
            if worker:  # after the master's test_start, where the server metrics' scrape begins: reconciled
                state.sent.add(sent)
                state.unshipped_sent.add(sent)

    # The end of --warmup, a repeat's start, the web UI's Reset stats: the figures count from now, as the stats do.
    environment.events.reset_stats.add_listener(lambda **_: state.reset())

    if worker:

        @environment.events.report_to_master.add_listener
        def report(client_id: str, data: dict[str, Any], **_: Any) -> None:
            if state.unshipped:
                data[REPORT_KEY] = {name: tally.to_wire() for name, tally in state.unshipped.items()}
                state.unshipped.clear()
            if (sent := state.unshipped_sent).requests:
                data[SENT_KEY] = [sent.requests, sent.sequences, sent.input_tokens]
                state.unshipped_sent = Sent()

        return
    if master:

        @environment.events.worker_report.add_listener
        def merge(client_id: str, data: dict[str, Any], **_: Any) -> None:
            if REPORT_KEY in data:
                _merge(state, client_id, data[REPORT_KEY])
            if SENT_KEY in data:
                _merge_sent(state, client_id, data[SENT_KEY])

    @environment.events.quitting.add_listener
    def write_csv(**_: Any) -> None:
        if (prefix := locust_options(environment).csv_prefix) and (rows := state.rows()):
            with open(f"{prefix}_consistency.csv", "w", newline="") as f:
                f.write(csv_text(rows, HEADER))

    @environment.events.quit.add_listener
    def summary(**_: Any) -> None:
        if lines := console_lines(state):
            for line in lines:
                console.info(line)
            console.info("")


def report_section(environment: Environment, sections: list[Section], **_: Any) -> None:
    if not (rows := consistency_of(environment).rows()):
        return
    table = htmltables.table(HEADER, rows)
    sections.append(
        Section(CONSISTENCY_SECTION, htmltables.section("poolbench-consistency", "Answer consistency", table))
    )


def json_section(sections: list[JsonSection], **_: Any) -> None:
    fields = lambda environment: {"consistency": consistency_of(environment).figures()}  # noqa: E731
    sections.append(JsonSection(CONSISTENCY_JSON, fields, {"consistency": CONSISTENCY_SCHEMA}, ("consistency",)))


def setup(events: Events, pages: PageEvents, results: ResultEvents) -> None:
    events.init.add_listener(on_init)
    pages.report_sections.add_listener(report_section)
    results.json_sections.add_listener(json_section)
