"""locust_pages: the sections of Locust's HTML report and the web UI's tabs, each in its declared order."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from locust.env import Environment
from locust.event import Events

from poolbench_locust import EmbeddingsUser, locust_pages
from poolbench_locust.locust_pages import CHARTS_SECTION, POOLING_SECTION, POOLING_TAB, Section, Tab, page_events
from tests.support.harness import options


def environment(*args: str) -> Environment:
    env = Environment(user_classes=[EmbeddingsUser], parsed_options=options(*args), events=Events())
    env.create_local_runner()
    return env


def test_a_section_goes_where_its_order_says_whoever_listened_first(tmp_path):
    # Added last, ordered between the charts and the pooling table: that is where it goes.
    def between(sections: list[Section], **_: Any) -> None:
        sections.append(Section((CHARTS_SECTION + POOLING_SECTION) // 2, '<p id="between"></p>'))

    page = tmp_path / "report.html"
    page.write_text("<html><body><h1>Locust</h1></body></html>")
    env = environment("--html", str(page))
    page_events.report_sections.add_listener(between)
    try:
        locust_pages.write_html_file(env)
    finally:
        page_events.report_sections.remove_listener(between)
    written = page.read_text()
    marks = ["<h1>Locust</h1>", 'id="poolbench-charts"', 'id="between"', 'id="poolbench-pooling"', "</body>"]
    assert [written.count(m) for m in marks] == [1] * len(marks), "each section once, in the one page"
    assert [written.index(m) for m in marks] == sorted(written.index(m) for m in marks)


def test_the_web_ui_shows_the_tabs_in_their_order_with_their_rows(monkeypatch):
    calls = iter(range(1, 100))

    def first(tabs: list[Tab], **_: Any) -> None:
        tabs.append(
            Tab(
                POOLING_TAB - 1,
                "First",
                "first",
                ["Name", "Rows/s"],
                lambda: [{"Name": "a", "Rows/s": next(calls)}],
                "Name",
            )
        )

    monkeypatch.setattr(sys, "argv", ["locust"])  # Locust's page parses sys.argv for the form's defaults
    env = environment()
    web_ui = env.create_web_ui("127.0.0.1", 0, delayed_start=True)
    page_events.web_ui_tabs.add_listener(first)
    try:
        locust_pages.on_init(environment=env, runner=env.runner, web_ui=web_ui)
    finally:
        page_events.web_ui_tabs.remove_listener(first)
    keys = [tab["key"] for tab in web_ui.template_args["extended_tabs"]]
    assert keys == ["first", "pooling", "server_metrics", "server_reconciliation", "client_load", "capacity", "ab"]
    table = web_ui.template_args["extended_tables"][0]
    assert table == {
        "key": "first",
        "structure": [{"key": "name", "title": "Name"}, {"key": "rows_per_s", "title": "Rows/s"}],
    }
    served = web_ui.app.test_client().get("/stats/requests").get_json()["extended_stats"]
    assert [e["key"] for e in served] == keys
    assert served[0]["data"] == [{"name": "a", "rows_per_s": 1, "safe_name": "a"}]
    # Locust hands back its memoized answer within 2 s: each tab once still, its rows as they are now
    again = web_ui.app.test_client().get("/stats/requests").get_json()["extended_stats"]
    assert [e["key"] for e in again] == keys
    assert again[0]["data"] == [{"name": "a", "rows_per_s": 2, "safe_name": "a"}]


@pytest.mark.parametrize("final", [False, True])
def test_the_report_and_the_html_file_hold_the_same_sections(final):
    env = environment()
    sections = locust_pages.report_sections(env, final=final)
    assert sections.index('id="poolbench-charts"') < sections.index('id="poolbench-pooling"')
    assert sections.index('id="poolbench-pooling"') < sections.index('id="poolbench-client-load"')
