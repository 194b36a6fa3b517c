"""KServeInferUser against a real Triton Inference Server (nvidia-pytriton's binary, on CPU), JSON and binary
tensors: zero failures, one vector a text (read, with --check-vectors, out of a gzipped binary tensor:
Triton compresses whatever the client accepts compressed), and Triton's own counters
(`nv_inference_request_success`, `nv_inference_count`, on its metrics port) equal to the requests and texts
the run sent; --server-metrics reads them, and its times, as the `triton` flavor. The model is
devsupport/real/triton_model.py's (deterministic vectors): the protocol has no token count, so tokens are
the client's, from the MiniLM's own tokenizer.
"""

from __future__ import annotations

import csv
import time

import pytest

from devsupport.real import prometheus, servers
from devsupport.real.servers import RealServer
from tests.real.table import RESULTS
from tests.support.real_cell import headless

pytestmark = [pytest.mark.real, pytest.mark.timeout(servers.READY_TIMEOUT_S + 300)]

DIM = 384
"""The dimension devsupport/real/triton_model.py answers (the MiniLM's)."""


def triton_counts(server: RealServer) -> tuple[float, float]:
    """(successful requests, inferences: one a text) of Triton's model, once they stand still."""
    last = None
    deadline = time.monotonic() + 5
    while True:
        text = server.metrics()
        now = (prometheus.total(text, "nv_inference_request_success"), prometheus.total(text, "nv_inference_count"))
        if now == last or time.monotonic() > deadline:
            return now
        last = now
        time.sleep(0.3)


# (id, options, texts per request, binary)
TRITON_CELLS = [
    ("kserve-json", ["--batch-size", "4", "--check-vectors"], 4, False),
    ("kserve-json-b1", ["--batch-size", "1"], 1, False),
    ("kserve-binary", ["--encoding-format", "bytes", "--batch-size", "4", "--check-vectors"], 4, True),
    ("kserve-binary-b64", ["--encoding-format", "bytes", "--batch-size", "64"], 64, True),
]


@pytest.mark.parametrize(("cell", "args", "batch", "binary"), TRITON_CELLS, ids=[c[0] for c in TRITON_CELLS])
def test_triton_cell(triton_server, tmp_path, cell, args, batch, binary):
    before = triton_counts(triton_server)
    run = headless(triton_server, "KServeInferUser", "--input-len", "24",
                   "--tokenizer", str(servers.model_dir("vllm")), *args, tmp=tmp_path)  # fmt: skip
    after = triton_counts(triton_server)
    requests_, failures = run.requests, run.failed
    RESULTS.append(run.row("Triton", cell, "KServeInferUser"))
    assert run.code == 0, run.log[-3000:]
    assert requests_ >= 3 and failures == 0, (run.failures, run.log[-2000:])
    assert int(run.pooling["Vectors"]) == requests_ * batch
    assert int(run.pooling["Input Tokens"]) == requests_ * batch * 24  # the MiniLM's tokenizer, exact lengths
    # Triton's own: one successful request per HTTP request, one inference per text
    assert (after[0] - before[0], after[1] - before[1]) == (requests_, requests_ * batch)
    if binary:  # Triton gzips what the client accepts gzipped, its binary tensors too: fewer bytes than the tensor
        assert 0 < int(run.pooling["Bytes"]) < requests_ * batch * DIM * 4


@pytest.mark.timing  # Triton's mean latency against the client's
def test_tritons_own_counters_and_times_reconcile_with_the_clients(triton_server, tmp_path):
    """--server-metrics on Triton's metrics port: its flavour is told by its names, its requests and inferences
    equal the client's (the run waits for every request: no gap), and its means come from its summed
    microseconds: the queue and the model's compute inside its request latency, that inside the client's E2E."""
    run = headless(triton_server, "KServeInferUser", "--input-len", "24", "--batch-size", "4",
                   "--server-metrics", triton_server.metrics_url, "--server-metrics-interval", "1",
                   tmp=tmp_path)  # fmt: skip
    assert run.code == 0 and run.stats["Failure Count"] == "0", run.log[-3000:]
    prefix = tmp_path / "KServeInferUser"
    with open(f"{prefix}_server_metrics.csv") as f:
        (server,) = list(csv.DictReader(f))
    with open(f"{prefix}_server_reconciliation.csv") as f:
        checks = {row["Check"]: row for row in csv.DictReader(f)}
    assert server["Kind"] == "triton" and server["Failed Scrapes"] == "0", server
    assert checks["Requests"]["Gap"] == "0" and checks["Sequences"]["Gap"] == "0", checks
    assert int(checks["Sequences"]["Server"]) == 4 * int(run.stats["Request Count"])
    assert "Prompt Tokens" not in checks and server["Prompt Tokens"] == ""  # Triton counts no tokens
    queue, compute, latency = (float(server[c]) for c in ("Queue Mean", "Compute Mean", "Latency Mean"))
    assert 0 <= queue < latency and 0 < compute < latency, server
    assert checks["Mean Latency"]["Flagged"] == "", checks["Mean Latency"]
    RESULTS.append(run.row("Triton", "kserve-server-metrics", "KServeInferUser", server_mean_ms=round(latency, 1)))
