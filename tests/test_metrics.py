"""Pooling metrics where Locust reports: CSV on a master with workers, --processes, the web UI, checks."""

from __future__ import annotations

import csv
import re
import subprocess
import time
from types import SimpleNamespace

import pytest
import requests
from locust.stats import CURRENT_RESPONSE_TIME_PERCENTILE_WINDOW

from devsupport.ports import free_port
from poolbench_locust.metrics import collector
from poolbench_locust.metrics.collector import PoolingStats
from poolbench_locust.metrics.table import rows
from tests.support import zygote
from tests.support.locust_run import LOAD, ROOT, locust_argv, run_locust
from tests.support.pooling_csv import assert_pooling_csv_matches


def test_master_and_two_workers_count_exactly_what_the_mock_served(mock_server_factory, tmp_path):
    """Locust deals the two classes' users to the two workers in turn, so each worker runs one class: the mock
    answers in 100 ms, so that the 60 requests take 2 s, a worker that started late still sends (at the mock's
    speed, a floor run's rerank worker ended all 50 before the embeddings worker sent one)."""
    mock_server = mock_server_factory("--ttfb-ms", "100")
    prefix = tmp_path / "dist"
    port = str(free_port())
    workers = [
        zygote.popen(
            locust_argv("locustfiles/demo.py", *LOAD, *("--worker", "--master-port", port), host=mock_server.url),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    try:
        result = run_locust(
            "locustfiles/demo.py",
            *LOAD,
            *("--master", "--master-bind-port", port, "--expect-workers", "2", "--stop-timeout", "5"),
            host=mock_server.url,
            users=6,
            requests=60,
            csv=prefix,
            timeout=90,
        )
    finally:
        for w in workers:
            w.wait(timeout=30)
    assert result.returncode == 0, result.stderr[-3000:]
    pooling = assert_pooling_csv_matches(prefix, mock_server.stats())
    assert set(pooling) == {"/v1/embeddings", "/rerank", "Aggregated"}
    assert "Pooling statistics" in result.stderr


def test_processes_two_count_exactly_what_the_mock_served(mock_server, tmp_path):
    prefix = tmp_path / "procs"
    result = run_locust(
        "locustfiles/demo.py",
        *LOAD,
        *("--processes", "2", "--stop-timeout", "5"),
        host=mock_server.url,
        users=6,
        requests=50,
        csv=prefix,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert_pooling_csv_matches(prefix, mock_server.stats())
    with open(f"{prefix}_pooling_history.csv") as f:
        history = list(csv.DictReader(f))
    assert history and all(row["Name"] == "Aggregated" for row in history)


def test_one_process_html_report_holds_the_pooling_table(mock_server, tmp_path):
    prefix, report = tmp_path / "one", tmp_path / "report.html"
    result = run_locust(
        "locustfiles/embeddings.py",
        *LOAD,
        *("--stop-timeout", "5", "--html", str(report)),
        host=mock_server.url,
        users=2,
        requests=20,
        csv=prefix,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    pooling = assert_pooling_csv_matches(prefix, mock_server.stats())
    page = report.read_text()
    section = re.search(r'<section id="poolbench-pooling".*?</section>', page, re.S)
    assert section, "pooling table missing from the HTML report"
    cells = re.findall(r"<tr>(.*?)</tr>", section.group(0), re.S)
    aggregated = next(re.findall(r"<td>(.*?)</td>", c) for c in cells if "<td>Aggregated</td>" in c)
    header = re.findall(r"<th>(.*?)</th>", section.group(0))
    assert aggregated[header.index("Input Tokens")] == pooling["Aggregated"]["Input Tokens"]


def test_web_ui_shows_the_pooling_rows_live(mock_server):
    port = free_port()
    proc = zygote.popen(
        locust_argv(
            "locustfiles/embeddings.py",
            *(*LOAD, "--web-host", "127.0.0.1", "--web-port", str(port), "--autostart"),
            users=2,
            run_time="30s",
            host=mock_server.url,
        ),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        rows: list[dict] = []
        while time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                data = requests.get(f"{base}/stats/requests", timeout=10).json()
            except (requests.ConnectionError, ValueError):
                continue
            extended = {e["key"]: e["data"] for e in data.get("extended_stats", [])}
            rows = extended.get("pooling", [])
            if rows and rows[-1]["input_tokens"] > 0:
                break
        assert rows and rows[-1]["name"] == "Aggregated" and rows[-1]["input_tokens"] > 0, rows
        as_json = requests.get(f"{base}/pooling/stats", timeout=10).json()
        assert as_json[-1]["Name"] == "Aggregated" and as_json[-1]["Request Count"] > 0
        as_csv = requests.get(f"{base}/pooling/csv", timeout=10).text
        assert as_csv.splitlines()[0].startswith("Type,Name,Request Count,Failure Count,Input Tokens")
        page = requests.get(base, timeout=10).text
        assert '"extended_tabs": [{"key": "pooling", "title": "Pooling"}]' in page or "Pooling" in page
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.parametrize(
    ("check", "passes"),
    [
        (["--check-fail-ratio", "0.01"], True),
        (["--check-min-tokens-per-s", "1"], True),
        (["--check-min-tokens-per-s", "100000000"], False),
        (["--check-p95-ms", "0"], False),
        (["--check-min-goodput", "1", "--slo", "e2e_ms=20000"], True),
        (["--check-min-goodput", "100000000", "--slo", "e2e_ms=20000"], False),
    ],
)
def test_checks_set_the_exit_code(mock_server_factory, check, passes):
    # 2 ms to the headers: a mock answering in under 0.5 ms has a p95 Locust rounds to 0, which no
    # --check-p95-ms can exceed.
    mock_server = mock_server_factory("--ttfb-ms", "2")
    result = run_locust("locustfiles/embeddings.py", *LOAD, *check, host=mock_server.url, users=2, run_time="2s")
    if passes:
        assert result.returncode == 0, result.stderr[-2000:]
        assert "Check failed" not in result.stderr
    else:
        assert result.returncode == 3
        assert f"Check failed: {check[0]} {check[1]}" in result.stderr


def test_failed_check_of_fail_ratio_names_the_counts(mock_server_factory):
    mock = mock_server_factory("--fault", "status-503=0.5", "--seed", "3")
    result = run_locust(
        "locustfiles/embeddings.py", *LOAD, "--check-fail-ratio", "0.1", host=mock.url, users=2, requests=20
    )
    assert result.returncode == 3
    assert re.search(r"Check failed: --check-fail-ratio 0.1: \d+ of \d+ failed", result.stderr)


@pytest.mark.parametrize(("check", "code"), [((), 1), (("--check-fail-ratio", "0.9"), 0)])
def test_a_passing_fail_ratio_decides_the_exit_code_not_one_failed_request(mock_server_factory, check, code):
    """Without --check-fail-ratio, Locust's --exit-code-on-error (1) applies to any failed request; with it,
    a ratio that passes exits 0 although some requests failed (docs/gate-ci.md)."""
    mock = mock_server_factory("--fault", "status-503=0.3", "--seed", "3")
    result = run_locust("locustfiles/embeddings.py", *LOAD, *check, host=mock.url, users=2, requests=30)
    assert re.search(r"\d+\s+POST /v1/embeddings: HTTP 503", result.stderr), result.stderr[
        -3000:
    ]  # some failed: Locust's error report
    assert "Check failed" not in result.stderr
    assert result.returncode == code, result.stderr[-2000:]


def test_per_second_keeps_only_the_current_window_on_the_master_and_in_one_process(monkeypatch):
    """Two minutes of traffic, on a fake clock: the per-second rates keep only the seconds Locust keeps
    of its cached response times (its current window + 10 s), and the current rates stay those of its window."""
    kept = CURRENT_RESPONSE_TIME_PERCENTILE_WINDOW + 10
    clock = [1_000_000.0]
    monkeypatch.setattr(collector, "time", SimpleNamespace(time=lambda: clock[0]))
    one_process, worker, master = PoolingStats(), PoolingStats(), PoolingStats()
    tokens_at: dict[int, int] = {}
    seconds = 120
    for step in range(seconds * 4):  # four requests a second, each second its own token count
        clock[0] = 1_000_000.0 + step / 4
        second = int(clock[0])
        tokens = 10 + second % 7
        tokens_at[second] = tokens_at.get(second, 0) + tokens
        for stats in (one_process, worker):
            # a token-level answer: 3 vectors per sequence; a 1,000-byte body; 5 image tokens from the server
            context = {"sequences": 2, "input_tokens": tokens, "request_bytes": 1000, "vectors": 6, "image_tokens": 5}
            stats.on_request("/v1/embeddings", 5.0, 100, None, context)
        if step % 12 == 11:  # Locust's report interval: 3 s
            master.merge_report(worker.take_report())
    master.merge_report(worker.take_report())

    last = int(clock[0])
    window = range(last - 12, last - 2)  # Locust's current_rps window
    expected = sum(tokens_at[t] for t in window) / len(window)
    for stats in (one_process, master):
        for entry in (stats.entries["/v1/embeddings"], stats.total):
            assert len(entry.per_second) <= kept + 1 < seconds, sorted(entry.per_second)
            assert min(entry.per_second) >= last - kept
            assert entry.current(0, stats.start_time) == expected
            assert entry.current(1, stats.start_time) == 8.0  # sequences/s
            assert entry.current(2, stats.start_time) == 400.0  # bytes/s
            assert entry.current(3, stats.start_time) == 4000.0  # bytes sent/s
            assert entry.current(4, stats.start_time) == 24.0  # vectors/s
            assert entry.requests == seconds * 4 and entry.input_tokens == sum(tokens_at.values())
        total = rows(stats)[-1]
        assert (total["Sent Bytes"], total["Current Sent MB/s"]) == (seconds * 4 * 1000, 0.004)
        assert (total["Vectors"], total["Current Vectors/s"]) == (seconds * 4 * 6, 24.0)
        assert total["Image Tokens"] == seconds * 4 * 5


def test_per_second_read_mid_second_counts_each_request_once(monkeypatch):
    """The web UI, the history sampler and a worker's report read the per-second figures while a second
    is still running, and requests of that second keep coming: each request counts once in its second,
    failed ones with their bytes but no tokens, on the request's entry and on the total."""
    clock = [2_000_000.0]
    monkeypatch.setattr(collector, "time", SimpleNamespace(time=lambda: clock[0]))
    stats = PoolingStats()
    expected: dict[int, list[int]] = {}
    for step in range(40):  # ten requests a second; every third one failed
        clock[0] = 2_000_000.0 + step / 10
        failed = step % 3 == 0
        context = {"sequences": 2, "input_tokens": 7, "request_bytes": 300}
        stats.on_request("/v1/embeddings", 5.0, 100, "HTTP 503" if failed else None, context)
        second = expected.setdefault(int(clock[0]), [0, 0, 0, 0, 0])
        for i, amount in enumerate((0, 0, 100, 300, 0) if failed else (7, 2, 100, 300, 2)):
            second[i] += amount
        if step % 4 == 1:  # a reader in the middle of a second
            assert stats.total.per_second[int(clock[0])] == second
    for entry in (stats.entries["/v1/embeddings"], stats.total):
        assert entry.per_second == expected
