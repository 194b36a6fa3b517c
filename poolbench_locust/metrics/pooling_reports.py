"""Wiring of the pooling stats into Locust: its events, its distributed reports, its web UI,
its CSV files, its console summary, its HTML report, its history in the JSON result and its exit code."""

from __future__ import annotations

import csv
import html
import logging
import time
from typing import Any

import gevent
from flask import Response, jsonify
from locust.env import Environment
from locust.event import Events
from locust.runners import STATE_MISSING, MasterRunner, WorkerRunner
from locust.stats import CSV_STATS_INTERVAL_SEC

from poolbench_locust import htmltables
from poolbench_locust.final_reports.master_quit import FINAL_REPORT_GRACE_S
from poolbench_locust.json_sections import HISTORY_JSON, JsonSection, ResultEvents
from poolbench_locust.locust_options import locust_options
from poolbench_locust.locust_pages import (
    POOLING_SECTION,
    POOLING_TAB,
    PageEvents,
    Section,
    Tab,
    add_route,
    csv_download,
)
from poolbench_locust.metrics import checks
from poolbench_locust.metrics.collector import PoolingStats, stats_of
from poolbench_locust.metrics.console import console_table
from poolbench_locust.metrics.history import WINDOW_COLUMNS, Sample, history_of, sample_history_while_running
from poolbench_locust.metrics.shipping import Inbox, Outbox
from poolbench_locust.metrics.table import HEADER, csv_text, rows
from poolbench_locust.options import OptionError, settings_of

logger = logging.getLogger("poolbench_locust")
console = logging.getLogger("locust.stats_logger")  # where Locust prints its own tables

STATS_REPORT_KEY = "poolbench"
STOP_MESSAGE = "poolbench_stop"
FINAL_MESSAGE = "poolbench_final_report"
TAB_KEY = "pooling"


def html_table(stats: PoolingStats) -> str:
    slo = (
        ""
        if stats.slo is None
        else f"<p>Goodput: requests that met every objective of --slo {html.escape(str(stats.slo))}</p>"
    )
    return htmltables.section("poolbench-pooling", "Pooling statistics", slo + htmltables.table(HEADER, rows(stats)))


def report_section(environment: Environment, sections: list[Section], **_: Any) -> None:
    sections.append(Section(POOLING_SECTION, html_table(stats_of(environment))))


def web_ui_tab(environment: Environment, tabs: list[Tab], **_: Any) -> None:
    stats = stats_of(environment)
    csv_link = ("./pooling/csv", "Download pooling statistics CSV")
    tabs.append(Tab(POOLING_TAB, "Pooling", TAB_KEY, HEADER, lambda: rows(stats), "Name", csv_link))


def _install_web_ui(environment: Environment, stats: PoolingStats) -> None:
    def pooling_json() -> Response:
        return jsonify(rows(stats))

    def pooling_csv() -> Response:
        return csv_download(csv_text(rows(stats)), "pooling")

    add_route(environment, "/pooling/stats", pooling_json)
    add_route(environment, "/pooling/csv", pooling_csv)


