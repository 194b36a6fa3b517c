"""Goodput: the requests that met every objective of --slo, counted as a person would, and its check."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from poolbench_locust.metrics.collector import PoolingStats
from poolbench_locust.metrics.goodput import Slo, parse_slo
from poolbench_locust.metrics.table import rows
from poolbench_locust.options import options_error
from poolbench_locust.users import EmbeddingsUser
from tests.support.harness import Run
from tests.support.locust_run import LOAD, csv_rows, run_locust

STOP = ("--stop-timeout", "5")  # requests in flight at the end finish
SLO = "e2e_ms=400,ttfb_ms=150"
# (mock controls, times sent, meets the SLO). A request that meets it does so with 130 ms to spare,
# and a crowded machine only makes requests slower, so none of them can land on the other side.
CASES = (
    ({}, 4, True),  # answered at once
    ({"x-mock-ttfb-ms": "20", "x-mock-body-ms": "80"}, 3, True),  # about 100 ms in all
    ({"x-mock-ttfb-ms": "250"}, 2, False),  # headers too late, though under the e2e bound
    ({"x-mock-ttfb-ms": "10", "x-mock-body-ms": "600"}, 2, False),  # body too slow
    ({"x-mock-fault": "status-503"}, 3, False),  # fast, but a failure never counts
    ({"x-mock-fault": "fewer-embeddings"}, 2, False),  # a 200 whose answer failed its checks
)


def test_goodput_counts_what_a_hand_count_of_the_requests_gives(mock_server):
    stats = PoolingStats()
    stats.slo = parse_slo(SLO)
    met_requests = met_tokens = sent = 0
    for headers, times, meets in CASES:
        run = Run(EmbeddingsUser, mock_server.url, "--batch-size", "2", "--input-len", "5", mock_headers=headers)
        run.env.events.request.add_listener(stats.on_request)
        for _ in range(times):
            event = run.one()
            sent += 1
            if meets:
                assert event["exception"] is None, event["exception"]
                met_requests += 1
                met_tokens += event["context"]["input_tokens"]
    assert met_requests == 7 and met_tokens > 0
    served = mock_server.stats()
    assert served["requests"] == sent
    aggregated = rows(stats)[-1]
    assert aggregated["Request Count"] == sent and aggregated["Failure Count"] == 5
    assert aggregated["SLO Met"] == stats.total.good_requests == met_requests
    assert stats.total.good_input_tokens == met_tokens
    assert aggregated["Goodput Requests/s"] == round(stats.per_second(stats.total, met_requests), 1) > 0


def test_a_request_without_a_time_to_headers_meets_no_bound_on_it():
    slo = Slo(ttfb_ms=100.0, transfer_ms=50.0)
    assert slo.met(80.0, {"ttfb_ms": 40.0})
    assert not slo.met(80.0, {})
    assert not slo.met(120.0, {"ttfb_ms": 40.0, "queue_ms": 10.0})  # transfer 70 ms
    assert Slo(e2e_ms=100.0).met(100.0, {}) and not Slo(e2e_ms=100.0).met(100.5, {})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("e2e=300", "KEY one of e2e_ms, ttfb_ms, transfer_ms (or the answers' cosine=X"),
        ("e2e_ms=0", "e2e_ms must be a number of ms > 0, got '0'"),
        ("e2e_ms=nan", "e2e_ms must be a number of ms > 0, got 'nan'"),
        ("e2e_ms=300,e2e_ms=200", "e2e_ms is given twice"),
        ("ttfb_ms", "KEY=MS pairs"),
    ],
)
def test_a_bad_slo_stops_the_run_at_start_naming_the_option(text, message):
    result = run_locust("locustfiles/embeddings.py", "--slo", text, run_time="1s")
    assert result.returncode == 2
    assert "argument --slo: " in result.stderr and message in result.stderr, result.stderr[-1000:]


def test_a_goodput_floor_without_an_slo_stops_the_run_at_start(mock_server):
    floor = ["--check-min-goodput", "1"]
    result = run_locust("locustfiles/embeddings.py", *floor, host=mock_server.url, run_time="1s")
    assert result.returncode == 1
    assert "--check-min-goodput: goodput counts the requests that met --slo: give --slo too" in result.stderr
    assert mock_server.stats()["requests"] == 0


def test_goodput_is_in_the_csv_the_console_and_the_html_report_and_names_its_floor(mock_server, tmp_path):
    report, prefix = tmp_path / "report.html", tmp_path / "run"
    slo = ["--slo", "e2e_ms=20000", "--check-min-goodput", "100000000"]
    outputs = ["--csv", str(prefix), "--html", str(report)]
    result = run_locust(
        "locustfiles/embeddings.py", *LOAD, *STOP, *slo, *outputs, users=2, requests=20, host=mock_server.url
    )
    assert result.returncode == 3
    assert re.search(
        r"Check failed: --check-min-goodput 100000000: goodput was [\d.]+ requests/s "
        r"\(\d+ of \d+ requests met --slo e2e_ms=20000\)",
        result.stderr,
    )
    assert "Goodput: successful requests that met every objective of --slo e2e_ms=20000" in result.stderr
    aggregated = csv_rows(Path(f"{prefix}_pooling.csv"))["Aggregated"]
    # The mock answers at once: only a machine stalled for 20 s could make a request miss.
    assert int(aggregated["SLO Met"]) == mock_server.stats()["ok"] > 0
    page = report.read_text()
    assert "<th>Goodput Requests/s</th>" in page and "--slo e2e_ms=20000" in page


@pytest.mark.parametrize(
    ("slo", "floor", "error"),
    [
        ("e2e_ms=300", "5", None),
        ("", None, None),
        ("e2e_ms=abc", None, "--slo: e2e_ms must be a number of ms > 0, got 'abc'"),
        ("", "5", "--check-min-goodput: goodput counts the requests that met --slo: give --slo too"),
    ],
)
def test_the_web_uis_text_is_checked_at_start_like_the_command_line(slo, floor, error):
    """The web UI's form hands the values over as text, unchecked: the start check (every option and every
    rule between them) reads them so."""
    assert options_error(SimpleNamespace(slo=slo, check_min_goodput=floor)) == error
