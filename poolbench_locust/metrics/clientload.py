"""Wiring of the client-load figures (pacing.py) into Locust: each process's watcher, the workers'
figures to the master, and every place they are shown: the web UI's Client load tab and its CSV,
PREFIX_client_load.csv, the console summary (with the fell-behind warnings again), the HTML report,
the JSON result's `client_load`. --check-min-rate-ratio reads the same board."""

from __future__ import annotations

import html
import logging
from collections.abc import Callable
from typing import Any

import gevent
from flask import Response
from locust.env import Environment
from locust.event import Events
from locust.runners import STATE_RUNNING, STATE_SPAWNING, MasterRunner, WorkerRunner

from poolbench_locust import htmltables
from poolbench_locust.json_sections import CLIENT_LOAD_JSON, JsonSection, ResultEvents
from poolbench_locust.locust_options import locust_options
from poolbench_locust.locust_pages import (
    CLIENT_LOAD_SECTION,
    CLIENT_LOAD_TAB,
    PageEvents,
    Section,
    Tab,
    add_route,
    csv_download,
)
from poolbench_locust.metrics.client_board import HEADER, Board, board_if_any, board_of, console_lines
from poolbench_locust.metrics.pacing import (
    FINAL_MESSAGE,
    PACE_REPORT_KEY,
    TICK_S,
    PaceFigures,
    Refused,
    Watcher,
    parse,
    watcher_of,
)
from poolbench_locust.metrics.table import csv_text
from poolbench_locust.options import settings_of

logger = logging.getLogger("poolbench_locust")
console = logging.getLogger("locust.stats_logger")
TAB_KEY = "client_load"


def html_section(board: Board) -> str:
    warnings = "".join(f"<p><b>WARNING</b> {html.escape(w)}</p>" for w in board.as_dict()["warnings"])
    return htmltables.section("poolbench-client-load", "Client load", warnings + htmltables.table(HEADER, board.rows()))


def report_section(environment: Environment, sections: list[Section], **_: Any) -> None:
    sections.append(Section(CLIENT_LOAD_SECTION, html_section(board_of(environment))))


def web_ui_tab(environment: Environment, tabs: list[Tab], **_: Any) -> None:
    board = board_of(environment)
    csv_link = ("./client-load/csv", "Download client load CSV")
    tabs.append(Tab(CLIENT_LOAD_TAB, "Client load", TAB_KEY, HEADER, board.rows, "Process", csv_link))


def _install_web_ui(environment: Environment, board: Board) -> None:
    def client_load_csv() -> Response:
        return csv_download(csv_text(board.rows(), HEADER), "client_load")

    add_route(environment, "/client-load/csv", client_load_csv)


def _process_name(environment: Environment) -> str:
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        return "master"
    if isinstance(runner, WorkerRunner):
        return f"worker {runner.worker_index}"
    return "local"


def _watch(environment: Environment, watcher: Watcher, publish: Callable[[PaceFigures], None]) -> None:
    while True:
        gevent.sleep(TICK_S)
        runner = environment.runner
        if runner is None or runner.state not in (STATE_SPAWNING, STATE_RUNNING):
            continue
        try:
            watcher.tick(environment)
            publish(watcher.figures)
        except Exception:  # the watcher must never take the run down: it only watches
            logger.exception("pacing watcher")


def on_init(environment: Environment, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
    if runner is None:
        return
    watcher = watcher_of(environment, sends=not isinstance(runner, MasterRunner))
    board = board_of(environment)
    events_ = environment.events

    def reset(**_: Any) -> None:
        watcher.reset()
        board.clear()

    events_.test_start.add_listener(reset)
    events_.reset_stats.add_listener(reset)
    events_.test_stopping.add_listener(lambda **_: watcher.stop())

    if isinstance(runner, WorkerRunner):

        @events_.report_to_master.add_listener
        def report(data: dict[str, Any], **_: Any) -> None:
            data[PACE_REPORT_KEY] = watcher.current(environment).dump()

        @events_.test_stop.add_listener
        def final(**_: Any) -> None:
            try:
                runner.send_message(FINAL_MESSAGE, watcher.current(environment).dump())
            except Exception as e:  # a master already gone: the last regular report stands
                logger.debug("final pacing figures not sent: %s", e)

        gevent.spawn(_watch, environment, watcher, lambda figures: None)
        return

    _outputs(environment, board, web_ui)
    name = _process_name(environment)
    gevent.spawn(_watch, environment, watcher, lambda figures: board.update(name, figures))
    events_.test_stop.add_listener(lambda **_: board.update(name, watcher.current(environment)))
    if isinstance(runner, MasterRunner):

        def take(client_id: str, data: Any) -> None:
            process = f"worker {runner.get_worker_index(client_id)}"
            try:
                board.update(process, parse(data))
            except Refused as e:
                board.refuse(process, str(e))

        @events_.worker_report.add_listener
        def merge(client_id: str, data: dict[str, Any], **_: Any) -> None:
            if PACE_REPORT_KEY in data:
                take(client_id, data[PACE_REPORT_KEY])

        runner.register_message(FINAL_MESSAGE, lambda msg, **_: take(msg.node_id, msg.data))


def _outputs(environment: Environment, board: Board, web_ui: Any) -> None:
    if web_ui is not None:
        _install_web_ui(environment, board)
    prefix = locust_options(environment).csv_prefix

    @environment.events.quitting.add_listener
    def files(**_: Any) -> None:
        if prefix:
            with open(f"{prefix}_client_load.csv", "w", newline="") as f:
                f.write(csv_text(board.rows(), HEADER))

    @environment.events.quit.add_listener
    def summary(**_: Any) -> None:
        for line in console_lines(board, settings_of(environment).console_width):  # after the pooling table
            console.info(line)
        if board.processes:
            console.info("")
        for warning in board.summary_warnings():
            logger.warning("%s", warning)


CLIENT_LOAD_SCHEMA = {
    "description": "Whether the client kept up: per process (and a Total row) the open loop's target, scheduled and"
    " sent requests/s, the share sent (sent_ratio), how late requests left, the peak CPU, and the warnings; null"
    " when no process reported",
    "type": ["object", "null"],
    "required": ["late_ms", "behind_ratio", "cpu_busy_percent", "sent_ratio", "rows", "warnings"],
    "properties": {
        "sent_ratio": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
        "rows": {
            "type": "array",
            "items": {
                "type": "object",
                "required": [
                    *("Process", "Target Requests/s", "Sent Requests/s"),
                    *("Sent Ratio", "Peak CPU %", "Fell Behind"),
                ],
            },
        },
        "warnings": {"type": "array", "items": {"type": "string"}},
    },
}


def json_fields(environment: Environment) -> dict[str, Any]:
    """The JSON result's `client_load`: each process's rate sent and CPU, and the warnings; None where no
    process reported."""
    board = board_if_any(environment)
    return {"client_load": None if board is None or not board.processes else board.as_dict()}


def json_section(sections: list[JsonSection], **_: Any) -> None:
    sections.append(JsonSection(CLIENT_LOAD_JSON, json_fields, {"client_load": CLIENT_LOAD_SCHEMA}, ("client_load",)))


def setup(events: Events, pages: PageEvents, results: ResultEvents) -> None:
    """After the pooling stats' setup: its console summary follows the pooling table."""
    events.init.add_listener(on_init)
    pages.report_sections.add_listener(report_section)
    pages.web_ui_tabs.add_listener(web_ui_tab)
    results.json_sections.add_listener(json_section)
