"""--prometheus-port: a real Prometheus scrapes a run on the mock and its query results equal the
Pooling CSV; the dashboard's every expression has data; the series' buckets, labels and run numbers
keep their promises in-process."""

from __future__ import annotations

import math
import random
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st
from locust.env import Environment
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from poolbench_locust.exporter import series
from poolbench_locust.exporter.prometheus_endpoint import Exporter
from poolbench_locust.metrics.collector import SOURCES, Entry, stats_of
from poolbench_locust.metrics.histogram import Histogram
from tests.support import zygote
from tests.support.grafana_dashboard import LINGER_S, assert_the_dashboard_has_data
from tests.support.harness import options
from tests.support.locust_run import ROOT, csv_rows, locust_argv, run_locust, wait_for_log
from tests.support.prometheus_server import free_port, prometheus

RUN_TIMEOUT_S = 120


def test_prometheus_query_results_equal_the_pooling_csv(mock_server: Any, tmp_path: Path) -> None:
    """Open loop (so the target rate and the queue histogram exist), two request names, a master
    with two --processes workers, a warm-up: what Prometheus stored from the last scrapes equals the
    CSV, under the run that began when the warm-up ended."""
    port = free_port()
    jobs = {"poolbench": f"127.0.0.1:{port}", "model-server": f"127.0.0.1:{mock_server.port}"}
    with prometheus(jobs, tmp_path / "prometheus") as prom:
        log = tmp_path / "locust.log"
        argv = locust_argv(
            "locustfiles/demo.py",
            *("--only-summary", "--request-rate", "40", "--processes", "2", "--warmup", "2"),
            *("--prometheus-port", str(port), "--prometheus-host", "127.0.0.1", "--prometheus-linger", str(LINGER_S)),
            headless=True,
            users=8,
            run_time="8s",
            host=mock_server.url,
            csv=tmp_path / "run",
        )
        with log.open("wb") as out:
            proc = zygote.popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for_log(log, "for a last scrape", proc, RUN_TIMEOUT_S)
            time.sleep(3)  # three scrapes of the final figures
            at = time.time()
            pooling = csv_rows(tmp_path / "run_pooling.csv")
            total = pooling.pop("Aggregated")
            assert len(pooling) == 2 and int(total["Request Count"]) > 50, pooling

            def value(expr: str) -> float:
                return prom.value(expr, at)

            assert [r["metric"]["run"] for r in prom.query("poolbench_run_info", at)] == ["2"], "after the warm-up's"
            assert value("count(count by (run) (poolbench_requests_total))") == 1
            assert value("sum(poolbench_requests_total)") == int(total["Request Count"])
            assert value('sum(poolbench_requests_total{result="failure"})') == int(total["Failure Count"])
            assert value("sum(poolbench_input_tokens_total)") == int(total["Input Tokens"])
            assert value("sum(poolbench_sequences_total)") == int(total["Sequences"])
            assert value("sum(poolbench_response_bytes_total)") == int(total["Bytes"])
            assert value("sum(poolbench_request_bytes_total)") == int(total["Sent Bytes"]) > 0
            assert value("sum(poolbench_vectors_total)") == int(total["Vectors"]) > 0
            assert prom.query("poolbench_image_tokens_total", at) == [], "no answer gave image tokens"
            assert value("sum(poolbench_e2e_seconds_count)") == int(total["Request Count"])
            assert value('sum(poolbench_e2e_seconds_bucket{le="+Inf"})') == int(total["Request Count"])
            mean_ms = value("sum(poolbench_e2e_seconds_sum) / sum(poolbench_e2e_seconds_count)") * 1000
            assert mean_ms == pytest.approx(float(total["E2E Mean"]), rel=5e-4)  # bucket middles: 0.05 %
            by_name = {
                r["metric"]["name"]: float(r["value"][1])
                for r in prom.query("sum by (name) (poolbench_input_tokens_total)", at)
            }
            assert by_name == {name: int(row["Input Tokens"]) for name, row in pooling.items()}
            assert value("sum(poolbench_target_request_rate)") == 40
            # The workers' CPU while they ran (they have quit by now: their series are stale).
            workers = prom.query("max_over_time(poolbench_client_cpu_percent[2m])", at)
            assert len(workers) == 3, f"the master and its two workers: {workers}"

            # The dashboard: the server's series from the mock's /metrics (vLLM's names).
            assert_the_dashboard_has_data(prom, at, "poolbench", "model-server")
            print(
                "\nPrometheus sum(poolbench_input_tokens_total) =",
                value("sum(poolbench_input_tokens_total)"),
                "; Pooling CSV Input Tokens =",
                total["Input Tokens"],
            )
            assert proc.wait(timeout=LINGER_S + 30) == 0, log.read_text(errors="replace")[-4000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_busy_port_stops_the_run_at_start_naming_the_option(mock_server: Any, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_locust(
            "locustfiles/embeddings.py",
            *("--prometheus-port", str(port), "--prometheus-host", "127.0.0.1"),
            users=1,
            spawn_rate=1,
            run_time="30s",
            host=mock_server.url,
        )
    assert done.returncode == 1, done.stderr
    assert f"--prometheus-port {port}: cannot listen on 127.0.0.1:{port}" in done.stderr
    assert mock_server.stats()["requests"] == 0, "no user ran"


@pytest.mark.parametrize("value", ["0", "70000", "http"])
def test_a_bad_port_stops_the_run_at_start(value: str) -> None:
    done = run_locust("locustfiles/embeddings.py", "--prometheus-port", value)
    assert done.returncode == 2 and "--prometheus-port" in done.stderr, done.stderr


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=200_000.0), min_size=1, max_size=200))
def test_buckets_count_exactly_what_lies_below_each_bound(values_ms: list[float]) -> None:
    """The bounds are edges of the pooling histogram's own buckets: each count is exact, not rounded."""
    histogram = Histogram()
    for v in values_ms:
        histogram.add(v)
    buckets = series.PrometheusBuckets()
    buckets.add(histogram)
    cumulative = dict(buckets.cumulative())
    for bound in series.BUCKETS_S:
        below = sum(1 for v in values_ms if v < bound * 1000)
        on_edge = sum(1 for v in values_ms if v == bound * 1000)
        assert below <= cumulative[repr(bound)] <= below + on_edge  # a value on an edge counts above it
    assert cumulative["+Inf"] == len(values_ms) == buckets.n
    exact = sum(min(max(v, 0.0), 3_600_000.0) if v >= 0.001 else 0.0 for v in values_ms)
    assert buckets.sum_ms == pytest.approx(exact, rel=1 / 2048, abs=1e-6)


