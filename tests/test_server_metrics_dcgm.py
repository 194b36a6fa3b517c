"""--server-metrics with an NVIDIA dcgm-exporter beside the server: each GPU's busy %, power and memory, and
the energy of the measured window per million input tokens, equal to the power the page draws times the
time over the tokens; a hostile page's values are left out, never figures."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from devsupport.ports import free_port
from poolbench_locust.servermetrics import flavors, gpu
from poolbench_locust.servermetrics.deltas import MAX_EACH, ServerView
from poolbench_locust.servermetrics.parse import reading
from poolbench_locust.servermetrics.report import console_lines, server_rows
from tests.support import dcgm_page
from tests.support.hostile import server_process
from tests.support.locust_run import LOAD, csv_rows, run_locust

NO_ROUTES: frozenset[str] = frozenset()


def observe(view: ServerView, text: str, at: float) -> None:
    view.observe(reading(text, NO_ROUTES), at)


def test_a_dcgm_page_is_told_by_its_names_and_a_gpu_stays_one_series_when_pod_labels_come():
    view = ServerView("http://dcgm:9400/metrics")
    observe(view, dcgm_page.page(0.0), 100.0)
    later = reading(dcgm_page.page(10.0, pod=True), NO_ROUTES)
    assert later.flavor is flavors.DCGM
    assert set(later.values["energy_mj"]) == set(reading(dcgm_page.page(0.0), NO_ROUTES).values["energy_mj"])
    view.observe(later, 110.0)
    # 250 W for 10 s; the pod labels added at the second scrape are the same GPUs, not new series counted whole
    assert view.counters["energy_mj"] == pytest.approx(250 * 10 * 1000)
    assert view.resets == 0


def test_gpu_figures_sum_the_energy_and_show_each_gpus_utilisation():
    view = ServerView("http://dcgm:9400/metrics")
    for second in (0.0, 5.0, 10.0):
        observe(view, dcgm_page.page(second), second)
    figures = gpu.figures(view, input_tokens=2_000_000, requests=4_000)
    assert figures is not None
    assert figures.gpus == 2 and figures.energy_j == pytest.approx(2_500)
    assert figures.energy_j_per_1m_input_tokens == pytest.approx(1_250)
    assert figures.energy_j_per_1k_requests == pytest.approx(625)
    assert figures.power_mean_w == 250.0 and figures.gpu_util_mean_pct == 50.0
    assert figures.memory_used_max_mib == 32_000.0
    assert [(g.gpu.split()[0], g.gpu_util_mean_pct, g.power_mean_w) for g in figures.per_gpu] == [
        ("gpu=0", 90.0, 200.0),
        ("gpu=1", 10.0, 50.0),
    ]
    target, *each = server_rows([view])
    assert target["Kind"] == "dcgm" and target["Energy J"] == pytest.approx(2_500)
    assert target["Energy J/1M Input Tokens"] is None  # no client given: no tokens to divide by
    assert [(r["Kind"], r["GPU Util Mean"], r["Energy J"]) for r in each] == [
        ("dcgm gpu", 90.0, None),
        ("dcgm gpu", 10.0, None),
    ]


def test_other_servers_have_no_gpu_figures():
    view = ServerView("x")
    observe(view, 'vllm:prompt_tokens_total{engine="0",model_name="m"} 5\n', 0.0)
    assert gpu.figures(view, 10, 1) is None
    (row,) = server_rows([view])
    assert row["Energy J"] is None and row["GPU Util Mean"] is None


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ("DCGM_FI_DEV_GPU_UTIL", "150"),
        ("DCGM_FI_DEV_GPU_UTIL", "NaN"),
        ("DCGM_FI_DEV_POWER_USAGE", "-3"),
        ("DCGM_FI_DEV_POWER_USAGE", "1e7"),
        ("DCGM_FI_DEV_FB_USED", "+Inf"),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "-5"),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "1e300"),
    ],
)
def test_a_value_no_gpu_can_have_is_left_out_and_counted(bad, field):
    lines = [
        'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 40\nDCGM_FI_DEV_POWER_USAGE{gpu="0"} 100\n',
        'DCGM_FI_DEV_FB_USED{gpu="0"} 10\n',
    ]
    text = "".join(lines) + f'{bad}{{gpu="1"}} {field}\n'
    view = ServerView("x")
    observe(view, text, 0.0)
    observe(view, text, 1.0)
    assert view.rejected == 2
    figures = gpu.figures(view, 10, 1)
    assert figures is not None and figures.gpus == 1  # the bad GPU's one value made no series
    assert figures.gpu_util_max_pct == 40.0 and figures.power_max_w == 100.0 and figures.memory_used_max_mib == 10.0
    assert figures.energy_j is None  # no counter read: no energy, not 0 J


def test_a_page_inventing_gpus_at_every_scrape_keeps_a_bounded_number():
    view = ServerView("x")
    for scrape in range(3):
        text = "".join(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{scrape}-{i}"}} 5\n' for i in range(50))
        observe(view, text, float(scrape))
    assert len(view.each["gpu_util"]) == MAX_EACH
    assert view.rejected == 150 - MAX_EACH


def test_beside_the_server_the_energy_per_million_tokens_is_the_power_times_the_time(mock_server, tmp_path):
    prefix = tmp_path / "g"
    with server_process("tests.support.dcgm_page:two_gpus") as dcgm:
        result = run_locust(
            "locustfiles/embeddings.py",
            *LOAD,
            *("--server-metrics", f"{mock_server.url}/metrics,{dcgm}/metrics"),
            *("--server-metrics-interval", "1", "--stop-timeout", "5", "--html", str(tmp_path / "g.html")),
            host=mock_server.url,
            users=2,
            run_time="4s",
            csv=prefix,
            json_result=tmp_path / "g.json",
            timeout=90,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    with Path(f"{prefix}_server_metrics.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [row["Kind"] for row in table] == ["vllm", "dcgm", "dcgm gpu", "dcgm gpu"]
    server, target, *each = table
    assert [row["Server"] for row in each] == [
        f"{dcgm}/metrics gpu={i} UUID=GPU-34319582-d595-d1c7-d1d2-17{i}bcfa61660" for i in (0, 1)
    ]
    tokens = int(csv_rows(Path(f"{prefix}_pooling.csv"))["Aggregated"]["Input Tokens"])
    requests = int(csv_rows(Path(f"{prefix}_stats.csv"))["Aggregated"]["Request Count"])
    assert tokens > 0 and int(server["Prompt Tokens"]) == tokens  # the same window as the server's
    seconds = float(target["Seconds"])
    assert seconds >= 3
    expected = dcgm_page.WATTS * seconds / tokens * 1e6
    assert float(target["Energy J/1M Input Tokens"]) == pytest.approx(expected, rel=0.05)
    assert float(target["Energy J/1k Requests"]) == pytest.approx(dcgm_page.WATTS * seconds / requests * 1e3, rel=0.05)
    assert float(target["Power Mean W"]) == 250.0 and target["GPUs"] == "2"
    assert [row["GPU Util Mean"] for row in each] == ["90.0", "10.0"]
    assert server["Energy J"] == ""  # the server's own row has no GPU figures
    (block,) = result.json()["server_metrics"]["gpus"]
    assert block["energy_j_per_1m_input_tokens"] == pytest.approx(expected, rel=0.05)
    assert block["gpu_util_mean_pct"] == 50.0 and block["power_mean_w"] == 250.0
    assert block["energy_j"] == pytest.approx(dcgm_page.WATTS * seconds, rel=0.05)
    assert [g["gpu_util_mean_pct"] for g in block["per_gpu"]] == [90.0, 10.0]
    assert "Energy of the measured window" in result.stderr and "Traceback" not in result.stderr
    assert "energy counter grew at" not in result.stderr  # the page's counter moves at every scrape
    assert "<th>Energy J/1M Input Tokens</th>" in (tmp_path / "g.html").read_text()


def test_the_console_shows_each_gpu_and_the_energy():
    view = ServerView("http://dcgm:9400/metrics")
    observe(view, dcgm_page.page(0.0), 0.0)
    observe(view, dcgm_page.page(4.0), 4.0)
    lines = console_lines(server_rows([view]), [])
    text = "\n".join(lines)
    assert "GPUs (dcgm-exporter; util in %)" in text and "1000.0" in text  # 250 W x 4 s
    gpu_lines = [line for line in lines if " gpu=" in line]
    assert len(gpu_lines) == 2 and "90.0" in gpu_lines[0] and "10.0" in gpu_lines[1]


def test_an_energy_counter_sampled_less_often_than_scraped_gets_a_note():
    view = ServerView("http://dcgm:9400/metrics")
    for second in range(7):  # dcgm-exporter's default: a new sample every 30 s, scraped every 5 s
        observe(view, dcgm_page.page(30.0 * (second // 6)), 5.0 * second)
    figures = gpu.figures(view, 1000, 10)
    assert figures is not None and figures.energy_j == pytest.approx(250 * 30)
    assert figures.energy_note is not None and "grew at 1 of 6 scrapes" in figures.energy_note
    assert "-c 1000" in figures.energy_note
    steady = ServerView("http://dcgm:9400/metrics")
    for second in range(7):
        observe(steady, dcgm_page.page(5.0 * second), 5.0 * second)
    assert gpu.figures(steady, 1000, 10).energy_note is None  # type: ignore[union-attr]


def test_two_marks_give_the_energy_and_power_between_them():
    view = ServerView("http://dcgm:9400/metrics")
    observe(view, dcgm_page.page(0.0), 0.0)
    assert gpu.mark(ServerView("x")) is None
    observe(view, dcgm_page.page(2.0), 2.0)
    start = gpu.mark(view)
    assert start is not None
    assert gpu.energy_between(start, start) is None  # no scrape between them: no figure, not 0 W
    observe(view, dcgm_page.page(6.0), 6.0)
    end = gpu.mark(view)
    assert end is not None
    joules, seconds = gpu.energy_between(start, end) or (0.0, 0.0)
    assert (joules, seconds) == (pytest.approx(1000.0), 4.0)  # 250 W for 4 s


def test_with_processes_the_master_divides_by_all_the_tokens_and_warns_of_a_slow_sampled_counter(mock_server, tmp_path):
    prefix, port = tmp_path / "p", str(free_port())
    with server_process("tests.support.dcgm_page:two_gpus", env={"DCGM_PAGE_SAMPLE_S": "3"}) as dcgm:
        result = run_locust(
            "locustfiles/embeddings.py",
            *LOAD,
            *("--processes", "2", "--master-bind-port", port, "--master-port", port),
            *("--server-metrics", f"{mock_server.url}/metrics,{dcgm}/metrics"),
            *("--server-metrics-interval", "0.5", "--stop-timeout", "5"),
            host=mock_server.url,
            users=4,
            run_time="5s",
            csv=prefix,
            timeout=90,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    with Path(f"{prefix}_server_metrics.csv").open() as f:
        server, target, *_ = csv.DictReader(f)
    tokens = int(csv_rows(Path(f"{prefix}_pooling.csv"))["Aggregated"]["Input Tokens"])
    assert tokens > 0 and int(server["Prompt Tokens"]) == tokens  # both workers' tokens, on the master
    energy = float(target["Energy J"])
    assert energy > 0
    assert float(target["Energy J/1M Input Tokens"]) == pytest.approx(energy * 1e6 / tokens, rel=1e-3)
    (warning,) = [line for line in result.stderr.splitlines() if "energy counter grew at" in line]
    assert "WARNING" in warning and f"{dcgm}/metrics" in warning and "-c 1000" in warning
