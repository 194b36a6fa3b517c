"""--find-capacity in Locust's web UI and HTML report, on the runner that drives the search (the master, or
the only process): the Capacity tab (one row a probe as it ends, and under the table the bracket, the probe
measuring now, the answer once the search ends and the probes' chart, fetched live), its routes
(/capacity/state as JSON, /capacity/panel as HTML, /capacity/csv), the report's Capacity section, the web
form's --find-capacity (a search installed, or removed, as each run's form says), and the JSON result's
`capacity` (and, for --repeat N, its top-level repeats: each one search)."""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify, request
from locust.env import Environment
from locust.event import Events
from locust.runners import STATE_RUNNING, STATE_SPAWNING, WorkerRunner

from poolbench_locust.capacity import lanes, panel
from poolbench_locust.capacity.capacity_shape import install, lanes_of, searches_of, shape_of, uninstall
from poolbench_locust.capacity.probes import USERS_BUSY_SHARE
from poolbench_locust.capacity.report import CSV_COLUMNS
from poolbench_locust.consistency.state import WINDOW_SCHEMA
from poolbench_locust.json_sections import (
    CAPACITY_JSON,
    REPEATED_SEARCHES_JSON,
    JsonSection,
    ResultEvents,
    json_safe,
)
from poolbench_locust.locust_pages import (
    CAPACITY_SECTION,
    CAPACITY_TAB,
    PageEvents,
    Section,
    Tab,
    add_route,
    csv_download,
    insert_before_body_end,
    live_box_script,
    web_base,
)
from poolbench_locust.metrics.pacing import CPU_IDLE_PERCENT
from poolbench_locust.metrics.table import csv_text
from poolbench_locust.options import OptionError, Settings
from poolbench_locust.webform.validation import form_options

TAB_KEY = "capacity"
SECTION_ID = "poolbench-capacity"
REFRESH_MS = 2000
"""As often as Locust's web UI asks for its own stats (and the Pooling tab for its charts)."""

TAB_SCRIPT = live_box_script("capacity", "poolbench-capacity", "capacity/panel", REFRESH_MS)


def web_ui_tab(environment: Environment, tabs: list[Tab], **_: Any) -> None:
    tabs.append(
        Tab(
            CAPACITY_TAB,
            "Capacity",
            TAB_KEY,
            panel.TAB_HEADER,
            lambda: panel.rows(shape_of(environment)),
            "Probe",
            ("./capacity/csv", "Download capacity probes CSV"),
        )
    )


def report_section(environment: Environment, sections: list[Section], **_: Any) -> None:
    if html := panel.report_section(shape_of(environment), SECTION_ID):
        sections.append(Section(CAPACITY_SECTION, html))


def _install_web_ui(environment: Environment, web_ui: Any) -> None:
    base = web_base(environment)

    def capacity_state() -> Response:
        # as the JSON result writes it (a figure that is not a number is null there, and here)
        return jsonify(json_safe(panel.state(shape_of(environment))))

    def capacity_panel() -> Response:
        return Response(panel.fragment(shape_of(environment)), mimetype="text/html")

    def capacity_csv() -> Response:
        shape = shape_of(environment)
        columns, rows = (list(CSV_COLUMNS), []) if shape is None else lanes.csv_table(shape.lanes)
        return csv_download(csv_text(rows, columns), "capacity")

    add_route(environment, "/capacity/state", capacity_state)
    add_route(environment, "/capacity/panel", capacity_panel)
    add_route(environment, "/capacity/csv", capacity_csv)

    @web_ui.app.before_request
    def search_or_not() -> None:
        if request.method == "POST" and request.path == f"{base}/swarm":
            _search_as_the_form_says(environment)

    @web_ui.app.after_request
    def extend(response: Response) -> Response:
        if response.mimetype != "text/html" or response.direct_passthrough:
            return response
        if request.path == f"{base}/":
            response.set_data(insert_before_body_end(response.get_data(as_text=True), TAB_SCRIPT))
        return response


def _search_as_the_form_says(environment: Environment) -> None:
    """Before Locust's /swarm reads the form (and after the form's checks passed it): a search installed
    when its --find-capacity is ticked, removed when not. Locust starts a run with a shape by the shape
    (its form's Users are the most in flight), one without by its users; a search under way is left alone,
    as Locust leaves a running shape."""
    runner = environment.runner
    if runner is None or runner.shape_greenlet is not None or runner.state in (STATE_RUNNING, STATE_SPAWNING):
        return
    try:
        settings = Settings.from_options(form_options(environment, request.form))
    except OptionError:
        return  # refused by the form's checks, which ran before this
    if settings.find_capacity and shape_of(environment) is None:
        install(environment, settings)
    elif not settings.find_capacity:
        uninstall(environment)


def on_init(environment: Environment, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner):
        return  # the search is driven, and shown, where the figures are merged
    if web_ui is not None:
        _install_web_ui(environment, web_ui)


