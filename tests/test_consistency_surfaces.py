"""Where the answer consistency figures are shown besides the console, CSV, HTML and JSON (docs/consistency.md):
the web UI's live table under the Pooling tab, the Prometheus export; and the bundled mock's wrong answers on
purpose (--mock-drift-above, --mock-cache-drift, --mock-flip-above), counted by the mock itself in /mock/stats
so that the client's count of answers that were not identical is set beside the server's own."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from locust.env import Environment
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from devsupport.ports import free_port
from poolbench_locust.consistency.measures import Comparison, compare_scores, compare_vectors
from poolbench_locust.consistency.state import consistency_of
from poolbench_locust.exporter import series
from poolbench_locust.exporter.prometheus_endpoint import Exporter
from tests.support import zygote
from tests.support.harness import options
from tests.support.locust_run import CONSISTENCY_ON, ROOT, locust_argv, run_locust, wait_for_log
from tests.support.webui import WebUI

DRIFTED_COSINE = 1891 / 2080
"""The mock's drifted vector against the honest one (docs/mock-server.md)."""
LOAD = ("--input-len", "8", "--stop-timeout", "3")
EVERY_REQUEST_COMPARED = ("--consistency-inputs", "32", "--batch-size", "1", "--consistency-rate", "1")
"""The synthetic pool holds 32 distinct requests: with as many reference inputs, every request carries one,
and every one is compared (--consistency-rate 1)."""


@pytest.fixture(autouse=True)
def _consistency_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite turns the check off (tests/conftest.py); here it is on, as by default."""
    monkeypatch.setenv("LOCUST_NO_CONSISTENCY", "false")


def non_identical(figures: dict[str, Any]) -> int:
    return round(figures["compared"] * (1 - figures["identical_ratio"]))


RUN_REQUESTS = 80
"""A run's length, in requests: a few seconds on a loaded machine may be spent on the reference requests."""
COMPARED = ("--consistency-rate", "1")
"""Every answer that carries a reference compared: a run of RUN_REQUESTS may last well under a second, and
the budget's one a second would compare one or two."""


