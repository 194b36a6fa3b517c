"""--server-metrics against a real vLLM (marker `real`): its own counters equal the client's.

The `vllm_server` fixture (tests/real/conftest.py, session-scoped, an object with `.url`) serves
all-MiniLM-L6-v2 on 127.0.0.1.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.locust_run import run_locust

pytestmark = pytest.mark.real

if not (Path(__file__).parent / "conftest.py").exists():
    pytest.skip("needs tests/real/conftest.py (the vllm_server fixture)", allow_module_level=True)

LOOPBACK_SHARE_MS = 10.0
"""On loopback the network's and the client's share of a request is a few ms (1.5 and 2.7 ms seen at a
load average of 8 on 2 cores)..."""
LOADED_SHARE = 0.15
"""...and on a loaded machine the client's own scheduling delay grows with the request (5 to 27 ms of
120 to 215 ms seen at a load average of 20): the share may be that fraction of the client's mean."""


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
    assert 0 <= share <= max(LOOPBACK_SHARE_MS, LOADED_SHARE * float(latency["Client"])), latency
    assert float(server["Latency Mean"]) <= float(latency["Client"])
    section = re.search(r'<section id="poolbench-server-metrics".*?</section>', page.read_text(), re.S)
    assert section and "Server against client" in section.group(0)
    assert f"<td>{pooling['Input Tokens']}</td>" in section.group(0)
