"""--server-metrics: the scraper's place in a Locust run and in every report, the JSON result's
`server_metrics` too (its options: options/registry.py).

On the master (or the one local process) only: workers never scrape. The scraper starts with the
test, takes a new base when the stats are reset (the end of --warmup, or the web UI's Reset stats),
and scrapes once more when the test stops, after the users have finished their requests.
"""

from __future__ import annotations

import csv
import logging
import time
from typing import Any

from flask import Response
from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner

from poolbench_locust import locust_pages
from poolbench_locust.engine.ab import MARKS, twin_class
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.engine.user import EndpointUser
from poolbench_locust.json_sections import SERVER_METRICS_JSON, JsonSection, ResultEvents
from poolbench_locust.lifecycle import StartCheck, stop_run
from poolbench_locust.locust_options import locust_options
from poolbench_locust.metrics.pace_causes import alone_ms, provide
from poolbench_locust.metrics.table import csv_text
from poolbench_locust.options import OptionError, Settings, settings_of
from poolbench_locust.servermetrics import hosts, report, saturation
from poolbench_locust.servermetrics.deltas import ServerView
from poolbench_locust.servermetrics.scrape import Scraper
from poolbench_locust.servermetrics.scraping import Scraping, scraping_of, start_scraping
from poolbench_locust.urls import shown_url

logger = logging.getLogger("poolbench_locust")
console = logging.getLogger("locust.stats_logger")

HISTORY_HEADER = ["Timestamp", "Server", "Kind", "Requests", "Prompt Tokens", "Latency Mean", "Running", "Waiting"]


def _routes(environment: Environment, b_host: str | None = None) -> frozenset[str]:
    """The run's routes, whose requests the server counts: with --ab-host, B's too (its plan's own)."""
    routes = set()
    for user_class in environment.user_classes:
        if issubclass(user_class, EndpointUser):
            try:
                routes.add(plan_for(user_class, environment.parsed_options, environment=environment).route)
                if b_host is not None:
                    twin = twin_class(user_class, b_host)
                    routes.add(plan_for(twin, environment.parsed_options, b_host, environment).route)
            except (OptionError, AttributeError):
                continue  # the start checks stop such a run with their own line
    return frozenset(routes)


def _host(environment: Environment) -> str | None:
    return environment.host or next((u.host for u in environment.user_classes if getattr(u, "host", None)), None)


def _targets(environment: Environment, settings: Settings) -> list[tuple[str, str | None]]:
    """(URL, host) of each server to scrape: with --ab-host, each URL's host, "A" or "B" (hosts.py)."""
    return hosts.targets(settings.server_metrics, _host(environment), settings.ab_host)


def hosts_error(environment: Environment) -> str | None:
    """The line that stops a run whose --server-metrics URL is of no host, or of both, of --ab-host."""
    try:
        _targets(environment, settings_of(environment))
    except OptionError as e:
        return str(e)
    return None


# A web UI's run gets its host and options from the form: checked at test_start (lifecycle.StartCheck).
START_CHECK = StartCheck(hosts_error)


def _start(environment: Environment, state: Scraping) -> None:
    if state.scraper is not None:
        state.scraper.finish()  # a web UI run started again before the last one's stop
    state.scraper = None
    state.views = []
    try:
        settings = settings_of(environment)
    except OptionError as e:  # typed into the web UI's form: stop this run with the one line
        stop_run(environment, str(e))
        return
    mode, interval = settings.server_metrics, settings.server_metrics_interval
    try:
        targets = _targets(environment, settings)
    except OptionError as e:  # the start check stopped such a run already
        stop_run(environment, str(e))
        return
    if not targets:
        return
    # --ab-host: each host's servers marked as its requests are, [A] and [B], and reconciled with them
    state.views = [ServerView(url, shown_url(url) + MARKS.get(side or "", ""), side) for url, side in targets]
    runner = environment.runner
    state.scraper = Scraper(
        state.views,
        _routes(environment, settings.ab_host),
        interval,
        optional=mode == "auto",
        on_scrape=lambda view: _write_history(state, view),
        users=(lambda: runner.user_count) if runner is not None else None,
    )
    state.scraper.start()


def _write_history(state: Scraping, view: ServerView) -> None:
    if state.history is None:
        return
    row = report.server_rows([view])[0]
    writer = csv.writer(state.history)
    writer.writerow(
        [
            int(time.time()),
            row["Server"],
            row["Kind"],
            *("" if row[c] is None else row[c] for c in HISTORY_HEADER[3:]),
        ]
    )
    state.history.flush()


def _state(environment: Environment) -> Scraping | None:
    return scraping_of(environment)


def report_section(environment: Environment, sections: list[locust_pages.Section], final: bool, **_: Any) -> None:
    """The section of the web UI's report always; of the --html file once some server was scraped."""
    if (state := _state(environment)) is not None and (state.server_rows() or not final):
        sections.append(locust_pages.Section(locust_pages.SERVER_METRICS_SECTION, state.html(environment)))