def test_every_bound_is_an_edge_of_the_precise_buckets() -> None:
    for bound in series.BUCKETS_S:
        ms = bound * 1000
        mantissa, _ = math.frexp(ms)
        assert (mantissa * 2048).is_integer(), f"{bound} s cuts a bucket of the pooling histogram"


def scrape(exporter: Exporter) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The exporter's page as the Prometheus text parser reads it: {(sample name, labels): value}."""
    text = generate_latest(exporter.registry).decode("utf-8")
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in out, f"two samples of {key}"
            out[key] = sample.value
    return out


def request(environment: Environment, name: str, ms: float, failed: bool = False, **context: Any) -> None:
    environment.events.request.fire(
        request_type="POST",
        name=name,
        response_time=ms,
        response_length=100,
        exception=RuntimeError("x") if failed else None,
        context={"sequences": 1, "input_tokens": 10, "token_source": "server", "ttfb_ms": ms / 2, **context},
    )


def local_environment() -> Environment:
    environment = Environment(user_classes=[], parsed_options=options("--model", "m\n\x00" + "x" * 500))
    environment.create_local_runner()
    stats = stats_of(environment)
    environment.events.request.add_listener(stats.on_request)
    environment.events.reset_stats.add_listener(stats.reset)
    return environment


def sum_of(page: dict[Any, float], sample: str, **match: str) -> float:
    return sum(v for (n, labels), v in page.items() if n == sample and match.items() <= dict(labels).items())


def test_names_from_user_classes_become_bounded_printable_labels() -> None:
    environment = local_environment()
    exporter = Exporter(environment)
    exporter.next_run()
    hostile = ["a\nb", 'q"uote\\', "\ud800lone", "x" * 1000, "\x1b[31mred", *(f"/n/{i}" for i in range(300))]
    for name in hostile:
        request(environment, name, 5.0)
    request(environment, "/n/0", 5.0, failed=True)
    page = scrape(exporter)
    names = {dict(labels)["name"] for (n, labels), _ in page.items() if n == "poolbench_requests_total"}
    assert len(names) == series.MAX_NAMES + 1 and series.OTHER in names
    assert all(len(n) <= series.MAX_LABEL_CHARS and n.isprintable() for n in names)
    assert sum_of(page, "poolbench_requests_total") == len(hostile) + 1 == stats_of(environment).total.requests
    assert sum_of(page, "poolbench_requests_total", result="failure") == 1
    assert sum_of(page, "poolbench_e2e_seconds_count") == len(hostile) + 1
    [info] = [dict(labels) for (n, labels), _ in page.items() if n == "poolbench_run_info"]
    assert info["model"].isprintable() and len(info["model"]) <= series.MAX_LABEL_CHARS


def test_a_workers_token_sources_never_become_labels_unbounded() -> None:
    environment = local_environment()
    exporter = Exporter(environment)
    exporter.next_run()
    entry = Entry("/v1/embeddings")
    for i in range(50):
        entry.log(time.time(), 5.0, 10, False, {"sequences": 1, "input_tokens": 3, "token_source": f"evil-{i}"})
    entry.log(time.time(), 5.0, 10, False, {"sequences": 1, "input_tokens": 3, "token_source": "server"})
    stats_of(environment).merge_report({"entries": [entry.dump()]})
    page = scrape(exporter)
    sources = {dict(labels)["source"]: v for (n, labels), v in page.items() if n == "poolbench_input_tokens_total"}
    assert sources == {"server": 3, series.OTHER_SOURCE: 150}
    assert set(sources) <= {*SOURCES, series.OTHER_SOURCE}


