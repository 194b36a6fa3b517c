"""The charts wired into Locust on the runner that shows the figures (the master, or the only
process): routes of the web UI, the Pooling tab's live charts, the HTML report, the sweep's image."""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify, request
from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner

from poolbench_locust.charts.figures import knee_sheet
from poolbench_locust.charts.pages import live_fragment, report_section, sweep_steps
from poolbench_locust.locust_options import locust_options
from poolbench_locust.locust_pages import (
    CHARTS_SECTION,
    PageEvents,
    Section,
    add_route,
    insert_before_body_end,
    live_box_script,
    web_base,
)
from poolbench_locust.metrics.columns import chooser_script
from poolbench_locust.metrics.history import history_of

REFRESH_MS = 2000
"""As often as Locust's web UI asks for its own stats."""

TAB_SCRIPT = live_box_script("pooling", "poolbench-charts", "pooling/charts", REFRESH_MS)


def _install_web_ui(environment: Environment) -> None:
    web_ui = environment.web_ui
    assert web_ui is not None and web_ui.app is not None
    base = web_base(environment)

    def pooling_history() -> Response:
        history = history_of(environment)
        return jsonify({"interval": history.interval, "samples": history.samples})

    def pooling_charts() -> Response:
        return Response(live_fragment(environment), mimetype="text/html")

    add_route(environment, "/pooling/history", pooling_history)
    add_route(environment, "/pooling/charts", pooling_charts)

    @web_ui.app.after_request
    def extend(response: Response) -> Response:
        if response.mimetype != "text/html" or response.direct_passthrough:
            return response
        if request.path == f"{base}/":
            response.set_data(insert_before_body_end(response.get_data(as_text=True), TAB_SCRIPT + chooser_script()))
        return response


def write_knee(environment: Environment, prefix: str) -> str | None:
    """PREFIX_sweep.svg beside PREFIX_sweep.csv; its path, or None when the run was no sweep."""
    steps = sweep_steps(environment, ended=True)
    if not steps:
        return None
    path = f"{prefix}_sweep.svg"
    with open(path, "w", encoding="utf-8") as f:
        f.write(knee_sheet(steps))
    return path


def on_init(environment: Environment, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner):
        return  # the history lives where the figures are shown
    if web_ui is not None:
        _install_web_ui(environment)

    @environment.events.quitting.add_listener
    def finish(**_: Any) -> None:
        if prefix := locust_options(environment).csv_prefix:
            write_knee(environment, prefix)


def report_sections(environment: Environment, sections: list[Section], final: bool, **_: Any) -> None:
    sections.append(Section(CHARTS_SECTION, report_section(environment, ended=final)))


def setup(events: Events, pages: PageEvents) -> None:
    events.init.add_listener(on_init)
    pages.report_sections.add_listener(report_sections)