def headless(tmp_path: Path, *args: str, host: str | None = None, users: int = 8) -> Any:
    done = run_locust(
        "locustfiles/embeddings.py",
        *LOAD,
        *args,
        host=host,
        users=users,
        requests=RUN_REQUESTS,
        json_result=tmp_path / "result.json",
        env=CONSISTENCY_ON,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


# The web UI


def test_the_pooling_tab_shows_the_drift_live_while_the_run_goes() -> None:
    """The bundled mock (no --host) drifting above one request in flight: while the run goes, the table under
    the Pooling tab (fetched by the page's script from /consistency/panel) and /consistency/state show it."""
    ui = WebUI("locustfiles/embeddings.py", *LOAD, "--mock-drift-above", "1", "--server-metrics", "off")
    try:
        page = requests.get(ui.base + "/", timeout=10).text
        assert '"poolbench-consistency-live"' in page and "consistency/panel" in page
        assert "poolbench-charts" in page, "the charts' box stays under the same tab"
        idle = requests.get(ui.base + "/consistency/panel", timeout=10)
        assert idle.status_code == 200 and "No answer compared" in idle.text
        answer = ui.swarm(user_count=8, spawn_rate=8)
        assert answer["success"], answer
        deadline = time.monotonic() + 20
        while True:
            state = requests.get(ui.base + "/consistency/state", timeout=10).json()["consistency"]
            if state and state["total"]["compared"] >= 20 and state["total"]["identical_ratio"] < 1:
                break
            assert time.monotonic() < deadline, f"no drift shown live: {state}"
            time.sleep(0.5)
        assert ui.requests_json()["state"] == "running", "read while the run goes"
        assert state["total"]["cosine_min"] == pytest.approx(DRIFTED_COSINE, abs=1e-6)
        assert set(state) == {"/v1/embeddings", "total"}
        panel = requests.get(ui.base + "/consistency/panel", timeout=10)
        assert panel.headers["content-type"].startswith("text/html")
        rows = re.findall(r"<tr>(.*?)</tr>", panel.text)
        cells = [re.findall(r"<t[hd]>(.*?)</t[hd]>", row) for row in rows]
        header, by_name = cells[0], {row[0]: dict(zip(cells[0], row, strict=True)) for row in cells[1:]}
        assert header[:3] == ["Name", "compared", "identical_ratio"] and "cosine_min" in header
        assert set(by_name) == {"/v1/embeddings", "total"}
        assert by_name["total"]["cosine_min"] == f"{DRIFTED_COSINE:.6f}"
        assert float(by_name["total"]["identical_ratio"]) < 1
        ui.stop()
    finally:
        ui.close()


# The bundled mock's faults, and its own count of them


def mock_url(stderr: str) -> str:
    found = re.search(r"started the bundled mock server at (http://127\.0\.0\.1:\d+)", stderr)
    assert found, stderr[-2000:]
    return found.group(1)


def test_the_bundled_mock_drifts_as_asked_and_one_user_never_sees_it(tmp_path: Path) -> None:
    done = headless(tmp_path, *COMPARED, "--mock-drift-above", "1")
    assert "--mock-drift-above 1" in done.stderr
    total = json.loads((tmp_path / "result.json").read_text())["consistency"]["total"]
    assert total["compared"] > 0 and total["identical_ratio"] < 1
    assert total["cosine_min"] == pytest.approx(DRIFTED_COSINE, abs=1e-6)
    headless(tmp_path, *COMPARED, "--mock-drift-above", "1", users=1)
    total = json.loads((tmp_path / "result.json").read_text())["consistency"]["total"]
    assert total["compared"] > 0 and total["identical_ratio"] == 1.0


def test_the_bundled_mock_flips_rankings_as_asked(tmp_path: Path) -> None:
    done = run_locust(
        "locustfiles/rerank.py",
        *LOAD,
        *("--documents", "4", "--mock-flip-above", "1"),
        *COMPARED,
        users=8,
        requests=RUN_REQUESTS,
        json_result=tmp_path / "result.json",
        env=CONSISTENCY_ON,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    total = json.loads((tmp_path / "result.json").read_text())["consistency"]["total"]
    assert total["compared"] > 0 and total["top1_changed_ratio"] > 0 and total["kendall_tau_min"] < 1


def test_a_mock_fault_with_a_host_stops_the_run_naming_the_option(mock_server: Any) -> None:
    done = run_locust("locustfiles/embeddings.py", "--mock-cache-drift", host=mock_server.url, users=1, run_time="2s")
    assert done.returncode == 1
    assert "--mock-cache-drift: only the bundled mock, started when no --host is given" in done.stderr


@pytest.mark.parametrize(
    ("mock_args", "users"),
    [(("--drift-above", "1"), 8), (("--cache-drift",), 4)],
    ids=["drift above 1 in flight", "cache drift"],
)
def test_the_client_counts_the_wrong_answers_the_mock_served(mock_server_factory, tmp_path, mock_args, users) -> None:
    """Every request carries a reference input (one text a request): each answer the mock served wrong is one
    the client found not identical, and no other; the references, sent alone and first, were answered right."""
    mock = mock_server_factory("--ttfb-ms", "10", *mock_args)
    headless(tmp_path, *EVERY_REQUEST_COMPARED, host=mock.url, users=users)
    document = json.loads((tmp_path / "result.json").read_text())
    served, total = mock.stats(), document["consistency"]["total"]
    assert served["drift"]["answers"] > 0, served
    assert non_identical(total) == served["drift"]["answers"], (total, served["drift"])
    references = served["ok"] - total["compared"]
    assert 0 < references <= 32, "the reference answers: neither compared nor drifted"
    key = "drifted_vectors" if mock_args[0] == "--drift-above" else "cache_drifted_vectors"
    assert served["drift"][key] == served["drift"]["answers"], "one text a request"


def test_the_honest_mock_counts_no_wrong_answer_and_the_client_finds_none(mock_server_factory, tmp_path) -> None:
    mock = mock_server_factory("--ttfb-ms", "10")
    headless(tmp_path, *EVERY_REQUEST_COMPARED, host=mock.url)
    total = json.loads((tmp_path / "result.json").read_text())["consistency"]["total"]
    assert total["compared"] > 0 and total["identical_ratio"] == 1.0 and total["cosine_min"] == 1.0
    assert mock.stats()["drift"] == {
        "answers": 0,
        "drifted_vectors": 0,
        "cache_drifted_vectors": 0,
        "flipped_rankings": 0,
    }


# Prometheus


def scrape(exporter: Exporter) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(exporter.registry).decode("utf-8")
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in out, f"two samples of {key}"
            out[key] = sample.value
    return out


def of(page: dict[Any, float], sample: str) -> dict[str, float]:
    """{name label: value} of one sample name."""
    return {dict(labels)["name"]: v for (n, labels), v in page.items() if n == sample}


def test_the_exporter_serves_each_names_figures_bounded() -> None:
    environment = Environment(user_classes=[], parsed_options=options())
    environment.create_local_runner()
    exporter = Exporter(environment)
    exporter.next_run()
    state = consistency_of(environment)
    honest, drifted = [1.0, 2.0, 3.0], [1.0, 2.0, -3.0]
    for _ in range(3):
        state.add("/v1/embeddings", compare_vectors(honest, honest), False)
    state.add("/v1/embeddings", compare_vectors(honest, drifted), False)
    state.add("/rerank", compare_scores([0.9, 0.5, 0.1], [0.5, 0.9, 0.1]), False)
    state.add("/rerank", compare_scores([0.9, 0.5, 0.1], [0.9, 0.5, 0.1]), False)
    state.add("/classify", Comparison(identical=False, abs_diff=0.2, label_changed=True), False)
    state.add("a\nb" + "x" * 500, Comparison(identical=True), False)
    for i in range(series.MAX_NAMES):
        state.add(f"/n/{i}", Comparison(identical=i % 2 == 0), False)
    page = scrape(exporter)
    compared = of(page, "poolbench_consistency_compared_total")
    assert compared["/v1/embeddings"] == 4 and compared["/rerank"] == 2
    assert len(compared) == series.MAX_NAMES + 1 and series.OTHER in compared
    assert sum(compared.values()) == state.total().compared == 4 + 2 + 1 + 1 + series.MAX_NAMES
    assert sum(of(page, "poolbench_consistency_identical_total").values()) == state.total().identical
    assert all(len(n) <= series.MAX_LABEL_CHARS and n.isprintable() for n in compared)
    assert of(page, "poolbench_consistency_identical_ratio")["/v1/embeddings"] == 0.75
    cosine = of(page, "poolbench_consistency_cosine_min")
    assert set(cosine) == {"/v1/embeddings"} and cosine["/v1/embeddings"] == pytest.approx(
        compare_vectors(honest, drifted).cosine
    )
    assert of(page, "poolbench_consistency_top1_changed_ratio") == {"/rerank": 0.5}
    assert of(page, "poolbench_consistency_kendall_tau_min")["/rerank"] < 1
    assert of(page, "poolbench_consistency_labels_changed_ratio") == {"/classify": 1.0}
    runs = {dict(labels)["run"] for (n, labels), _ in page.items() if n.startswith("poolbench_consistency")}
    assert runs == {"1"}
    state.reset()  # a new run's: nothing compared yet, no series
    assert not [k for k in scrape(exporter) if k[0].startswith("poolbench_consistency")]


def test_a_run_s_endpoint_serves_what_the_json_result_holds(mock_server_factory, tmp_path: Path) -> None:
    """A drifting run's last scrape (during --prometheus-linger), read with prometheus_client's parser, equals
    its JSON result's consistency."""
    mock = mock_server_factory("--ttfb-ms", "10", "--drift-above", "1")
    port, log = free_port(), tmp_path / "locust.log"
    argv = locust_argv(
        "locustfiles/embeddings.py",
        *LOAD,
        *("--prometheus-port", str(port), "--prometheus-host", "127.0.0.1", "--prometheus-linger", "4"),
        *COMPARED,
        headless=True,
        users=8,
        requests=RUN_REQUESTS,
        host=mock.url,
        json_result=tmp_path / "result.json",
    )
    with log.open("wb") as out:
        proc = zygote.popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=_env())
    try:
        wait_for_log(log, "for a last scrape", proc, 60)
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert proc.wait(30) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    page = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            page[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    figures = json.loads((tmp_path / "result.json").read_text())["consistency"]["/v1/embeddings"]
    assert of(page, "poolbench_consistency_compared_total") == {"/v1/embeddings": figures["compared"]}
    assert of(page, "poolbench_consistency_identical_ratio")["/v1/embeddings"] == pytest.approx(
        figures["identical_ratio"]
    )
    assert figures["identical_ratio"] < 1
    assert of(page, "poolbench_consistency_cosine_min")["/v1/embeddings"] == pytest.approx(DRIFTED_COSINE, abs=1e-6)


def _env() -> dict[str, str]:
    return {**os.environ, **CONSISTENCY_ON}
