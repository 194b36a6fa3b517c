"""The Answer consistency table in Locust's web UI, live, on the runner that shows the figures (the master,
or the only process): under the Pooling tab's table, a box fetched every REFRESH_MS from /consistency/panel
(locust_pages.live_box_script), each name's figures and the total's as they stand; /consistency/state
answers the same figures as the JSON result's `consistency` would hold them now.

Wired from consistency_report.setup: the web UI is one more place its figures are shown."""

from __future__ import annotations

import html
from typing import Any

from flask import Response, jsonify, request
from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner

from poolbench_locust import htmltables
from poolbench_locust.consistency import between_hosts
from poolbench_locust.consistency.state import FIGURES, cell, consistency_of
from poolbench_locust.json_sections import json_safe
from poolbench_locust.locust_pages import add_route, insert_before_body_end, live_box_script, web_base

BOX_ID = "poolbench-consistency-live"
REFRESH_MS = 2000
"""As often as Locust's web UI asks for its own stats (and the Pooling tab for its charts)."""
TAB_SCRIPT = live_box_script("pooling", BOX_ID, "consistency/panel", REFRESH_MS)


def fragment(environment: Environment) -> str:
    """The box's HTML: the figures' table, or a line saying why there is none yet (every text escaped)."""
    figures = consistency_of(environment).figures()
    title = "<h3>Answer consistency</h3>"
    if not figures:
        note = "No answer compared with its reference yet (docs/consistency.md)."
        return f'{htmltables.STYLE}<div class="poolbench-section">{title}<p>{html.escape(note)}</p></div>'
    shown = [f for f in FIGURES if any(f in found for found in figures.values())]
    rows = [{"Name": name, **{f: cell(found.get(f)) for f in shown}} for name, found in figures.items()]
    note = "Answers under load against their reference answered alone, since the stats began."
    table = htmltables.table(["Name", *shown], rows) + between_hosts.report_html(environment)  # --ab-host's
    return f'{htmltables.STYLE}<div class="poolbench-section">{title}<p>{note}</p>{table}</div>'


def _install_web_ui(environment: Environment, web_ui: Any) -> None:
    base = web_base(environment)

    def consistency_state() -> Response:
        return jsonify({"consistency": json_safe(consistency_of(environment).figures())})

    def consistency_panel() -> Response:
        return Response(fragment(environment), mimetype="text/html")

    add_route(environment, "/consistency/state", consistency_state)
    add_route(environment, "/consistency/panel", consistency_panel)

    @web_ui.app.after_request
    def extend(response: Response) -> Response:
        if response.mimetype == "text/html" and not response.direct_passthrough and request.path == f"{base}/":
            response.set_data(insert_before_body_end(response.get_data(as_text=True), TAB_SCRIPT))
        return response


def on_init(environment: Environment, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner) or web_ui is None:
        return  # the figures are shown where they are merged
    _install_web_ui(environment, web_ui)


def setup(events: Events) -> None:
    events.init.add_listener(on_init)
