"""EmbeddingsUser against llama-cpp-python's OpenAI-style server (0.3.36, llama.cpp compiled from its sdist, CPU)
serving all-MiniLM-L6-v2 as a GGUF made by llama.cpp's own converter: zero failures, one vector a text, and the
server's `usage.prompt_tokens` beside the MiniLM's own tokenizer's count (llama.cpp tokenizes the GGUF's copy of
its WordPiece vocabulary: [CLS] and [SEP] counted, as vLLM counts them). The server sends floats of 384
dimensions only: it ignores `encoding_format` and `dimensions` (every such request fails, naming it), and has no
/metrics and no /health.
"""

from __future__ import annotations

import pytest

from devsupport.real import servers
from tests.real.table import RESULTS
from tests.support.real_cell import headless

pytestmark = [pytest.mark.real, pytest.mark.timeout(servers.READY_TIMEOUT_S + 300)]

# (id, options, texts per request)
LLAMACPP_CELLS = [
    ("embeddings-float", ["--batch-size", "1"], 1),
    ("embeddings-float-b4", ["--batch-size", "4", "--check-vectors"], 4),
]


@pytest.mark.parametrize(("cell", "args", "batch"), LLAMACPP_CELLS, ids=[c[0] for c in LLAMACPP_CELLS])
def test_llamacpp_cell(llamacpp_server, tmp_path, cell, args, batch):
    run = headless(llamacpp_server, "EmbeddingsUser", "--input-len", "24",
                   "--tokenizer", str(servers.model_dir("vllm")), *args, tmp=tmp_path)  # fmt: skip
    requests_, failures = run.requests, run.failed
    client_tokens = int(run.pooling.get("Client Tokens") or 0)
    RESULTS.append(run.row("llama.cpp", cell, "EmbeddingsUser", client_tokens=client_tokens,
                           server_tokens=int(run.pooling.get("Input Tokens", -1))))  # fmt: skip
    assert run.code == 0, run.log[-3000:]
    assert requests_ >= 3 and failures == 0, (run.failures, run.log[-2000:])
    assert int(run.pooling["Vectors"]) == requests_ * batch
    assert run.pooling["Token Source"] == "server", run.pooling
    # texts of exactly 24 tokens by the MiniLM's own tokenizer: llama.cpp's count of the same texts
    assert int(run.pooling["Input Tokens"]) == client_tokens == requests_ * batch * 24, run.pooling


# What the server ignores, answering floats of the model's own dimension whatever was asked: each request fails,
# naming what it got (a client that read them as asked would count wrong vectors, or none)
LLAMACPP_IGNORED = [
    ("base64", ["--encoding-format", "base64"], "embedding 0 is not a base64 string"),
    ("dimensions", ["--dimensions", "64"], "embedding 0 has 384 dimensions, expected 64"),
]


@pytest.mark.parametrize(("cell", "args", "error"), LLAMACPP_IGNORED, ids=[c[0] for c in LLAMACPP_IGNORED])
def test_llamacpp_ignores_it_and_every_request_fails_saying_so(llamacpp_server, tmp_path, cell, args, error):
    run = headless(llamacpp_server, "EmbeddingsUser", "--input-len", "24", *args, tmp=tmp_path)
    RESULTS.append(run.row("llama.cpp", f"ignores-{cell}", "EmbeddingsUser"))
    assert run.requests >= 3 and run.failed == run.requests, run.log[-2000:]
    assert [f["Error"] for f in run.failures] == [f"CatchResponseError({error!r})"], run.failures
