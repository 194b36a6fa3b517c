"""--server-metrics for each server's own names (TEI, SGLang, llama.cpp): each figure the server exposes equals
what the mock served, and a figure it does not expose is empty, never 0."""

from __future__ import annotations

import csv
import threading
import time
from pathlib import Path

import pytest
import requests

from poolbench_locust.servermetrics import flavors
from poolbench_locust.servermetrics.deltas import ServerView
from poolbench_locust.servermetrics.parse import reading
from poolbench_locust.servermetrics.report import Client, gauge_chart, reconciliation, server_rows
from tests.support.locust_run import LOAD, csv_rows, run_locust

# TEI 1.9.3's /metrics as its Rust exporter writes it (router/src/lib.rs, core/src/queue.rs): no `_total`,
# and nothing named te_batch_current_size.
TEI_TEXT = """# TYPE te_request_count counter
te_request_count{method="batch"} 4
# TYPE te_request_success counter
te_request_success{method="batch"} 4
# TYPE te_queue_size gauge
te_queue_size 7
# TYPE te_batch_next_size histogram
te_batch_next_size_bucket{le="1"} 2
te_batch_next_size_bucket{le="+Inf"} 3
te_batch_next_size_sum 9
te_batch_next_size_count 3
# TYPE te_request_input_length histogram
te_request_input_length_bucket{le="8"} 12
te_request_input_length_bucket{le="+Inf"} 12
te_request_input_length_sum 72
te_request_input_length_count 12
"""


def test_teis_running_is_empty_not_a_zero_read_from_a_metric_tei_never_had():
    view = ServerView("http://tei:9000/metrics")
    view.observe(reading(TEI_TEXT, frozenset({"/embed"})), 0.0)
    view.observe(reading(TEI_TEXT.replace("te_queue_size 7", "te_queue_size 2"), frozenset({"/embed"})), 1.0)
    assert view.flavor is flavors.TEI
    (row,) = server_rows([view])
    assert row["Running"] is None and row["Running Max"] is None and row["Running Mean"] is None
    assert row["Waiting Max"] == 7.0 and row["Waiting"] == 2.0
    assert row["HTTP Latency Mean"] is None
    chart = gauge_chart(view)  # the report's chart draws what TEI has: its queue, no line of zeros
    assert chart.count("<polyline") == 1 and "running" not in chart


def test_llamacpp_and_sglang_are_told_by_their_names():
    llama = "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 1.23457e+06\n"
    assert reading(llama, frozenset()).flavor is flavors.LLAMACPP
    sglang = 'sglang:num_running_reqs{model_name="m",engine_type="unified"} 2.0\n'
    got = reading(sglang, frozenset())
    assert got.flavor is flavors.SGLANG and sum(got.values["running"].values()) == 2.0


def triton_page(success: int, inferences: int, request_us: int, queue_us: int, compute_us: int, pending: int) -> str:
    """Triton 2.x's /metrics (its metrics port) as nvidia-pytriton 0.7.0's server wrote it, GPU and CPU lines
    left out: counters without `_total`, the durations cumulative microseconds."""
    model = 'model="minilm",version="1"'
    return f"""# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{{{model}}} {success}
# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{{model="minilm",reason="BACKEND",version="1"}} 0
# HELP nv_inference_count Number of inferences performed (does not include cached requests)
# TYPE nv_inference_count counter
nv_inference_count{{{model}}} {inferences}
# HELP nv_inference_exec_count Number of model executions performed (does not include cached requests)
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{{{model}}} {success}
# HELP nv_inference_request_duration_us Cumulative inference request duration in microseconds
# TYPE nv_inference_request_duration_us counter
nv_inference_request_duration_us{{{model}}} {request_us}
# HELP nv_inference_queue_duration_us Cumulative inference queuing duration in microseconds
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{{{model}}} {queue_us}
# HELP nv_inference_compute_infer_duration_us Cumulative compute inference duration in microseconds
# TYPE nv_inference_compute_infer_duration_us counter
nv_inference_compute_infer_duration_us{{{model}}} {compute_us}
# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution per-model.
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{{{model}}} {pending}
"""


def test_tritons_counters_give_requests_inferences_and_mean_times_from_its_microseconds():
    """Triton has no histograms: its means are the summed microseconds' deltas over the requests' delta."""
    view = ServerView("http://triton:8002/metrics")
    view.observe(reading(triton_page(1, 2, 10_174, 97, 9_566, 0), frozenset({"/v2/models/minilm/infer"})), 0.0)
    # 20 requests of 4 texts: 200 ms in all, 10 ms of it queued, 150 ms computing
    later = triton_page(21, 82, 210_174, 10_097, 159_566, 3)
    view.observe(reading(later, frozenset({"/v2/models/minilm/infer"})), 1.0)
    assert view.flavor is flavors.TRITON
    (row,) = server_rows([view])
    assert (row["Kind"], row["Requests"], row["Sequences"], row["Prompt Tokens"]) == ("triton", 20, 80, None)
    assert (row["Latency Mean"], row["Queue Mean"], row["Compute Mean"]) == (10.0, 0.5, 7.5)
    assert row["Latency 50%"] is None and row["Running"] is None and row["Waiting Max"] == 3.0
    checks = {c["Check"]: c for c in reconciliation([view], Client(20, 80, 0, 12.0, 1))}
    assert checks["Requests"]["Gap"] == 0 and checks["Sequences"]["Gap"] == 0 and "Prompt Tokens" not in checks
    assert checks["Mean Latency"]["Server"] == 10.0 and checks["Mean Latency"]["Gap"] == 2.0


