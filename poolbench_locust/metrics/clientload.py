"""Wiring of the client-load figures (pacing.py) into Locust: each process's watcher, the workers'
figures to the master, and every place they are shown: the web UI's Client load tab and its CSV,
PREFIX_client_load.csv, the console summary (with the fell-behind warnings again), the HTML report.
The JSON result and --check-min-rate-ratio read the same board."""

from __future__ import annotations

import html
import logging
import time
from collections.abc import Callable
from typing import Any

import gevent
from flask import Response, jsonify, request
from locust import events
from locust.env import Environment
from locust.runners import STATE_RUNNING, STATE_SPAWNING, MasterRunner, WorkerRunner

from poolbench_locust.metrics.pacing import (
    FINAL_MESSAGE,
    HEADER,
    REPORT_KEY,
    TICK_S,
    Board,
    Figures,
    Refused,
    Watcher,
    board_of,
    console_lines,
    parse,
)
from poolbench_locust.metrics.reporting import _slug, csv_text

logger = logging.getLogger("poolbench_locust")
console = logging.getLogger("locust.stats_logger")
TAB_KEY = "client_load"


def html_section(board: Board) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape('' if r[c] is None else str(r[c]))}</td>" for c in HEADER) + "</tr>"
        for r in board.rows()
    )
    warnings = "".join(f"<p><b>WARNING</b> {html.escape(w)}</p>" for w in board.as_dict()["warnings"])
    return (
        '<section id="poolbench-client-load" style="font-family:sans-serif;margin:2em;overflow-x:auto">'
        f'<h2>Client load</h2>{warnings}<table border="1" cellspacing="0" cellpadding="4">'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></section>"
    )


def _add_to_html(page: str, board: Board) -> str:
    index = page.rfind("</body>")
    section = html_section(board)
    return page + section if index < 0 else page[:index] + section + page[index:]


def _install_web_ui(environment: Environment, board: Board) -> None:
    web_ui = environment.web_ui
    assert web_ui is not None
    args = web_ui.template_args
    args.setdefault("extended_tabs", []).append({"title": "Client load", "key": TAB_KEY})
    args.setdefault("extended_tables", []).append(
        {"key": TAB_KEY, "structure": [{"key": _slug(c), "title": c} for c in HEADER]}
    )
    args.setdefault("extended_csv_files", []).append({"href": "./client-load/csv", "title": "Download client load CSV"})

    @web_ui.app.after_request
    def extend(response: Response) -> Response:
        if request.path.endswith("/stats/requests") and response.is_json:
            data = response.get_json()
            rows = [{**{_slug(k): v for k, v in row.items()}, "safe_name": row["Process"]} for row in board.rows()]
            data.setdefault("extended_stats", []).append({"key": TAB_KEY, "data": rows})
            response.set_data(jsonify(data).get_data())
        elif request.path.endswith("/stats/report") and response.mimetype == "text/html":
            response.set_data(_add_to_html(response.get_data(as_text=True), board))
        return response

    base = (getattr(environment.parsed_options, "web_base_path", "") or "").rstrip("/")

    @web_ui.app.route(f"{base}/client-load/csv")
    @web_ui.auth_required_if_enabled
    def client_load_csv() -> Response:
        return Response(
            csv_text(board.rows(), HEADER),
            mimetype="text/csv",
            headers={"Content-Disposition": f"attachment;filename=client_load_{int(time.time())}.csv"},
        )


def _process_name(environment: Environment) -> str:
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        return "master"
    if isinstance(runner, WorkerRunner):
        return f"worker {runner.worker_index}"
    return "local"


def _watch(environment: Environment, watcher: Watcher, publish: Callable[[Figures], None]) -> None:
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


@events.init.add_listener
def on_init(environment: Environment, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
    if runner is None:
        return
    watcher = Watcher(sends=not isinstance(runner, MasterRunner))
    board = board_of(environment)
    events_ = environment.events
    events_.test_start.add_listener(lambda **_: (watcher.reset(), board.clear()))
    events_.reset_stats.add_listener(lambda **_: (watcher.reset(), board.clear()))
    events_.test_stopping.add_listener(lambda **_: watcher.stop())

    if isinstance(runner, WorkerRunner):

        @events_.report_to_master.add_listener
        def report(data: dict[str, Any], **_: Any) -> None:
            data[REPORT_KEY] = watcher.current(environment).dump()

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
            if REPORT_KEY in data:
                take(client_id, data[REPORT_KEY])

        runner.register_message(FINAL_MESSAGE, lambda msg, **_: take(msg.node_id, msg.data))


def _outputs(environment: Environment, board: Board, web_ui: Any) -> None:
    if web_ui is not None:
        _install_web_ui(environment, board)
    options = environment.parsed_options
    prefix = getattr(options, "csv_prefix", None)

    @environment.events.quitting.add_listener
    def files(**_: Any) -> None:
        if prefix:
            with open(f"{prefix}_client_load.csv", "w", newline="") as f:
                f.write(csv_text(board.rows(), HEADER))
        html_file = getattr(options, "html_file", None)
        if html_file:
            with open(html_file, encoding="utf-8") as f:
                page = f.read()
            with open(html_file, "w", encoding="utf-8") as f:
                f.write(_add_to_html(page, board))

    @environment.events.quit.add_listener
    def summary(**_: Any) -> None:
        for line in console_lines(board):  # after the pooling table
            console.info(line)
        if board.processes:
            console.info("")
        for warning in board.summary_warnings():
            logger.warning("%s", warning)
