"""KServeInferUser against KServe's own Python ModelServer (`kserve` 0.21), JSON and binary tensors: zero
failures, one vector a text (read, with --check-vectors, out of the binary tensor KServe sends with no
Content-Type). The model is devsupport/real/kserve_model.py's (deterministic vectors): the protocol has no
token count, so tokens are the client's, from the MiniLM's own tokenizer. KServe's /metrics are its
predict step's histograms (`request_predict_seconds`), no flavor of --server-metrics.
"""

from __future__ import annotations

import pytest

from devsupport.real import servers
from tests.real.table import RESULTS
from tests.support.real_cell import headless

pytestmark = [pytest.mark.real, pytest.mark.timeout(servers.READY_TIMEOUT_S + 300)]

# (id, options, texts per request)
KSERVE_CELLS = [
    ("kserve-v2-json", ["--batch-size", "4", "--check-vectors"], 4),
    ("kserve-v2-binary", ["--encoding-format", "bytes", "--batch-size", "4", "--check-vectors"], 4),
]


@pytest.mark.parametrize(("cell", "args", "batch"), KSERVE_CELLS, ids=[c[0] for c in KSERVE_CELLS])
def test_kserve_cell(kserve_server, tmp_path, cell, args, batch):
    run = headless(kserve_server, "KServeInferUser", "--input-len", "24",
                   "--tokenizer", str(servers.model_dir("vllm")), *args, tmp=tmp_path)  # fmt: skip
    requests_, failures = run.requests, run.failed
    RESULTS.append(run.row("KServe", cell, "KServeInferUser"))
    assert run.code == 0, run.log[-3000:]
    assert requests_ >= 3 and failures == 0, (run.failures, run.log[-2000:])
    assert int(run.pooling["Vectors"]) == requests_ * batch
    assert int(run.pooling["Input Tokens"]) == requests_ * batch * 24  # the MiniLM's tokenizer, exact lengths
