"""--server-metrics against a real vLLM (marker `real`): its own counters equal the client's.

The `vllm_server` fixture (tests/real/conftest.py, session-scoped, an object with `.url`) serves
all-MiniLM-L6-v2 on 127.0.0.1.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.locust_run import PREFLIGHT_ON, run_locust

# Each compares the client's times with vLLM's, or searches a rate: timed (tests/real/conftest.py runs them after
# every server's start has ended)
pytestmark = [pytest.mark.real, pytest.mark.timing]

if not (Path(__file__).parent / "conftest.py").exists():
    pytest.skip("needs tests/real/conftest.py (the vllm_server fixture)", allow_module_level=True)

LOOPBACK_SHARE_MS = 10.0
"""On loopback the network's and the client's share of a request is a few ms (1.5 and 2.7 ms seen at a
load average of 8 on 2 cores)..."""
LOADED_SHARE = 0.15
"""...and on a loaded machine the client's own scheduling delay grows with the request (5 to 27 ms of
120 to 215 ms seen at a load average of 20): the share may be that fraction of the client's mean."""
SERVER_AFTER_CLIENT = 0.01
"""How far vLLM's own mean latency may pass the client's: a share of the client's (see its use)."""


def _by(path: Path, key: str) -> dict[str, dict[str, str]]:
    with path.open() as f:
        return {row[key]: row for row in csv.DictReader(f)}


@pytest.mark.parametrize("encoding", ["float", "bytes"])
def test_vllms_own_counters_equal_the_clients(vllm_server: Any, tmp_path: Path, encoding: str) -> None:
    prefix, page = tmp_path / "vllm", tmp_path / "vllm.html"
    result = run_locust(
        "locustfiles/embeddings.py",
        *(
            "--model",
            "minilm",
            "--encoding-format",
            encoding,
            "--batch-size",
            "1",
            "--input-len",
            "16",
            "--stop-timeout",
            "30",
            "--server-metrics-interval",
            "2",
            "--html",
            str(page),
        ),
        host=vllm_server.url,
        users=2,
        run_time="10s",
        csv=prefix,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (server,) = _by(Path(f"{prefix}_server_metrics.csv"), "Server").values()
    assert server["Kind"] == "vllm" and server["Failed Scrapes"] == "0"
    pooling = _by(Path(f"{prefix}_pooling.csv"), "Name")["Aggregated"]
    assert int(pooling["Request Count"]) > 10 and pooling["Failure Count"] == "0"
    checks = _by(Path(f"{prefix}_server_reconciliation.csv"), "Check")
    # With --stop-timeout every request the client sent ended before the last scrape: no gap at all.
    for check in ("Requests", "Sequences", "Prompt Tokens"):
        assert checks[check]["Gap"] == "0", checks[check]
    assert int(checks["Prompt Tokens"]["Server"]) == int(pooling["Input Tokens"])
    latency = checks["Mean Latency"]
    share = float(latency["Gap"])
    # The same requests (the counts' gap is 0), so the client's mean holds the server's and the loopback; but
    # vLLM records a request's latency when its handler ends, which may come after the client read the last
    # byte: its mean passed the client's by a hair once (-0.16 ms of 54.7, bytes answers). At most
    # SERVER_AFTER_CLIENT of the client's mean.
    slack = SERVER_AFTER_CLIENT * float(latency["Client"])
    assert -slack <= share <= max(LOOPBACK_SHARE_MS, LOADED_SHARE * float(latency["Client"])), latency
    assert float(server["Latency Mean"]) <= float(latency["Client"]) + slack
    section = re.search(r'<section id="poolbench-server-metrics".*?</section>', page.read_text(), re.S)
    assert section and "Server against client" in section.group(0)
    assert f"<td>{pooling['Input Tokens']}</td>" in section.group(0)


def test_an_open_loop_above_vllms_capacity_names_the_server_by_its_own_latency(vllm_server: Any) -> None:
    """vLLM's pooling runner takes every request it holds into its batch: its waiting gauge stays 0 while
    its latency grows. Asked for far more than it serves (about 6 requests/s of 130 tokens on 2 cores), the
    open loop falls behind, and the warning blames the server, not the slots: its own mean latency against
    the preflight's one request alone. A cold vLLM's first request is slow (its own warm-up): the server is
    warmed first, as a user's would be by the runs before, so that the preflight's request is one alone."""
    warm = run_locust("locustfiles/embeddings.py", "--model", "minilm", host=vllm_server.url, users=1, run_time="5s")
    assert warm.returncode == 0, warm.stderr[-3000:]
    result = run_locust(
        "locustfiles/embeddings.py",
        *("--model", "minilm", "--request-rate", "30", "--server-metrics-interval", "1", "--stop-timeout", "30"),
        host=vllm_server.url,
        users=8,
        run_time="20s",
        env=PREFLIGHT_ON,  # its one request alone is the reference (the suite turns the preflight off)
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = [line for line in result.stderr.splitlines() if "fell behind on local" in line and "whole run" in line]
    assert summary, result.stderr[-3000:]
    assert re.search(
        r"Likely cause: the server was saturated: its own mean latency (was [\d,]+ ms against [\d,]+ ms for one "
        r"request alone \(the preflight\)|grew from [\d,]+ ms to [\d,]+ ms)",
        summary[-1],
    ), summary[-1]
    assert "no free slot" not in summary[-1]


def test_find_capacity_against_vllm_answers_a_rate_the_server_limits(vllm_server: Any, tmp_path: Path) -> None:
    """--find-capacity against the real vLLM (CPU build): a capacity claimed, limited by the server, its
    evidence the server's own mean latency, every passing probe's rate sent as asked."""
    document = tmp_path / "cap.json"
    result = run_locust(
        "locustfiles/embeddings.py",
        *("--model", "minilm", "--find-capacity", "--slo", "e2e_ms=2000", "--capacity-start-rate", "2"),
        *("--capacity-precision", "0.2", "--sweep-step-time", "6", "--server-metrics-interval", "1"),
        host=vllm_server.url,
        users=32,
        run_time="150s",
        json_result=document,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    capacity = json.loads(document.read_text())["capacity"]
    assert capacity["limited_by"] == "server" and capacity["ended"] == "converged", capacity["answer"]
    assert 1 <= capacity["requests_per_s"] <= 40, capacity["answer"]
    # the server's own evidence: vLLM's pooling runner queues little (0.8 seen), its latency grows
    assert re.search(r"its own (queue held|mean latency was) ", capacity["answer"]), capacity["answer"]
    assert all(p["sent_ratio"] >= 0.95 for p in capacity["probes"] if p["passed"])
