"""--find-capacity in the web UI: the Capacity tab shows each probe as it ends, the bracket and the answer,
with the values PREFIX_capacity.csv and the JSON result have; the HTML report holds the probes' chart; and
nothing a server sends reaches the tab's HTML unescaped."""

from __future__ import annotations

import csv
import json
import time
from typing import Any

import gevent
import pytest
import requests
from locust.env import Environment
from locust.event import Events

from poolbench_locust.capacity import panel
from poolbench_locust.capacity.capacity_shape import CapacityShape
from poolbench_locust.capacity.lanes import Lane
from poolbench_locust.capacity.probes import Probe
from poolbench_locust.capacity.report import Outcome
from poolbench_locust.locust_pages import column_key
from poolbench_locust.options import BY_FLAG, Settings
from poolbench_locust.options.values import Slo
from poolbench_locust.webform.layout import posted_name
from tests.support.harness import options
from tests.support.hostile import server_process
from tests.support.webui import WebUI

HOSTILE = '<img src=x onerror="alert(1)">'


def capacity_state(ui: WebUI) -> dict[str, Any]:
    return requests.get(f"{ui.base}/capacity/state", timeout=10).json()


@pytest.mark.timing
@pytest.mark.searches(seconds=18)
def test_the_capacity_tab_shows_each_probe_as_it_ends_then_the_answer_as_the_csv_and_json_have_them(tmp_path):
    prefix, result, report = tmp_path / "cap", tmp_path / "cap.json", tmp_path / "report.html"
    env = {"SLOTS_N": "4", "SLOTS_SERVICE_MS": "20"}
    with server_process("tests.support.slots_server:slots", env) as url:
        ui = WebUI(
            "locustfiles/embeddings.py",
            *("--host", url, "--find-capacity", "--slo", "e2e_ms=60", "--input-len", "6", "-u", "64", "-r", "64"),
            *("--capacity-start-rate", "50", "--capacity-precision", "0.2", "--sweep-step-time", "1"),
            *("--server-metrics-interval", "0.5", "--no-preflight"),
            *("--csv", str(prefix), "--json-result", str(result), "--html", str(report)),
        )
        try:
            idle = capacity_state(ui)
            assert idle["search"] and not idle["running"] and idle["result"]["probes"] == []
            page = requests.get(f"{ui.base}/", timeout=10).text
            assert '"capacity"' in page and "./capacity/panel" in page  # the tab, and its live part's script
            assert ui.swarm(user_count=64, spawn_rate=64, host=url)["success"]
            seen: list[dict[str, Any]] = []
            deadline = time.monotonic() + 120
            while (now := capacity_state(ui))["answer"] is None:
                assert time.monotonic() < deadline, f"no answer yet:\n{ui.log()[-3000:]}"
                if now["running"]:
                    seen.append(now)
                time.sleep(0.2)
            final = now
            tab = next(t for t in ui.requests_json()["extended_stats"] if t["key"] == "capacity")["data"]
            fragment = requests.get(f"{ui.base}/capacity/panel", timeout=10).text
            live_report = requests.get(f"{ui.base}/stats/report", timeout=30).text
            ui.wait_for("stopped", timeout=30)
            assert ui.proc.poll() is None, "a web UI's search stops the run; the web UI stays"
            assert ui.interrupt() == 0, ui.log()[-3000:]
        finally:
            ui.close()
    probes = final["result"]["probes"]
    assert final["ended"] == "converged" and len(probes) >= 3 and not final["running"]
    # live: the probes came one at a time, each shown as it ended and never changed after, with the probe
    # measuring now and, once a rate failed, the bracket
    counts = [len(s["result"]["probes"]) for s in seen]
    assert counts == sorted(counts) and len(set(counts)) >= 3, counts
    assert all(s["result"]["probes"] == probes[: len(s["result"]["probes"])] for s in seen)
    assert any(s["current"] is not None for s in seen)
    bracketed = [s for s in seen if s["bracket"]["failed"] is not None]
    assert bracketed and all(s["bracket"]["passed"] < s["bracket"]["failed"] for s in bracketed)
    # the end: the answer line, the JSON result's capacity object, PREFIX_capacity.csv, the tab's rows
    document = json.loads(result.read_text())
    assert final["result"] == json.loads(json.dumps(document["capacity"]))
    assert final["answer"] == document["capacity"]["answer"] and final["answer"].startswith("Capacity: ")
    with open(f"{prefix}_capacity.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["Target Requests/s"]) for r in rows] == [p["rate"] for p in probes]
    assert [r["Limited By"] for r in rows] == [p["limited_by"] for p in probes]
    assert [str(r["probe"]) for r in tab] == [r["Probe"] for r in rows]
    for cells, line in zip(tab, rows, strict=True):
        for title in panel.TAB_HEADER:
            value = cells[column_key(title)]
            assert ("" if value is None else str(value)) == line[title], (title, cells, line)
    assert final["answer"].replace("'", "&#x27;") in fragment and "Capacity: E2E p99" in fragment
    # the probes' chart, in the web UI's report and in the --html file
    for page in (live_report, report.read_text()):
        assert 'id="poolbench-capacity"' in page and "Capacity: attainment" in page and "SLO e2e_ms=60" in page


def form(**values: str) -> dict[str, str]:
    """Options as the web UI's page posts them to /swarm."""
    return {posted_name(BY_FLAG[flag].dest): value for flag, value in values.items()}


@pytest.mark.timing
@pytest.mark.searches(seconds=20)
def test_the_web_form_starts_a_search_and_a_later_run_without_it_is_a_plain_run(tmp_path):
    """Launched without --find-capacity: the form's tick makes the run a search (its options from the form),
    which ends by itself; the next run, unticked, is an ordinary run that goes on until stopped."""
    env = {"SLOTS_N": "4", "SLOTS_SERVICE_MS": "20"}
    with server_process("tests.support.slots_server:slots", env) as url:
        ui = WebUI("locustfiles/embeddings.py", "--host", url, "--no-preflight", "--input-len", "6")
        try:
            assert not capacity_state(ui)["search"]
            search = {"--find-capacity": "true", "--slo": "e2e_ms=60", "--capacity-start-rate": "100"}
            search |= {"--capacity-precision": "0.3", "--sweep-step-time": "1", "--server-metrics": "off"}
            assert ui.swarm(user_count=64, spawn_rate=64, host=url, **form(**search))["success"]
            deadline = time.monotonic() + 90
            while (now := capacity_state(ui))["answer"] is None:
                assert time.monotonic() < deadline, f"no answer yet:\n{ui.log()[-3000:]}"
                time.sleep(0.2)
            ui.wait_for("stopped", timeout=30)
            result = now["result"]
            assert now["ended"] == "converged" and result["probes"][0]["rate"] == 100.0
            assert result["slo"] == "e2e_ms=60" and result["precision"] == 0.3 and result["limited_by"] == "server"
            assert "Shape test starting" in ui.log()
            plain = {"--find-capacity": "false", "--slo": "e2e_ms=60", "--capacity-start-rate": "100"}
            assert ui.swarm(user_count=2, spawn_rate=2, host=url, **form(**plain))["success"]
            ui.wait_for("running", timeout=30)
            time.sleep(3)  # a search would have set its first probe's rate by now
            assert ui.requests_json()["state"] == "running" and ui.requests_json()["user_count"] == 2
            assert capacity_state(ui) == {"search": False, "running": False, "how_to_start": panel.HOW_TO_START}
            ui.stop()
        finally:
            ui.close()


def test_the_stop_button_stops_a_search_and_its_answer_says_so():
    """Stopped from the web UI after its first probe: the driver sets no further rate, no probe is added,
    and the answer says the search was stopped (not cut short by a run time)."""
    env = {"SLOTS_N": "4", "SLOTS_SERVICE_MS": "20"}
    with server_process("tests.support.slots_server:slots", env) as url:
        ui = WebUI(
            "locustfiles/embeddings.py",
            *("--host", url, "--no-preflight", "--server-metrics", "off", "--find-capacity", "--slo", "e2e_ms=60"),
            *("--capacity-start-rate", "20", "--sweep-step-time", "1", "--input-len", "6"),
        )
        try:
            assert ui.swarm(user_count=16, spawn_rate=16, host=url)["success"]
            deadline = time.monotonic() + 60
            while not capacity_state(ui)["result"]["probes"]:
                assert time.monotonic() < deadline, ui.log()[-3000:]
                time.sleep(0.2)
            ui.stop()
            stopped = capacity_state(ui)
            time.sleep(4)  # two more probes' time
            later = capacity_state(ui)
        finally:
            ui.close()
    assert not stopped["running"] and stopped["ended"] == "stopped"
    assert "the search was stopped before it ended" in stopped["answer"]
    assert later["result"]["probes"] == stopped["result"]["probes"]


def test_without_a_search_the_tab_says_how_to_start_one(mock_server):
    ui = WebUI("locustfiles/embeddings.py", "--host", mock_server.url)
    try:
        assert capacity_state(ui) == {"search": False, "running": False, "how_to_start": panel.HOW_TO_START}
        fragment = requests.get(f"{ui.base}/capacity/panel", timeout=10).text
        assert "--find-capacity" in fragment and "--slo" in fragment
        tab = next(t for t in ui.requests_json()["extended_stats"] if t["key"] == "capacity")
        assert tab["data"] == []
    finally:
        ui.close()


class FakeShape(CapacityShape):
    """A search's shape without a run: only what the tab reads."""

    def __init__(self, outcome: Outcome) -> None:  # no Locust environment, no runner
        self.settings = Settings(slo=Slo(e2e_ms=60.0))
        lane = Lane(None, "", self.settings)
        lane.searches.outcomes[-1] = lane.outcome = outcome
        self.lanes = [lane]
        self.current, self.current_side = (3, 75.0), None
        self._driver = None
        self.done = False
        self._finished = False


def test_what_a_server_sent_reaches_the_tab_and_the_report_escaped():
    """A probe's reasons may quote the server (its queue, its name): in the tab's HTML, in its rows and in
    the report, the text is there, escaped, and no element of it is."""
    outcome = Outcome(f"e2e_ms=60 {HOSTILE}", 0.99, 0.05)
    outcome.probes.append(Probe(1, 50.0, seconds=1, requests=10, good=10, scheduled=10, sent=10, passed=True))
    outcome.probes.append(
        Probe(2, 100.0, seconds=1, requests=10, good=5, scheduled=10, sent=10, why=[f"the server said {HOSTILE}"])
    )
    outcome.ended = "converged"
    shape = FakeShape(outcome)
    escaped = "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"
    for html in (panel.fragment(shape), panel.report_section(shape, "poolbench-capacity")):
        assert "<img" not in html and 'onerror="' not in html, html
        assert escaped in html
    outcome.ended = None
    shape._driver = object()  # a search under way: its status line, not the answer
    live = panel.fragment(shape)
    assert "<img" not in live and "Probe 3: 75.0 requests/s, measuring." in live
    report = panel.report_section(shape, "poolbench-capacity")  # the web UI's report, during the search
    assert "Capacity: 50.0 requests/s" not in report and "The search is under way: 2 probes so far." in report


def test_a_search_started_again_is_not_ended_by_the_driver_it_replaced():
    """Locust's master calls reset_time twice at a start (start_shape, then runner.start), the second time
    after the first tick spawned the driver: a driver already running when it is replaced must not mark
    the new search done (a web UI search on a master then stopped after one second, with no probe)."""
    parsed = options("--find-capacity", "--slo", "e2e_ms=60", "--warmup", "60", "-u", "4", "--headless")
    env = Environment(user_classes=[], parsed_options=parsed, events=Events())
    shape = CapacityShape(env, Settings.from_options(parsed))
    shape.reset_time()
    assert shape.tick() == (4, 4.0)  # the driver is spawned
    gevent.sleep(0.05)  # and runs: it waits out the warm-up
    assert shape.running
    shape.reset_time()  # runner.start
    gevent.sleep(0.05)  # the replaced driver ends
    assert not shape.done and shape.tick() == (4, 4.0)
    shape.finish()
