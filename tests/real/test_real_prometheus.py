"""--prometheus-port against a real vLLM (marker `real`): one Prometheus scrapes the client and vLLM;
the client's counters equal the Pooling CSV, vLLM's prompt tokens grew by the client's input tokens,
and every expression of the Grafana dashboard has data on vLLM's real series names."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.grafana_dashboard import LINGER_S, assert_the_dashboard_has_data
from tests.support.locust_run import ROOT, csv_rows, locust_argv, wait_for_log
from tests.support.prometheus_server import free_port, prometheus

pytestmark = pytest.mark.real


def test_prometheus_sees_the_client_beside_real_vllm(  # open loop: the target rate and queue panels have data
    vllm_server: Any, tmp_path: Path
) -> None:
    port = free_port()
    vllm = urlsplit(vllm_server.url).netloc
    with prometheus({"poolbench": f"127.0.0.1:{port}", "vllm": vllm}, tmp_path / "prometheus") as prom:
        deadline = time.monotonic() + 30
        while not prom.query('vllm:prompt_tokens_total{job="vllm"}'):
            assert time.monotonic() < deadline, "Prometheus never scraped vLLM"
            time.sleep(0.5)
        time.sleep(1.5)
        before = prom.value('sum(vllm:prompt_tokens_total{job="vllm"})')
        log = tmp_path / "locust.log"
        argv = locust_argv(
            "locustfiles/embeddings.py",
            *("--only-summary", "--model", "minilm", "--batch-size", "1", "--input-len", "16"),
            *("--request-rate", "8", "--stop-timeout", "30"),
            *("--prometheus-port", str(port), "--prometheus-host", "127.0.0.1", "--prometheus-linger", str(LINGER_S)),
            headless=True,
            users=4,
            run_time="10s",
            host=vllm_server.url,
            csv=tmp_path / "run",
        )
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for_log(log, "for a last scrape", proc, 180)
            time.sleep(3)
            at = time.time()
            total = csv_rows(tmp_path / "run_pooling.csv")["Aggregated"]
            assert int(total["Request Count"]) > 10 and total["Failure Count"] == "0", total
            assert prom.value("sum(poolbench_requests_total)", at) == int(total["Request Count"])
            tokens = prom.value("sum(poolbench_input_tokens_total)", at)
            assert tokens == int(total["Input Tokens"])
            assert prom.value('sum(vllm:prompt_tokens_total{job="vllm"})', at) - before == tokens
            assert_the_dashboard_has_data(prom, at, "poolbench", "vllm")
            assert proc.wait(timeout=LINGER_S + 30) == 0, log.read_text(errors="replace")[-4000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