def test_sent_bytes_vectors_and_image_tokens_equal_the_pooling_table() -> None:
    """The Pooling table's Sent Bytes, Vectors and Image Tokens, by name, a worker's report merged in: failed
    requests' bodies count as sent, their vectors do not, and a name whose answers gave no image token count has
    no image-token series (its table cell is empty), not a 0."""
    environment = local_environment()
    exporter = Exporter(environment)
    exporter.next_run()
    request(environment, "/v1/embeddings", 5.0, request_bytes=700, vectors=3)
    request(environment, "/v1/embeddings", 5.0, failed=True, request_bytes=50, vectors=9)
    request(environment, "/v1/chat", 5.0, request_bytes=20_000, image_tokens=256)
    entry = Entry("/v1/chat")
    entry.log(time.time(), 5.0, 10, False, {"sequences": 2, "request_bytes": 1_000, "image_tokens": 64})
    stats_of(environment).merge_report({"entries": [entry.dump()]})
    page = scrape(exporter)
    assert sum_of(page, "poolbench_request_bytes_total", name="/v1/embeddings") == 750
    assert sum_of(page, "poolbench_request_bytes_total", name="/v1/chat") == 21_000
    assert sum_of(page, "poolbench_vectors_total", name="/v1/embeddings") == 3
    assert sum_of(page, "poolbench_vectors_total", name="/v1/chat") == 1 + 2, "one per sequence where not given"
    images = {dict(labels)["name"]: v for (n, labels), v in page.items() if n == "poolbench_image_tokens_total"}
    assert images == {"/v1/chat": 320}
    stats = stats_of(environment)
    assert sum_of(page, "poolbench_request_bytes_total") == stats.total.sent_bytes
    assert sum_of(page, "poolbench_vectors_total") == stats.total.vectors


def test_a_reset_starts_a_new_run_and_no_counter_goes_down() -> None:
    """The end of --warmup and the web UI's Reset stats fire reset_stats: the counters of the run
    before stop being served, the next run's start from zero under a new `run`."""
    environment = local_environment()
    exporter = Exporter(environment)
    environment.events.reset_stats.add_listener(exporter.next_run)
    environment.events.test_start.add_listener(exporter.next_run)
    environment.events.test_start.fire(environment=environment)
    seen: dict[Any, float] = {}
    rng = random.Random(1)
    for step in range(30):
        if step in (10, 20):
            environment.events.reset_stats.fire()
        request(environment, f"/r/{rng.randint(0, 2)}", rng.uniform(0.5, 70_000), failed=rng.random() < 0.2)
        page = scrape(exporter)
        runs = {dict(labels).get("run") for (n, labels), _ in page.items() if n == "poolbench_requests_total"}
        assert runs == {str(1 + (step >= 10) + (step >= 20))}
        for key, value in page.items():
            if key[0].endswith(("_total", "_count", "_sum", "_bucket")):
                assert value >= seen.get(key, 0), f"{key} went down"
                seen[key] = value
        in_run = step - (20 if step >= 20 else 10 if step >= 10 else 0) + 1
        assert sum_of(page, "poolbench_requests_total") == in_run == stats_of(environment).total.requests


def test_scrape_over_http_is_the_exporters_own_registry(mock_server: Any) -> None:
    environment = local_environment()
    exporter = Exporter(environment)
    port = free_port()
    exporter.listen("127.0.0.1", port)
    try:
        exporter.next_run()
        request(environment, "/v1/embeddings", 12.0)
        answer = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert answer.status_code == 200
        assert 'poolbench_requests_total{method="POST",name="/v1/embeddings",result="success",run="1"} 1.0' in (
            answer.text
        )
        assert "python_gc" not in answer.text and "process_cpu" not in answer.text, "not the global registry"
    finally:
        exporter.close()


def test_a_reset_during_a_scrape_leaves_the_page_with_the_run_it_began_with() -> None:
    """The collector lets the users run between entries; a reset then (the end of warm-up, Reset stats)
    must not put the new run's small figures under the old run's labels."""
    environment = local_environment()
    exporter = Exporter(environment)
    environment.events.reset_stats.add_listener(exporter.next_run)
    exporter.next_run()
    for name in ("/a", "/b", "/c"):
        for _ in range(5):
            request(environment, name, 5.0)
    before = scrape(exporter)
    pauses = []

    def users_run_meanwhile() -> None:
        pauses.append(1)
        if len(pauses) == 1:
            environment.events.reset_stats.fire()
            request(environment, "/b", 7.0)

    exporter.collector._pause = users_run_meanwhile
    during = scrape(exporter)
    assert len(pauses) == 3, "a pause after each entry"

    def of_the_run(page: dict[Any, float]) -> dict[Any, float]:
        return {key: value for key, value in page.items() if "run" in dict(key[1])}

    assert of_the_run(during) == of_the_run(before), "the page of the run it began with, whole"
    after = scrape(exporter)
    assert {dict(labels).get("run") for (n, labels), _ in after.items() if n == "poolbench_requests_total"} == {"2"}
    assert sum_of(after, "poolbench_requests_total") == 1
