"""Charts: the history's current-window percentiles, the SVG drawing, the web UI's routes on a local
runner and on a master, the HTML report, the sweep's knee image and poolbench-plot."""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from locust.env import Environment
from locust.event import Events

from devsupport.ports import free_port
from poolbench_locust import EmbeddingsUser, locust_pages
from poolbench_locust.charts import chart_tabs, plot, svg
from poolbench_locust.charts.figures import POOLING_CHARTS, knee_charts
from poolbench_locust.metrics import pooling_reports
from poolbench_locust.metrics.collector import PoolingStats
from poolbench_locust.metrics.history import MAX_SAMPLES, WINDOW_COLUMNS, WINDOW_SECONDS, history_of, take_sample
from tests.support import zygote
from tests.support.harness import options
from tests.support.locust_run import ROOT, locust_argv, run_locust

CONTEXT = {"sequences": 2, "input_tokens": 10, "token_source": "server"}


def request(stats: PoolingStats, e2e_ms: float, ttfb_ms: float, name: str = "/v1/embeddings") -> None:
    stats.on_request(name, e2e_ms, 100, None, {**CONTEXT, "ttfb_ms": ttfb_ms})


def bare_environment() -> Any:
    return SimpleNamespace(parsed_options=argparse.Namespace(), runner=None)


def polylines(chart: str) -> list[list[tuple[float, float]]]:
    return [
        [tuple(map(float, p.split(","))) for p in points.split()]
        for points in re.findall(r'<polyline[^>]* points="([^"]*)"', chart)
    ]


# ---- the history's window ------------------------------------------------------------------------


def test_a_sample_holds_the_percentiles_of_the_last_ten_seconds_not_of_the_run():
    environment, stats = bare_environment(), PoolingStats()
    for _ in range(30):  # 30 ticks of fast requests
        for _ in range(20):
            request(stats, 100, 40)
        take_sample(environment, stats)
    for tick in range(WINDOW_SECONDS):  # then the server slows down
        for _ in range(20):
            request(stats, 500, 300)
        sample = take_sample(environment, stats)
        if tick == 0:  # one tick in: the window is still mostly fast
            assert sample["rows"][-1]["Current E2E 50%"] == pytest.approx(100, rel=1e-3)
    row = sample["rows"][-1]
    assert row["Current E2E 50%"] == row["Current E2E 95%"] == pytest.approx(500, rel=1e-3)
    assert row["Current TTFB 50%"] == pytest.approx(300, rel=1e-3)
    assert row["E2E 50%"] == pytest.approx(100, rel=1e-3), "the run's own median stays with the 600 fast requests"
    assert set(WINDOW_COLUMNS) <= set(row)


def test_the_window_is_empty_when_no_request_ended_in_it_and_restarts_after_a_reset():
    environment, stats = bare_environment(), PoolingStats()
    request(stats, 200, 50)
    for _ in range(WINDOW_SECONDS + 1):
        sample = take_sample(environment, stats)
    assert sample["rows"][-1]["Current E2E 50%"] is None
    assert sample["rows"][-1]["E2E 50%"] == pytest.approx(200, rel=1e-3)
    stats.reset()
    request(stats, 900, 100)
    assert take_sample(environment, stats)["rows"][-1]["Current E2E 50%"] == pytest.approx(900, rel=1e-3)


def test_the_window_of_a_master_follows_the_merged_reports_of_its_workers():
    environment, master = bare_environment(), PoolingStats()
    workers = [PoolingStats(), PoolingStats()]
    for tick in range(WINDOW_SECONDS + 2):
        for i, worker in enumerate(workers):
            for _ in range(5):
                request(worker, 100 if tick < 2 else 300 + 100 * i, 20)
            master.merge_report(worker.take_report())
        sample = take_sample(environment, master)
    # the last 10 ticks: half the requests at 300 ms (worker 0), half at 400 ms (worker 1)
    assert sample["rows"][-1]["Current E2E 50%"] == pytest.approx(300, rel=1e-3)
    assert sample["rows"][-1]["Current E2E 95%"] == pytest.approx(400, rel=1e-3)


