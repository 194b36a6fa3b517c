"""Locust's web UI and the HTML report in a real browser: headless Chromium driven over its DevTools
protocol (devsupport/browser.py), against the bundled mock, everything on 127.0.0.1 and bounded in time.

A run is started from the form with plugin options typed into it; the Pooling tab then shows what
/pooling/stats says, its charts hold lines, its column chooser hides and shows columns; a bad value
typed into the form shows its one line; the HTML report renders with its charts and no JavaScript error;
the Capacity tab shows a search's probes, its answer and its chart; the Pooling tab holds the charts and the
Answer consistency table, one box under the other.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from devsupport.browser import Browser, chromium
from tests.support.hostile import server_process
from tests.support.webui import WebUI

if chromium() is None:
    # CI installs it (.ci/run): there a missing browser is a failure, not a skip
    if os.environ.get("CI"):
        pytest.fail("the browser tests need chromium (apt-get install chromium)", pytrace=False)
    pytest.skip("needs chromium (apt-get install chromium)", allow_module_level=True)

BATCH = 3
"""The batch size typed into the form: each request then pools exactly this many sequences."""


def fill(browser: Browser, name: str, value: str) -> None:
    """Type into the form's field as a user would: React reads the input event, not the value."""
    browser.js(
        f"""(() => {{
        const input = document.querySelector('form [name="{name}"]');
        const set = Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, "value").set;
        set.call(input, {json.dumps(value)});
        input.dispatchEvent(new Event("input", {{ bubbles: true }}));
        input.dispatchEvent(new Event("change", {{ bubbles: true }}));
        return true;
    }})()"""
    )


def open_form(browser: Browser, url: str) -> None:
    browser.goto(url + "/")
    browser.until("document.querySelector('form [name=\"userCount\"]') !== null")
    browser.js("[...document.querySelectorAll('form button')].find(b => b.textContent === 'Custom parameters').click()")
    browser.until("document.querySelector('form [name=\"batchSize\"]') !== null")


def start_from_form(browser: Browser, url: str, **fields: str) -> None:
    open_form(browser, url)
    for name, value in fields.items():
        fill(browser, name, value)
    browser.js("document.querySelector('form button[type=submit]').click()")


