"""Session fixtures for the real servers: the ones `make test-real` started, or started here; and the order the
tests run in, so that the servers' starts overlap the tests that time nothing.

`pytest -m real tests/real` works alone: a fixture whose server `make test-real` did not start builds its venv
if needed (devsupport/real/install.sh) and starts it, with a bounded wait for its health route, and stops it by
PID at the end of the session.

The servers few tests use (servers.STARTED_AHEAD: the built models', Triton's, KServe's) are started in the
background as the first test begins, all at once, for the tests selected; each is stopped after its last test.
The tests run in three groups (pytest_collection_modifyitems):
1. those that time nothing, on the servers started first: they mostly wait on the network, while the others'
   starts take the cores;
2. those that time nothing, on the servers started ahead, in the order those become ready;
3. those marked `timing` (they compare the client's times with a server's, or search a rate), and those of a
   module that says AFTER_STARTS (it loads a server for a minute): before the first of them every start has
   ended, so that no timed measurement shares the CPU with a server's start.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from devsupport.real import servers
from devsupport.real.servers import RealServer
from tests.real import table

SERVER_OF_FIXTURE = {
    "vllm_server": "vllm",
    "vllm_token_server": "vllm-token",
    "infinity_server": "infinity",
    "infinity_binary_server": "infinity-binary",
    "vllm_rerank_server": "vllm-rerank",
    "vllm_classify_server": "vllm-classify",
    "vllm_token_classify_server": "vllm-token-classify",
    "infinity_cross_server": "infinity-cross",
    "triton_server": "triton",
    "kserve_server": "kserve",
    "llamacpp_server": "llamacpp",
}


def servers_of(item: pytest.Item) -> set[str]:
    """The servers a test uses: those of its fixtures, and of a fixture its parameter `fixture` names (a cell
    table whose rows run on different servers asks for its fixture by name)."""
    names = set(getattr(item, "fixturenames", ()))
    callspec = getattr(item, "callspec", None)
    if callspec is not None and isinstance(callspec.params.get("fixture"), str):
        names.add(callspec.params["fixture"])
    return {SERVER_OF_FIXTURE[name] for name in names if name in SERVER_OF_FIXTURE}


class Ahead:
    """The servers of servers.STARTED_AHEAD: started in the background at once, waited for when a test asks for
    one, stopped after the last test that uses it. A server `make test-real` started is only attached."""

    def __init__(self) -> None:
        self.needed: set[str] = set()
        """The servers the selected tests use, of STARTED_AHEAD."""
        self.last_user: dict[str, str] = {}
        """Each server's last test (its node id), after which it is stopped."""
        self.futures: dict[str, Future[RealServer]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._install = threading.Lock()  # one install.sh at a time: two would build the same venv

    def _start(self, name: str) -> RealServer:
        if (running := servers.attach(name)) is not None:
            return running
        with self._install:
            servers.install(name)
        return servers.start(name)

    def begin(self) -> None:
        """Start every needed server that is not started yet (in STARTED_AHEAD's order)."""
        todo = [name for name in servers.STARTED_AHEAD if name in self.needed and name not in self.futures]
        if not todo:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(len(servers.STARTED_AHEAD), thread_name_prefix="real-ahead")
        for name in todo:
            self.futures[name] = self._pool.submit(self._start, name)

    def __call__(self, name: str) -> RealServer:
        self.needed.add(name)
        self.begin()
        return self.futures[name].result()

    def settle(self) -> None:
        """Wait until every start begun has ended, ready or failed (a failed one fails its own tests)."""
        for future in list(self.futures.values()):
            future.exception()

    def stop(self, name: str) -> None:
        future = self.futures.get(name)
        if future is not None and future.done() and future.exception() is None:
            future.result().stop()  # a no-op for an attached one: this process did not start it

    def close(self) -> None:
        self.settle()
        for name in list(self.futures):
            self.stop(name)
        if self._pool is not None:
            self._pool.shutdown(wait=True)


AHEAD = Ahead()


def after_starts(item: pytest.Item) -> bool:
    """A test that runs only once every server's start has ended: a timed one, or one of an AFTER_STARTS module."""
    return item.get_closest_marker("timing") is not None or getattr(
        getattr(item, "module", None), "AFTER_STARTS", False
    )


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected: only the selected tests' servers start
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ahead = {name: index for index, name in enumerate(servers.STARTED_AHEAD)}

    def group(item: pytest.Item) -> tuple[int, int]:
        mine = [ahead[name] for name in servers_of(item) if name in ahead]
        order = min(mine, default=len(ahead))
        if after_starts(item):
            return (2, order)
        return (1, order) if mine else (0, 0)

    items.sort(key=group)  # stable: within a group, the modules' own order
    for item in items:
        for name in servers_of(item):
            if name in ahead:
                AHEAD.needed.add(name)
                AHEAD.last_user[name] = item.nodeid


def pytest_runtest_setup(item: pytest.Item) -> None:
    AHEAD.begin()  # at the first test: the servers the selected tests need, in the background
    if after_starts(item):
        AHEAD.settle()


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    for name, last in AHEAD.last_user.items():
        if last == item.nodeid:
            AHEAD.stop(name)


def pytest_sessionfinish(session: pytest.Session) -> None:
    AHEAD.close()


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
def vllm_rerank_server() -> RealServer:
    """vLLM 0.32.0 (CPU) serving the built cross-encoder (one label, random weights): /rerank, /score, /classify."""
    return AHEAD("vllm-rerank")


@pytest.fixture
def vllm_classify_server() -> RealServer:
    """vLLM 0.32.0 (CPU) serving the built three-label classifier: /classify."""
    return AHEAD("vllm-classify")


@pytest.fixture
def vllm_token_classify_server() -> RealServer:
    """vLLM 0.32.0 (CPU) serving the built token-classification model: /pooling token_classify."""
    return AHEAD("vllm-token-classify")


@pytest.fixture
def infinity_cross_server() -> RealServer:
    """Infinity 0.0.78 serving the built cross-encoder (reranker) and three-label classifier, one process:
    `.model_named("minilm-rerank")`, `.model_named("minilm-classify")`."""
    return AHEAD("infinity-cross")


@pytest.fixture
def triton_server() -> RealServer:
    """Triton Inference Server (nvidia-pytriton 0.7.0's binary, CPU) serving devsupport/real/triton_model.py's
    `minilm` over KServe v2: `.url`, `.model`, `.metrics()` (its own port's nv_inference_* page)."""
    return AHEAD("triton")


@pytest.fixture
def kserve_server() -> RealServer:
    """KServe 0.21's Python ModelServer serving devsupport/real/kserve_model.py's `minilm` (v1 and v2 REST)."""
    return AHEAD("kserve")


@pytest.fixture
def llamacpp_server() -> RealServer:
    """llama-cpp-python 0.3.36's server (llama.cpp compiled here, CPU) serving the MiniLM's GGUF as `minilm`:
    /v1/embeddings, floats."""
    return AHEAD("llamacpp")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in table.lines():
        terminalreporter.write_line(line)