def test_the_window_keeps_a_bounded_number_of_histograms_and_only_the_buckets_its_ticks_hit():
    environment, stats = bare_environment(), PoolingStats()
    window = history_of(environment).window
    for t in range(200):
        request(stats, 1 + t, 1, name=f"/route{t % 3}")  # a new bucket every tick: 200 in the end
        take_sample(environment, stats)
        # each name (3, and the total) and timing (2): its last copy and WINDOW_SECONDS ticks' additions
        assert window.held() <= 4 * 2 * (1 + WINDOW_SECONDS)
    sparse = [dumps[key] for ticks in window._added.values() for dumps in list(ticks)[1:] for key in dumps]
    assert sparse and max(len(d["counts"]) for d in sparse) <= 1, "a tick's addition holds the buckets it hit"


# ---- the drawing ---------------------------------------------------------------------------------


def test_a_chart_draws_only_finite_numbers_and_escapes_every_text():
    hostile = "<script>alert(1)</script>"
    series = svg.Series(hostile, [(0, 1), (1, float("nan")), (2, float("inf")), (3, "x"), (4, None), (5, 3)])
    chart = svg.line_chart(hostile, [series], y_unit=hostile)
    assert "<script" not in chart and "nan" not in chart.lower() and "inf" not in chart.lower()
    assert [len(line) for line in polylines(chart)] == [2]
    assert svg.line_chart("empty", [svg.Series("a", [])]).count("no data yet") == 1


def test_a_long_run_draws_at_most_two_points_a_pixel_and_keeps_its_spike():
    points = [(float(t), 10.0) for t in range(100_000)]
    points[54_321] = (54_321.0, 5000.0)
    chart = svg.line_chart("long", [svg.Series("p95", points)])
    (line,) = polylines(chart)
    assert len(line) <= 2 * svg.WIDTH
    heights = sorted({y for _, y in line})
    assert len(heights) == 2 and heights[1] - heights[0] > 100, "the one spike is drawn, far above the rest"


# ---- the web UI ----------------------------------------------------------------------------------


def web_environment(runner_kind: str = "local") -> tuple[Environment, Any]:
    env = Environment(
        user_classes=[EmbeddingsUser], parsed_options=options(), host="http://127.0.0.1:9", events=Events()
    )
    runner = env.create_master_runner("127.0.0.1", 0) if runner_kind == "master" else env.create_local_runner()
    web_ui = env.create_web_ui("127.0.0.1", 0, delayed_start=True)
    pooling_reports.on_init(environment=env, runner=runner, web_ui=web_ui)
    chart_tabs.on_init(environment=env, runner=runner, web_ui=web_ui)
    locust_pages.on_init(environment=env, runner=runner, web_ui=web_ui)
    return env, runner


@pytest.fixture
def plain_sys_argv(monkeypatch):
    """Locust's index page parses sys.argv for the form's defaults: pytest's arguments are not its."""
    monkeypatch.setattr(sys, "argv", ["locust"])


@pytest.mark.parametrize("runner_kind", ["local", "master"])
def test_the_web_ui_serves_the_history_and_draws_it(runner_kind, plain_sys_argv):
    env, runner = web_environment(runner_kind)
    try:
        stats, history = pooling_reports.stats_of(env), history_of(env)
        worker = PoolingStats()
        for tick in range(3):  # three ticks, seven requests each: on the workers of a master, or here
            for _ in range(7):
                request(worker if runner_kind == "master" else stats, 120, 30)
            if runner_kind == "master":
                report = {pooling_reports.STATS_REPORT_KEY: worker.take_report()}
                env.events.worker_report.fire(client_id="w1", data=report)
            history.add({**take_sample(env, stats), "time": 1_000_000.0 + tick})  # a second apart
        client = env.web_ui.app.test_client()
        served = client.get("/pooling/history").get_json()
        assert served["interval"] == 1 and len(served["samples"]) == 3
        assert served["samples"][-1]["rows"][-1]["Input Tokens"] == 3 * 7 * 10
        assert served["samples"][-1]["rows"][-1]["Current E2E 50%"] == 120
        fragment = client.get("/pooling/charts").get_data(as_text=True)
        assert fragment.count("<svg") == len(POOLING_CHARTS)
        assert all(len(line) == 3 for line in polylines(fragment)), "a point per sample in every line"
        page = client.get("/").get_data(as_text=True)
        assert "./pooling/charts" in page and 'get("tab") !== "pooling"' in page
    finally:
        runner.quit()