class _HistoryCsv:
    """PREFIX_pooling_history.csv: a row per sample, like Locust's PREFIX_stats_history.csv (the
    Aggregated row, or every name with --csv-full-history), with the current-window percentiles."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "w", newline="")  # noqa: SIM115 (open for the whole run, closed at quitting)
        self._writer = csv.writer(self._file)
        self._writer.writerow(["Timestamp", "User Count", *HEADER, *WINDOW_COLUMNS])
        self._file.flush()

    def write(self, sample: Sample) -> None:
        for row in sample["rows"]:
            self._writer.writerow(
                [
                    int(sample["time"]),
                    sample["user_count"],
                    *("" if row[c] is None else row[c] for c in (*HEADER, *WINDOW_COLUMNS)),
                ]
            )
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _final_reports_on_stop(environment: Environment, runner: MasterRunner, inbox: Inbox) -> None:
    """Make every worker stop its users and send its last figures before the master stops counting.

    Locust's master waits only 0.5 s for the workers' last reports after it tells them to quit, and a
    worker's users may still be finishing their requests then: those would be lost. Here the master,
    as it starts to stop, asks each worker to stop its users (they finish their request within
    --stop-timeout) and waits until each has sent what it counted since its last report.
    """
    arrived: set[str] = set()

    def on_final(msg: Any, **_: Any) -> None:
        inbox.merge(msg.node_id, msg.data)
        arrived.add(msg.node_id)

    runner.register_message(FINAL_MESSAGE, on_final)

    @environment.events.test_stopping.add_listener
    def collect(**_: Any) -> None:
        expected = {c.id for c in runner.clients.all if c.state != STATE_MISSING}
        arrived.clear()
        runner.send_message(STOP_MESSAGE)
        deadline = time.monotonic() + environment.stop_timeout + FINAL_REPORT_GRACE_S
        while expected - arrived and time.monotonic() < deadline:
            gevent.sleep(0.05)
        if missing := expected - arrived:
            logger.warning("No final pooling report from %d worker(s): %s", len(missing), ", ".join(sorted(missing)))


def _send_final_report_on_request(runner: WorkerRunner, stats: PoolingStats, outbox: Outbox) -> None:
    def on_stop(**_: Any) -> None:
        runner.stop()  # users finish their request (--stop-timeout) and fire its event first
        runner.send_message(FINAL_MESSAGE, outbox.report(stats))

    runner.register_message(STOP_MESSAGE, on_stop)


def _read_slo(environment: Environment, stats: PoolingStats) -> None:
    try:
        stats.slo = settings_of(environment).slo
    except OptionError:
        stats.slo = None  # the start checks stop the run with the option's one line


def on_init(environment: Environment, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
    stats = stats_of(environment)
    _read_slo(environment, stats)
    # Again at each start: the web UI's form may have changed it, and a worker gets it from the master then.
    environment.events.test_start.add_listener(lambda **_: _read_slo(environment, stats))
    environment.events.request.add_listener(stats.on_request)
    environment.events.reset_stats.add_listener(stats.reset)
    environment.events.reset_stats.add_listener(history_of(environment).clear)
    if isinstance(runner, WorkerRunner):
        outbox = Outbox()
        stats.keeps_total = False

        @environment.events.report_to_master.add_listener
        def report(client_id: str, data: dict[str, Any], **_: Any) -> None:
            data[STATS_REPORT_KEY] = outbox.report(stats)

        _send_final_report_on_request(runner, stats, outbox)
        return
    if isinstance(runner, MasterRunner):
        inbox = Inbox(environment, stats)

        @environment.events.worker_report.add_listener
        def merge(client_id: str, data: dict[str, Any], **_: Any) -> None:
            if STATS_REPORT_KEY in data:
                inbox.merge(client_id, data[STATS_REPORT_KEY])

        _final_reports_on_stop(environment, runner, inbox)

    if web_ui is not None:
        _install_web_ui(environment, stats)
    prefix = locust_options(environment).csv_prefix
    history_csv = _HistoryCsv(f"{prefix}_pooling_history.csv") if prefix else None
    gevent.spawn(sample_history_while_running, environment, stats, history_csv.write if history_csv else None)

    @environment.events.test_start.add_listener
    def start(**_: Any) -> None:
        # A new run (the web UI's START after STOP) starts from zero, as Locust's own stats do.
        stats.reset()
        history_of(environment).clear()

    @environment.events.quitting.add_listener
    def finish(**_: Any) -> None:
        # quitting comes after Locust's last worker report is merged.
        if prefix:
            # Locust rewrites PREFIX_stats.csv once a second and not again at exit: one more interval
            # lets its writer record the last requests too, so both files hold the same run.
            gevent.sleep(CSV_STATS_INTERVAL_SEC + 0.2)
            with open(f"{prefix}_pooling.csv", "w", newline="") as f:
                f.write(csv_text(rows(stats)))
        if history_csv is not None:
            history_csv.close()
        failed = checks.evaluate(environment, stats)
        code = checks.exit_code(environment, failed)
        if code is not None and environment.process_exit_code in (None, 0):
            environment.process_exit_code = code
        for line in failed:
            logger.error("Check failed: %s", line)

    @environment.events.quit.add_listener
    def summary(**_: Any) -> None:
        if stats.total.requests:  # after Locust's own tables
            for line in console_table(stats, settings_of(environment).console_width):
                console.info(line)
            console.info("")


HISTORY_SCHEMA = {
    "type": "object",
    "required": ["interval_s", "samples"],
    "properties": {
        "interval_s": {
            "description": "Seconds between the samples kept (metrics/history.py): 1 for a run up to an hour,"
            " then the smallest power of two that keeps at most 3600 samples.",
            "type": "number",
            "exclusiveMinimum": 0,
        },
        "samples": {
            "description": "The pooling table every interval_s (metrics/history.py): the Aggregated row, every row"
            " with --csv-full-history",
            "type": "array",
            "items": {
                "type": "object",
                "required": ["time", "user_count", "rows"],
                "properties": {
                    "time": {"type": "number"},
                    "user_count": {"type": "integer", "minimum": 0},
                    "rows": {"type": "array", "items": {"$ref": "#/$defs/pooling_row"}},
                },
            },
        },
    },
    "additionalProperties": False,
}


def json_fields(environment: Environment) -> dict[str, Any]:
    """The JSON result's `history`: the pooling table every `interval_s` seconds."""
    history = history_of(environment)
    return {"history": {"interval_s": history.interval, "samples": history.samples}}


def json_section(sections: list[JsonSection], **_: Any) -> None:
    sections.append(JsonSection(HISTORY_JSON, json_fields, {"history": HISTORY_SCHEMA}, ("history",)))


def setup(events: Events, pages: PageEvents, results: ResultEvents) -> None:
    events.init.add_listener(on_init)
    pages.report_sections.add_listener(report_section)
    pages.web_ui_tabs.add_listener(web_ui_tab)
    results.json_sections.add_listener(json_section)