def _by(path: Path, key: str) -> dict[str, dict[str, str]]:
    with path.open() as f:
        return {row[key]: row for row in csv.DictReader(f)}


EXPOSED = {
    "tei": {"Requests", "Sequences", "Prompt Tokens", "Latency Mean", "Queue Mean", "Waiting Max"},
    "sglang": {"Requests", "Sequences", "Prompt Tokens", "Latency Mean", "Queue Mean", "Running Max", "Waiting Max"},
    "llamacpp": {"Prompt Tokens", "Running Max", "Waiting Max"},
}
FIGURES = ("Requests", "Sequences", "Prompt Tokens", "Latency Mean", "HTTP Latency Mean", "Queue Mean")
GAUGES = ("Running", "Running Mean", "Running Max", "Waiting", "Waiting Mean", "Waiting Max")
CLASS = {"tei": "TEIEmbedUser", "sglang": "EmbeddingsUser", "llamacpp": "EmbeddingsUser"}


@pytest.mark.parametrize("flavor", ["tei", "sglang", "llamacpp"])
def test_against_the_mock_each_exposed_figure_is_what_it_served_and_the_others_are_empty(
    mock_server_factory, tmp_path, flavor
):
    mock = mock_server_factory("--flavor", flavor, "--ttfb-ms", "5")
    locustfile = tmp_path / "one.py"
    locustfile.write_text(f"from poolbench_locust import {CLASS[flavor]}  # noqa: F401\n")
    prefix = tmp_path / "f"
    result = run_locust(
        str(locustfile),
        *LOAD,
        *("--stop-timeout", "5", "--server-metrics-interval", "1"),
        host=mock.url,
        users=3,
        run_time="4s",
        csv=prefix,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    served = mock.stats()
    assert served["ok"] > 0
    (server,) = _by(Path(f"{prefix}_server_metrics.csv"), "Server").values()
    assert server["Kind"] == flavor
    exposed = EXPOSED[flavor]
    for column in FIGURES + GAUGES:
        shown = column in exposed or any(column.startswith(g.split()[0]) and g in exposed for g in GAUGES)
        assert (server[column] != "") == shown, (column, server[column])
    for column, count in (("Requests", "ok"), ("Sequences", "sequences"), ("Prompt Tokens", "prompt_tokens")):
        if column in exposed:
            assert int(server[column]) == served[count], column
    if "Queue Mean" in exposed:
        assert float(server["Queue Mean"]) == pytest.approx(5.0)
    if "Latency Mean" in exposed:
        assert float(server["Latency Mean"]) >= 5.0
    assert 0 <= float(server["Waiting Max"]) <= 9  # three users, three inputs each
    checks = _by(Path(f"{prefix}_server_reconciliation.csv"), "Check")
    counted = {"Requests", "Sequences", "Prompt Tokens"} & exposed
    assert set(checks) == counted | ({"Mean Latency"} if "Latency Mean" in exposed else set())
    for check in counted:
        assert checks[check]["Gap"] == "0" and checks[check]["Flagged"] == "", checks[check]
    pooling = csv_rows(Path(f"{prefix}_pooling.csv"))["Aggregated"]
    assert int(checks["Prompt Tokens"]["Client"]) == int(pooling["Input Tokens"]) == served["prompt_tokens"]


@pytest.mark.parametrize("flavor", ["tei", "sglang", "llamacpp"])
def test_the_mocks_waiting_and_running_gauges_count_the_inputs_as_each_server_does(mock_server_factory, flavor):
    mock = mock_server_factory("--flavor", flavor)
    route = "/embed" if flavor == "tei" else "/v1/embeddings"
    body = {"inputs": ["a b c"] * 3} if flavor == "tei" else {"input": ["a b c"] * 3, "model": "mock-model"}

    def send() -> None:
        requests.post(f"{mock.url}{route}", json=body, headers={"x-mock-ttfb-ms": "1500"}, timeout=10)

    senders = [threading.Thread(target=send) for _ in range(2)]
    for sender in senders:
        sender.start()
    time.sleep(0.6)
    during = reading(requests.get(f"{mock.url}/metrics", timeout=5).text, frozenset({route}))
    for sender in senders:
        sender.join()
    after = reading(requests.get(f"{mock.url}/metrics", timeout=5).text, frozenset({route}))
    assert during.flavor.name == flavor
    assert sum(during.values["waiting"].values()) == 6.0  # two requests of three inputs, in the wait
    assert sum(after.values["waiting"].values()) == 0.0
    assert sum(after.values["prompt_tokens"].values()) == mock.stats()["prompt_tokens"] > 0