def test_the_web_ui_report_holds_the_charts_before_the_pooling_table(plain_sys_argv):
    env, runner = web_environment()
    try:
        request(pooling_reports.stats_of(env), 80, 20)
        history_of(env).add(take_sample(env, pooling_reports.stats_of(env)))
        page = env.web_ui.app.test_client().get("/stats/report").get_data(as_text=True)
        assert 0 < page.index('id="poolbench-charts"') < page.index('id="poolbench-pooling"')
    finally:
        runner.quit()


# ---- a whole run: HTML report, sweep image, poolbench-plot ---------------------------------------


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory, mock_server_factory):
    mock = mock_server_factory("--ttfb-ms", "5", "--body-ms", "5")
    out = tmp_path_factory.mktemp("sweep")
    prefix, report = out / "run", out / "report.html"
    result = run_locust(
        "locustfiles/embeddings.py",
        *("--only-summary", "--input-len", "6", "--sweep-users", "1,2,4", "--sweep-step-time", "3"),
        *("--html", str(report)),
        host=mock.url,
        csv=prefix,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return prefix, report


def history_rows(prefix: Path) -> list[dict[str, str]]:
    with open(f"{prefix}_pooling_history.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_the_html_report_holds_the_charts_of_the_run_and_the_knee(sweep_run):
    prefix, report = sweep_run
    page = report.read_text()
    section = re.search(r'<section id="poolbench-charts".*?</section>', page, re.S)
    assert section and page.index('id="poolbench-charts"') < page.index('id="poolbench-pooling"')
    charts = re.findall(r"<svg.*?</svg>", section.group(0), re.S)
    assert len(charts) == len(POOLING_CHARTS) + 2  # and the knee against requests/s and tokens/s
    rows = history_rows(prefix)
    tokens = [float(r["Current Input Tokens/s"]) for r in rows]
    (line,) = polylines(charts[0])
    assert len(line) == len(tokens) >= 6, "every second of the history is a point of the chart"
    assert max(tokens) > 0
    with open(f"{prefix}_sweep.csv", newline="") as f:
        steps = list(csv.DictReader(f))
    assert len(steps) == 3
    for knee in charts[-2:]:
        assert knee.count("<circle") == 2 * len(steps), "p50 and p99 of every step, the last one too"


def test_the_sweep_image_is_written_beside_its_csv_with_every_step(sweep_run):
    prefix, _ = sweep_run
    image = Path(f"{prefix}_sweep.svg").read_text()
    assert image.startswith("<svg") and image.count("<circle") == 2 * 2 * 3
    assert "E2E against requests/s" in image and "E2E against input tokens/s" in image


def test_the_history_csv_carries_the_current_window_percentiles(sweep_run):
    prefix, _ = sweep_run
    rows = history_rows(prefix)
    assert set(WINDOW_COLUMNS) <= set(rows[0])
    assert any(r["Current E2E 50%"] for r in rows)
    assert all(float(r["Current E2E 50%"]) >= 10 for r in rows if r["Current E2E 50%"]), "the mock takes 10 ms"


def test_poolbench_plot_turns_the_csv_files_into_the_same_pictures(sweep_run, tmp_path):
    prefix, report = sweep_run
    copy = tmp_path / "again"
    for kind in ("pooling_history", "stats_history", "sweep"):
        Path(f"{copy}_{kind}.csv").write_text(Path(f"{prefix}_{kind}.csv").read_text())
    result = subprocess.run(
        [sys.executable, "-m", "poolbench_locust.charts.plot", str(copy)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [f"{copy}_pooling_history.svg", f"{copy}_stats_history.svg", f"{copy}_sweep.svg"]
    pooling = Path(f"{copy}_pooling_history.svg").read_text()
    assert pooling.count("<svg") == 1 + len(POOLING_CHARTS)
    live = re.findall(r"<svg.*?</svg>", report.read_text(), re.S)
    assert polylines(pooling) == [p for chart in live[-len(POOLING_CHARTS) - 2 : -2] for p in polylines(chart)]
    assert Path(f"{copy}_sweep.svg").read_text() == Path(f"{prefix}_sweep.svg").read_text()
    assert "Requests/s (Locust)" in Path(f"{copy}_stats_history.svg").read_text()


def test_poolbench_plot_draws_a_hostile_csv_safely_and_refuses_a_file_it_cannot_read(tmp_path, capsys):
    prefix = tmp_path / "bad"
    with open(f"{prefix}_sweep.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["Step", "Requests/s", "Input Tokens/s", "E2E 50%", "E2E 99%"])
        writer.writerow([1, "nan", "<script>", "1e999", ""])
        writer.writerow([2, 10, 1000, 5, 9])
        writer.writerow([3, 20, 2000, 8, 30, "extra", "cells"])
    assert plot.main([str(prefix)]) == 0
    image = Path(f"{prefix}_sweep.svg").read_text()
    assert "<script" not in image and "nan" not in image and image.count("<circle") == 2 * 2 * 2

    Path(f"{prefix}_pooling_history.csv").write_bytes(b"\xff\xfe garbage")
    assert plot.main([str(prefix)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"poolbench-plot: {prefix}_pooling_history.csv: not UTF-8 text (invalid start byte at byte 0)"]

    assert plot.main([str(tmp_path / "nothing")]) == 2
    assert "no " in capsys.readouterr().err


def test_a_history_longer_than_its_bound_still_draws_within_the_bound():
    environment = bare_environment()
    history = history_of(environment)
    for t in range(MAX_SAMPLES * 3):
        sample = {"time": float(t), "user_count": 1, "rows": [{"Current Input Tokens/s": t % 97}]}
        history.add(sample)
    from poolbench_locust.charts.pages import live_fragment

    environment.shape_class = None
    fragment = live_fragment(environment)
    assert len(history.samples) <= MAX_SAMPLES
    assert all(len(line) <= 2 * svg.WIDTH for line in polylines(fragment))
    # What /pooling/history serves is plain JSON: it comes back as it went (a truthy json.dumps could not fail).
    assert json.loads(json.dumps(history.samples)) == list(history.samples)


def test_a_master_draws_live_the_figures_its_worker_counts(mock_server_factory):
    mock = mock_server_factory("--ttfb-ms", "5", "--body-ms", "5")
    port, web_port = str(free_port()), free_port()
    worker = zygote.popen(
        locust_argv(
            "locustfiles/embeddings.py", *("--input-len", "6", "--worker", "--master-port", port), host=mock.url
        ),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    master = zygote.popen(
        locust_argv(
            "locustfiles/embeddings.py",
            *("--input-len", "6", "--master", "--master-bind-port", port, "--expect-workers", "1"),
            *("--web-host", "127.0.0.1", "--web-port", str(web_port), "--autostart", "--autoquit", "1"),
            users=2,
            run_time="25s",
            host=mock.url,
        ),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{web_port}"
    samples: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                samples = requests.get(f"{base}/pooling/history", timeout=10).json()["samples"]
            except (requests.ConnectionError, ValueError):
                continue
            if sum(1 for s in samples if s["rows"][-1]["Current Input Tokens/s"]) >= 3:
                break
        fragment = requests.get(f"{base}/pooling/charts", timeout=5).text
    finally:
        for proc in (master, worker):
            proc.terminate()
        for proc in (master, worker):
            proc.wait(timeout=30)
    tokens = [s["rows"][-1]["Current Input Tokens/s"] for s in samples]
    assert sum(1 for t in tokens if t) >= 3, tokens
    charts = re.findall(r"<svg.*?</svg>", fragment, re.S)
    assert len(charts) == len(POOLING_CHARTS)
    (line,) = polylines(charts[0])
    assert len(line) >= len(samples) >= 3, "the master draws every second it sampled"


def test_the_knee_labels_each_step_and_fits_its_x_axis_to_the_throughputs_reached():
    steps = [
        {"Step": n, "Target": users, "Requests/s": rate, "Input Tokens/s": rate * 100, "E2E 50%": p50, "E2E 99%": p99}
        for n, users, rate, p50, p99 in ((1, 8, 410.0, 20, 30), (2, 16, 780.0, 22, 41), (3, 32, 801.0, 60, 190))
    ]
    chart = knee_charts(steps)[0]
    assert re.findall(r'font-size="10" fill="[^"]+">([^<]+)</text>', chart) == ["#1 8", "#2 16", "#3 32"]
    x_ticks = [float(t) for t in re.findall(r'y="214" text-anchor="middle">([\d.]+)</text>', chart)]
    assert x_ticks and min(x_ticks) >= 380, x_ticks  # starts near the first step, not at 0
    circles = [float(x) for x in re.findall(r'<circle cx="([\d.]+)"', chart)]
    assert min(circles) > svg.MARGIN_LEFT + 10 and max(circles) < svg.WIDTH - svg.MARGIN_RIGHT - 10  # not on the frame
    assert "E2E p50" in chart and "E2E p99" in chart and ">ms<" in chart  # legend and unit
