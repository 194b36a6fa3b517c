"""Answers that stay right under load (docs/consistency.md), wired into Locust: the references taken at each
start (references.py), every answer's comparison as its event arrives (comparing.py), and the figures: the
console's Answer consistency table, `PREFIX_consistency.csv`, the HTML report's section and the JSON
result's `consistency`.

Each process takes its own references at test_start (a worker too: its answers are compared with what the
server answered it alone) and tallies its own comparisons; a worker ships what it tallied since its last
report to the master with Locust's report_to_master, the master merges it (Tally.from_wire trusts nothing).
A worker also ships its references once, and the master says where they differ from the first worker's
(reference_agreement.py); a --consistency-reference file is checked at start (references.py).
"""

from __future__ import annotations

import logging
from typing import Any

from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner

from poolbench_locust import htmltables, texttable
from poolbench_locust.consistency import between_hosts, consistency_tab, gates, reference_agreement, references
from poolbench_locust.consistency.comparing import on_request
from poolbench_locust.consistency.references import take_references
from poolbench_locust.consistency.state import (
    FIGURES,
    FIGURES_SCHEMA,
    TOTAL,
    Consistency,
    Sent,
    cell,
    consistency_of,
    merge_shipped,
    shipped_sent,
)
from poolbench_locust.json_sections import CLIENT_LOAD_JSON, REPEATS_JSON, JsonSection, ResultEvents
from poolbench_locust.locust_options import locust_options
from poolbench_locust.locust_pages import CAPACITY_SECTION, CLIENT_LOAD_SECTION, PageEvents, Section
from poolbench_locust.metrics.table import csv_text
from poolbench_locust.options import settings_of

logger = logging.getLogger("poolbench_locust")
console = logging.getLogger("locust.stats_logger")

CONSISTENCY_SECTION = (CLIENT_LOAD_SECTION + CAPACITY_SECTION) // 2
"""The HTML report's Answer consistency section: after the client load, before the capacity search."""
CONSISTENCY_JSON = (CLIENT_LOAD_JSON + REPEATS_JSON) // 2
"""The JSON result's `consistency`: after client_load, before repeats."""
REPORT_KEY = "poolbench_consistency"
"""A worker's tallies in Locust's report to the master."""
SENT_KEY = "poolbench_consistency_sent"
"""A worker's reference requests in its report: [requests, sequences, input tokens]."""
HEADER = ["Name", *FIGURES]

CONSISTENCY_SCHEMA = {
    "description": "Answers under load compared with their reference answers, taken alone before the users "
    "started (docs/consistency.md): each request name's figures and the total's; null when no answer was "
    "compared (--no-consistency, answers not compared in this version, or no reference taken).",
    "oneOf": [
        {"type": "null"},
        {
            "type": "object",
            "required": [TOTAL],
            "properties": {reference_agreement.JSON_KEY: reference_agreement.SCHEMA},
            "additionalProperties": FIGURES_SCHEMA,
        },
    ],
}


def console_lines(state: Consistency, width: int | None = None) -> list[str]:
    """The consistency table for the console, fitted to `width` (--console-width; 0 or None: whole)."""
    if not (rows := state.rows()):
        return []
    shown = [f for f in FIGURES if any(row[f] is not None for row in rows)]
    cells = [["Name", *shown]]
    for row in rows:
        cells.append([row["Name"], *(cell(row[f]) for f in shown)])
    title = "Answer consistency (answers under load against their reference alone; docs/consistency.md)"
    return [*texttable.wrapped(title, width), *texttable.fitted_lines(cells, width)]


def on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    state = consistency_of(environment)
    worker = isinstance(runner, WorkerRunner)
    master = isinstance(runner, MasterRunner)
    if not master:
        environment.events.request.add_listener(on_request(environment, state, worker))

    @environment.events.test_start.add_listener
    def start(**_: Any) -> None:
        state.restart()
        if not master:
            sent = take_references(environment)
            between_hosts.take(environment, worker)  # --ab-host: B's references, compared with A's
            if worker:  # after the master's test_start, where the server metrics' scrape begins: reconciled
                state.sent.add(sent)
                state.unshipped_sent.add(sent)

    environment.events.test_stop.add_listener(lambda **_: state.stopped())
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
                merge_shipped(data[REPORT_KEY], state.merge, client_id, "tallies")
            if SENT_KEY in data and (sent := shipped_sent(data[SENT_KEY], client_id, "reference requests")):
                state.sent.add(sent)

    @environment.events.quitting.add_listener
    def write_csv(**_: Any) -> None:
        if (prefix := locust_options(environment).csv_prefix) and (
            rows := state.rows() + between_hosts.rows(environment)
        ):
            with open(f"{prefix}_consistency.csv", "w", newline="") as f:
                f.write(csv_text(rows, HEADER))

    @environment.events.quit.add_listener
    def summary(**_: Any) -> None:
        width = settings_of(environment).console_width
        between = between_hosts.console_lines(environment, width)
        if lines := console_lines(state, width) + between + reference_agreement.console_lines(environment):
            for line in lines:
                console.info(line)
            console.info("")


def report_section(environment: Environment, sections: list[Section], **_: Any) -> None:
    rows, between = consistency_of(environment).rows(), between_hosts.report_html(environment)
    if not rows and not between:
        return
    table = (htmltables.table(HEADER, rows) if rows else "") + between
    sections.append(
        Section(CONSISTENCY_SECTION, htmltables.section("poolbench-consistency", "Answer consistency", table))
    )


def json_section(sections: list[JsonSection], **_: Any) -> None:
    fields = lambda environment: {  # noqa: E731
        "consistency": reference_agreement.with_agreement(environment, consistency_of(environment).figures())
    }
    sections.append(JsonSection(CONSISTENCY_JSON, fields, {"consistency": CONSISTENCY_SCHEMA}, ("consistency",)))


def setup(events: Events, pages: PageEvents, results: ResultEvents) -> None:
    references.START_CHECK.setup(events)  # a bad --consistency-reference file stops the run at start
    events.init.add_listener(on_init)
    consistency_tab.setup(events)  # the web UI's live table, under the Pooling tab's
    reference_agreement.setup(events)
    between_hosts.setup(events)  # --ab-host: B's references against A's, shipped by the workers
    gates.setup(events)  # after on_init: the references' listeners first; the gates' start check after start_checks'
    pages.report_sections.add_listener(report_section)
    results.json_sections.add_listener(json_section)
