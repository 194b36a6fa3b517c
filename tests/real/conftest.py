"""Session fixtures for the real servers: the ones `make test-real` started, or started here.

`pytest -m real tests/real` works alone: a fixture whose server `make test-real` did not start
builds its venv if needed (devsupport/real/install.sh) and starts it, with a bounded wait for its health
route, and stops it by PID at the end of the session. The servers few tests use (the built models', Triton's)
run one at a time: asking for one stops the one before (its tests are next to each other in their module).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devsupport.real import servers
from devsupport.real.servers import RealServer
from tests.real import table


class OneAtATime:
    """The servers few tests use, at most one running: each of the built models' vLLMs takes both cores for a
    minute or two as it starts, and 2.3 GB as it runs. A server `make test-real` started is only attached."""

    def __init__(self) -> None:
        self.current: RealServer | None = None

    def __call__(self, name: str) -> RealServer:
        if self.current is not None and self.current.name == name:
            return self.current
        self.close()
        if (running := servers.attach(name)) is None:
            servers.install(name)
            running = servers.start(name)
        self.current = running
        return running

    def close(self) -> None:
        if self.current is not None:
            self.current.stop()  # a no-op for an attached one: this process did not start it
            self.current = None


@pytest.fixture(scope="session")
def one_at_a_time() -> Iterator[OneAtATime]:
    holder = OneAtATime()
    try:
        yield holder
    finally:
        holder.close()


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


@pytest.fixture
def vllm_rerank_server(one_at_a_time: OneAtATime) -> RealServer:
    """vLLM 0.32.0 (CPU) serving the built cross-encoder (one label, random weights): /rerank, /score."""
    return one_at_a_time("vllm-rerank")


@pytest.fixture
def vllm_classify_server(one_at_a_time: OneAtATime) -> RealServer:
    """vLLM 0.32.0 (CPU) serving the built three-label classifier: /classify."""
    return one_at_a_time("vllm-classify")


@pytest.fixture
def vllm_token_classify_server(one_at_a_time: OneAtATime) -> RealServer:
    """vLLM 0.32.0 (CPU) serving the built token-classification model: /pooling token_classify."""
    return one_at_a_time("vllm-token-classify")


@pytest.fixture
def infinity_cross_server(one_at_a_time: OneAtATime) -> RealServer:
    """Infinity 0.0.78 serving the built cross-encoder (reranker) and three-label classifier, one process:
    `.model_named("minilm-rerank")`, `.model_named("minilm-classify")`."""
    return one_at_a_time("infinity-cross")


@pytest.fixture
def triton_server(one_at_a_time: OneAtATime) -> RealServer:
    """Triton Inference Server (nvidia-pytriton 0.7.0's binary, CPU) serving devsupport/real/triton_model.py's
    `minilm` over KServe v2: `.url`, `.model`, `.metrics()` (its own port's nv_inference_* page)."""
    return one_at_a_time("triton")


@pytest.fixture
def kserve_server(one_at_a_time: OneAtATime) -> RealServer:
    """KServe 0.21's Python ModelServer serving devsupport/real/kserve_model.py's `minilm` (v1 and v2 REST)."""
    return one_at_a_time("kserve")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in table.lines():
        terminalreporter.write_line(line)
