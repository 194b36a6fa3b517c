"""Session fixtures for the real servers: the ones `make test-real` started, or started here.

`pytest -m real tests/real` works alone: a fixture whose server `make test-real` did not start
builds its venv if needed (devsupport/real/install.sh) and starts it, with a bounded wait for /health,
and stops it by PID at the end of the session.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devsupport.real import servers
from devsupport.real.servers import RealServer
from tests.real import table


def _server(name: str) -> Iterator[RealServer]:
    if (running := servers.attach(name)) is not None:
        yield running
        return
    servers.install(name)
    started = servers.start(name)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[RealServer]:
    """vLLM 0.32.0 (CPU) serving all-MiniLM-L6-v2 as `minilm`: `.url`, `.model`, `.metrics()` (Prometheus text)."""
    yield from _server("vllm")


@pytest.fixture(scope="session")
def infinity_server() -> Iterator[RealServer]:
    """Infinity 0.0.78 (torch, CPU) serving all-MiniLM-L6-v2: `.url`, `.model`."""
    yield from _server("infinity")


@pytest.fixture(scope="session")
def vllm_token_server() -> Iterator[RealServer]:
    """vLLM 0.32.0 (CPU) serving all-MiniLM-L6-v2 as a token_embed model (--pooler-config): one row per token."""
    yield from _server("vllm-token")


@pytest.fixture(scope="session")
def infinity_binary_server() -> Iterator[RealServer]:
    """Infinity 0.0.78 serving all-MiniLM-L6-v2 with --embedding-dtype binary: 48 packed values a text."""
    yield from _server("infinity-binary")


@pytest.fixture(scope="session")
def vllm_rerank_server() -> Iterator[RealServer]:
    """vLLM 0.32.0 (CPU) serving the built cross-encoder (one label, random weights): /rerank, /score."""
    yield from _server("vllm-rerank")


@pytest.fixture(scope="session")
def vllm_classify_server() -> Iterator[RealServer]:
    """vLLM 0.32.0 (CPU) serving the built three-label classifier: /classify."""
    yield from _server("vllm-classify")


@pytest.fixture(scope="session")
def vllm_token_classify_server() -> Iterator[RealServer]:
    """vLLM 0.32.0 (CPU) serving the built token-classification model: /pooling token_classify."""
    yield from _server("vllm-token-classify")


@pytest.fixture(scope="session")
def infinity_cross_server() -> Iterator[RealServer]:
    """Infinity 0.0.78 serving the built cross-encoder (reranker) and three-label classifier, one process:
    `.model_named("minilm-rerank")`, `.model_named("minilm-classify")`."""
    yield from _server("infinity-cross")


@pytest.fixture(scope="session")
def triton_server() -> Iterator[RealServer]:
    """Triton Inference Server (nvidia-pytriton 0.7.0's binary, CPU) serving devsupport/real/triton_model.py's
    `minilm` over KServe v2: `.url`, `.model`, `.metrics()` (its own port's nv_inference_* page)."""
    yield from _server("triton")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in table.lines():
        terminalreporter.write_line(line)