def web_ui_tabs(environment: Environment, tabs: list[locust_pages.Tab], **_: Any) -> None:
    def server_rows() -> list[dict[str, Any]]:
        state = _state(environment)
        return state.server_rows() if state is not None else []

    def checks() -> list[dict[str, Any]]:
        state = _state(environment)
        return state.checks(environment) if state is not None else []

    csv_link = ("./server-metrics/csv", "Download server metrics CSV")
    tabs.append(
        locust_pages.Tab(
            locust_pages.SERVER_METRICS_TAB,
            "Server metrics",
            "server_metrics",
            report.HEADER,
            server_rows,
            "Server",
            csv_link,
        )
    )
    tabs.append(
        locust_pages.Tab(
            locust_pages.RECONCILIATION_TAB,
            "Server vs client",
            "server_reconciliation",
            report.RECONCILIATION_HEADER,
            checks,
            "Check",
        )
    )


def _install_web_ui(environment: Environment, state: Scraping) -> None:
    def server_metrics_csv() -> Response:
        return locust_pages.csv_download(csv_text(state.server_rows(), report.HEADER), "server_metrics")

    locust_pages.add_route(environment, "/server-metrics/csv", server_metrics_csv)


def on_init(environment: Environment, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner):
        return  # the master scrapes, once for the whole run
    state = start_scraping(environment)
    # An open loop short of free slots while this server's queue grew: the warning names the server.
    provide(environment, lambda: saturation.cause(state.views, alone_ms(environment)))
    if web_ui is not None:
        _install_web_ui(environment, state)
    prefix = locust_options(environment).csv_prefix
    if prefix:
        state.history = open(f"{prefix}_server_metrics_history.csv", "w", newline="")  # noqa: SIM115
        csv.writer(state.history).writerow(HISTORY_HEADER)

    @environment.events.test_start.add_listener
    def start(**_: Any) -> None:
        _start(environment, state)

    @environment.events.test_stopping.add_listener
    def stopping(**_: Any) -> None:
        if state.scraper is not None:
            state.scraper.note_users()  # the users still run: how many requests may be in flight

    @environment.events.test_stop.add_listener
    def stop(**_: Any) -> None:
        if state.scraper is not None:
            state.scraper.finish()

    @environment.events.reset_stats.add_listener
    def reset(**_: Any) -> None:
        # The end of --warmup, or the web UI's Reset stats: the client counts from now, so does the server.
        # Now, not in a greenlet: requests begun before warm-up's end are counted by no client.
        if state.scraper is not None:
            state.scraper.rebase()

    @environment.events.quitting.add_listener
    def finish(**_: Any) -> None:
        if state.scraper is not None:
            state.scraper.finish()  # done already if the test stopped before Locust quit
        if not (servers := state.server_rows()):
            return
        checks = state.checks(environment)
        if prefix:
            with open(f"{prefix}_server_metrics.csv", "w", newline="") as f:
                f.write(csv_text(servers, report.HEADER))
            with open(f"{prefix}_server_reconciliation.csv", "w", newline="") as f:
                f.write(csv_text(checks, report.RECONCILIATION_HEADER))
        for figures in state.gpus():
            if figures.energy_note:
                logger.warning("Server metrics: %s: %s", figures.server, figures.energy_note)
        for check in checks:
            if check["Flagged"]:
                logger.warning(
                    "Server metrics: %s differ: server %s, client %s (allowed gap %s)",
                    check["Check"],
                    check["Server"],
                    check["Client"],
                    check["Allowed Gap"],
                )

    @environment.events.quit.add_listener
    def summary(**_: Any) -> None:
        if servers := state.server_rows():
            for line in report.console_lines(
                servers, state.checks(environment), settings_of(environment).console_width
            ):
                console.info(line)
            console.info("")
        if state.history is not None:
            state.history.close()


SERVER_METRICS_SCHEMA = {
    "description": "The server's own metrics where they were scraped (as their module gives them), else null:"
    " servers and reconciliation (the two tables), and gpus, one object per dcgm-exporter target (gpu_util_mean_pct,"
    " power_mean_w, energy_j, energy_j_per_1m_input_tokens, energy_j_per_1k_requests, per_gpu...)"
}


def json_fields(environment: Environment) -> dict[str, Any]:
    """The JSON result's `server_metrics`: the server's own figures, or None where none was scraped."""
    state = _state(environment)
    return {"server_metrics": None if state is None or not state.server_rows() else state.as_dict(environment)}


def json_section(sections: list[JsonSection], **_: Any) -> None:
    sections.append(
        JsonSection(SERVER_METRICS_JSON, json_fields, {"server_metrics": SERVER_METRICS_SCHEMA}, ("server_metrics",))
    )


def setup(events: Events, pages: locust_pages.PageEvents, results: ResultEvents) -> None:
    START_CHECK.setup(events)  # --ab-host: each URL's host told, before the scrape begins
    events.init.add_listener(on_init)
    pages.report_sections.add_listener(report_section)
    pages.web_ui_tabs.add_listener(web_ui_tabs)
    results.json_sections.add_listener(json_section)