INTERVAL = {
    "oneOf": [
        {"type": "null"},
        {"type": "array", "items": {"type": "number", "minimum": 0}, "minItems": 2, "maxItems": 2},
    ]
}
CLIENT_LIMIT = {
    "enum": ["users", "cpu", None],
    "description": "Where limited_by is client, which part of it: users (by Little's law the rate kept at least"
    f" {100 * USERS_BUSY_SHARE:g} % of them busy at held_ms; or, with no request timed, the CPU idle, below"
    f" {CPU_IDLE_PERCENT:g} % of a core at its peak: raise -u) or cpu (its CPU busy, or its users mostly free:"
    " raise --processes or workers); null for a server verdict",
}
USERS_NEEDED = {
    "type": ["integer", "null"],
    "minimum": 1,
    "description": "Where client_limit is users: the users to try, Little's law's (the rate x held_ms) x1.5,"
    " rounded up, more than the run had; null otherwise or when no request ended to time",
}
PROBE_SCHEMA = {
    "type": "object",
    "required": [
        *("rate", "sent_ratio", "attainment", "e2e_p99_ms", "limited_by", "client_limit", "users_needed", "passed"),
        *("energy_j", "power_mean_w", "energy_j_per_1m_input_tokens"),
        "consistency",
    ],
    "properties": {
        "rate": {"type": "number"},
        "sent_ratio": {"type": ["number", "null"]},
        "attainment": {"type": ["number", "null"]},
        "e2e_p99_ms": {"type": ["number", "null"]},
        "limited_by": {"enum": ["server", "client"]},
        "client_limit": CLIENT_LIMIT,
        "users_needed": USERS_NEEDED,
        "held_ms": {
            "type": ["number", "null"],
            "minimum": 0,
            "description": "The mean time a request held a user in the probe: its E2E less its wait in the client's"
            " own queue (the latency Little's law takes); null when no request ended",
        },
        "passed": {"type": "boolean"},
        "energy_j": {
            "type": ["number", "null"],
            "minimum": 0,
            "description": "The GPUs' energy over the probe's window (its mean power x its seconds), summed over"
            " every dcgm-exporter target of --server-metrics; null without one",
        },
        "power_mean_w": {
            "type": ["number", "null"],
            "minimum": 0,
            "description": "The GPUs' mean power in the probe's window, from their energy counters; null without a"
            " dcgm-exporter target",
        },
        "energy_j_per_1m_input_tokens": {
            "type": ["number", "null"],
            "minimum": 0,
            "description": "energy_j per million input tokens the probe sent; null without a dcgm-exporter target",
        },
        "consistency": WINDOW_SCHEMA,
    },
}
CAPACITY_SCHEMA = {
    "description": "--find-capacity: the highest open-loop rate that met --slo, who was the limit, and each probe;"
    " null when the run searched none.",
    "oneOf": [
        {"type": "null"},
        {
            "type": "object",
            "required": [
                *("requests_per_s", "input_tokens_per_s", "sequences_per_s", "attainment", "limited_by"),
                *("client_limit", "users_needed", "ended", "probes"),
            ],
            "properties": {
                "requests_per_s": {
                    "type": ["number", "null"],
                    "description": "The capacity: the highest probe rate that passed; null when none did or the"
                    " client was the limit.",
                },
                "input_tokens_per_s": {"type": ["number", "null"]},
                "sequences_per_s": {"type": ["number", "null"]},
                "attainment": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
                "limited_by": {"enum": ["server", "client", None]},
                "client_limit": CLIENT_LIMIT,
                "users_needed": USERS_NEEDED,
                "ended": {"type": ["string", "null"]},
                "requests_per_s_ci95": {
                    "description": "--repeat N: the 95 % confidence interval [low, high] of the N searches' answers"
                    " (Student's t); null without --repeat or when a search claimed none.",
                    **INTERVAL,
                },
                "input_tokens_per_s_ci95": INTERVAL,
                "sequences_per_s_ci95": INTERVAL,
                "searches": {
                    "description": "--repeat N: each search's own answer; null without --repeat.",
                    "type": ["array", "null"],
                },
                "probes": {"type": "array", "items": PROBE_SCHEMA},
                "ab": {
                    "description": "--ab-host: each host's own search (A's is also the keys above), their probes"
                    " interleaved; B's capacity against A's in % of A's (null unless both claimed one); null"
                    " without --ab-host.",
                    "type": ["object", "null"],
                    "required": ["A", "B", "b_against_a_percent", "answer"],
                    "properties": {
                        "A": {"type": "object", "required": ["host", "requests_per_s", "limited_by", "probes"]},
                        "B": {"type": "object", "required": ["host", "requests_per_s", "limited_by", "probes"]},
                        "b_against_a_percent": {"type": ["number", "null"]},
                        "answer": {"type": "string"},
                    },
                },
            },
        },
    ],
}


def capacity_fields(environment: Environment) -> dict[str, Any]:
    """The JSON result's `capacity`: the answer and its probes, or None when the run searched none."""
    found = lanes_of(environment)
    return {"capacity": None if not found or not found[0].searches.outcomes else lanes.as_dict(found)}


def repeated_search_fields(environment: Environment) -> dict[str, Any]:
    """--find-capacity --repeat N: each repeat is one whole search, so its figures (capacity/repeated.py) take
    the place of the repeats room's, under the same top-level keys, whose schema is the repeats room's."""
    searches = searches_of(environment)
    return {} if searches is None or (repeated := searches.repeats()) is None else repeated


def json_sections(sections: list[JsonSection], **_: Any) -> None:
    sections.append(JsonSection(CAPACITY_JSON, capacity_fields, {"capacity": CAPACITY_SCHEMA}))
    sections.append(JsonSection(REPEATED_SEARCHES_JSON, repeated_search_fields))


def setup(events: Events, pages: PageEvents, results: ResultEvents) -> None:
    events.init.add_listener(on_init)
    pages.web_ui_tabs.add_listener(web_ui_tab)
    pages.report_sections.add_listener(report_section)
    results.json_sections.add_listener(json_sections)