def pooling_tab_table(browser: Browser) -> dict[str, Any]:
    """The Pooling tab's table as shown: the visible headers and each row's visible cells."""
    return browser.js(
        """(() => {
        const table = document.querySelector('table');
        const shown = (cell) => getComputedStyle(cell).display !== 'none';
        const header = [...table.querySelectorAll('thead th')].filter(shown).map((c) => c.textContent);
        const rows = [...table.querySelectorAll('tbody tr')].map(
            (tr) => [...tr.querySelectorAll('td')].filter(shown).map((c) => c.textContent));
        return { header, rows };
    })()"""
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    b = Browser(width=1400)
    yield b
    b.close()


@pytest.fixture(scope="module")
def finished_run(mock_server_factory: Any, browser: Browser) -> Iterator[WebUI]:
    """A run started from the web UI's form (users, batch size and an SLO typed in), stopped after 6 s."""
    mock = mock_server_factory("--ttfb-ms", "5", "--body-ms", "5")
    ui = WebUI("locustfiles/embeddings.py", "--host", mock.url, "--server-metrics", "off")
    try:
        start_from_form(browser, ui.base, userCount="2", spawnRate="2", batchSize=str(BATCH), slo="e2e_ms=5000")
        ui.wait_for("running")
        time.sleep(6)
        ui.stop()
        time.sleep(0.5)
        yield ui
    finally:
        ui.close()


def test_a_run_started_from_the_form_sends_the_options_typed_into_it(finished_run: WebUI) -> None:
    total = finished_run.pooling_total()
    assert total["Request Count"] >= 10, total
    assert total["Sequences"] == BATCH * (total["Request Count"] - total["Failure Count"])
    assert total["SLO Met"] == total["Request Count"] - total["Failure Count"]  # the SLO typed in counts


def test_the_pooling_tab_shows_the_rows_of_pooling_stats(finished_run: WebUI, browser: Browser) -> None:
    browser.goto(finished_run.base + "/?tab=pooling")
    browser.until("document.querySelectorAll('table tbody tr').length >= 2")
    browser.until("document.querySelector('#poolbench-columns') !== null")
    shown = pooling_tab_table(browser)
    expected = requests.get(finished_run.base + "/pooling/stats", timeout=10).json()
    assert [row[shown["header"].index("Name")] for row in shown["rows"]] == [r["Name"] for r in expected]
    for row, want in zip(shown["rows"], expected, strict=True):
        for column, text in zip(shown["header"], row, strict=True):
            value = want[column]
            if value is None or isinstance(value, str):
                assert text == (value or ""), (column, text, value)
            elif column.endswith("/s"):  # a rate over the run: the tab's copy is up to one refresh older
                assert float(text) == pytest.approx(value, rel=0.05), (column, text, value)
            else:
                assert float(text) == pytest.approx(value), (column, text, value)


def test_the_pooling_tab_holds_the_charts_and_the_consistency_table_under_its_table(
    finished_run: WebUI, browser: Browser
) -> None:
    """Two rooms' live boxes under one tab (locust_pages.live_box_script): both follow the table, and neither
    pushes the other away at each refresh (a box made again would lose the mark set on it)."""
    browser.goto(finished_run.base + "/?tab=pooling")
    boxes = "['poolbench-charts', 'poolbench-consistency-live'].map(id => document.getElementById(id))"
    browser.until(f"{boxes}.every(box => box !== null && box.innerHTML !== '')")
    browser.js(f"{boxes}.forEach(box => box.dataset.seen = 'yes'); true")
    time.sleep(5)  # two refreshes of each
    placed = browser.js(
        """(() => {
        const anchor = document.querySelector('table').closest('.MuiTableContainer-root');
        const after = [];
        for (let e = anchor.nextElementSibling; e && e.hasAttribute('data-poolbench-box'); e = e.nextElementSibling)
            after.push([e.id, e.dataset.seen || '']);
        return after;
    })()"""
    )
    assert sorted(placed) == [["poolbench-charts", "yes"], ["poolbench-consistency-live", "yes"]], placed
    assert "Answer consistency" in browser.js("document.getElementById('poolbench-consistency-live').textContent")


def test_the_pooling_tab_charts_hold_data(finished_run: WebUI, browser: Browser) -> None:
    browser.goto(finished_run.base + "/?tab=pooling")
    browser.until("document.querySelectorAll('#poolbench-charts svg').length >= 6")
    lines = browser.js(
        "[...document.querySelectorAll('#poolbench-charts svg')].map(s => [s.getAttribute('aria-label'),"
        " Math.max(0, ...[...s.querySelectorAll('polyline')].map(p => p.getAttribute('points').split(' ').length))])"
    )
    assert len(lines) >= 6
    for title, points in lines:
        assert points >= 2, f"chart {title!r} has no line"
    # every chart has its axes' scale and its legend
    assert browser.js(
        "[...document.querySelectorAll('#poolbench-charts svg')].every(s => s.querySelectorAll('text').length >= 6)"
    )


def test_the_column_chooser_hides_and_shows_columns(finished_run: WebUI, browser: Browser) -> None:
    browser.goto(finished_run.base + "/?tab=pooling")
    browser.js("localStorage.removeItem('poolbench-pooling-columns')")
    browser.goto(finished_run.base + "/?tab=pooling")
    browser.until("document.querySelector('#poolbench-columns-button') !== null")
    browser.until("document.querySelectorAll('table tbody tr').length >= 2")
    header = pooling_tab_table(browser)["header"]
    assert "E2E 95%" in header and "Bytes" not in header and len(header) <= 12, header
    fits = "document.querySelector('.poolbench-pooling-box').getBoundingClientRect().right <= innerWidth"
    assert browser.js(fits)

    browser.js("document.querySelector('#poolbench-columns-button').click()")
    browser.until("!document.querySelector('#poolbench-columns-menu').hidden")
    browser.js("document.querySelector('#poolbench-columns-menu input[data-column=\"Bytes\"]').click()")
    browser.js("document.querySelector('#poolbench-columns-menu input[data-column=\"E2E 95%\"]').click()")
    header = pooling_tab_table(browser)["header"]
    assert "Bytes" in header and "E2E 95%" not in header, header

    browser.goto(finished_run.base + "/?tab=pooling")  # the choice is kept
    browser.until("document.querySelectorAll('table tbody tr').length >= 2")
    browser.until("document.querySelector('#poolbench-columns') !== null")
    header = pooling_tab_table(browser)["header"]
    assert "Bytes" in header and "E2E 95%" not in header, header
    browser.js("localStorage.removeItem('poolbench-pooling-columns')")


def test_the_html_report_renders_its_charts_and_tables_without_a_javascript_error(
    finished_run: WebUI, browser: Browser
) -> None:
    browser.errors.clear()
    browser.goto(finished_run.base + "/stats/report")
    browser.until("document.querySelector('#poolbench-pooling table') !== null")
    browser.until("document.querySelectorAll('canvas').length >= 1", seconds=20)  # Locust's own charts drew
    assert browser.js("document.querySelectorAll('#poolbench-charts svg polyline').length") >= 6
    assert browser.js("document.querySelectorAll('#poolbench-pooling tbody tr').length") == 2
    wide = browser.js(
        "[...document.querySelectorAll('.poolbench-section')].filter("
        " s => s.getBoundingClientRect().right > document.documentElement.clientWidth).map(s => s.id)"
    )
    assert wide == [], f"wider than the page: {wide}"
    assert browser.js("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    time.sleep(1)
    browser.js("true")  # reads the events that arrived meanwhile
    assert browser.errors == []


def test_a_bad_value_typed_into_the_form_shows_its_message(mock_server: Any, browser: Browser) -> None:
    ui = WebUI("locustfiles/embeddings.py", "--host", mock_server.url, "--server-metrics", "off")
    try:
        start_from_form(browser, ui.base, userCount="1", spawnRate="1", batchSize="0")
        text = browser.until(
            "[...document.querySelectorAll('.MuiAlert-message, [role=alert]')].map(e => e.textContent).join(' ')"
        )
        assert "--batch-size" in text and "must be a whole number >= 1, got 0" in text, text
        assert ui.requests_json()["state"] == "ready"  # no run started
        assert mock_server.stats()["requests"] == 0
    finally:
        ui.close()


def test_the_capacity_tab_shows_each_probe_and_then_the_answer_and_chart(browser: Browser) -> None:
    """A search against a server of 4 slots x 20 ms, watched on the Capacity tab: its rows are the probes
    so far, and under the table the bracket, then the answer line and the probes' chart."""
    env = {"SLOTS_N": "4", "SLOTS_SERVICE_MS": "20"}
    with server_process("tests.support.slots_server:slots", env) as url:
        ui = WebUI(
            "locustfiles/embeddings.py",
            *("--host", url, "--no-preflight", "--server-metrics", "off", "--find-capacity", "--slo", "e2e_ms=60"),
            *("--capacity-start-rate", "100", "--capacity-precision", "0.3", "--sweep-step-time", "1"),
        )
        try:
            assert ui.swarm(user_count=64, spawn_rate=64, host=url)["success"]
            # Locust's page, loaded while a run is still "ready" (its users not started: the consistency
            # reference answers come first), shows the start form and asks for no figures until reloaded.
            ui.wait_for("running")
            browser.goto(ui.base + "/?tab=capacity")
            browser.until("document.querySelector('#poolbench-capacity') !== null")
            browser.until("document.querySelectorAll('table tbody tr').length >= 1", seconds=30)
            deadline = time.monotonic() + 90
            while (state := requests.get(ui.base + "/capacity/state", timeout=10).json())["answer"] is None:
                assert time.monotonic() < deadline, ui.log()[-3000:]
                time.sleep(0.5)
            answer = json.dumps(state["answer"])
            browser.until(f"document.querySelector('#poolbench-capacity').textContent.includes({answer})")
            browser.until(f"document.querySelectorAll('table tbody tr').length === {len(state['result']['probes'])}")
            charts = browser.js("[...document.querySelectorAll('#poolbench-capacity svg')].length")
            assert charts >= 2  # attainment and E2E p99 against the rate
        finally:
            ui.close()
