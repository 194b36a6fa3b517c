"""Fixtures that run the bundled mock server as a subprocess, bound to 127.0.0.1 on a free port."""

from __future__ import annotations

import collections
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gevent
import gevent.monkey
import locust  # noqa: F401  (gevent-patches the stdlib, as it must be before requests imports ssl)
import pytest
import requests

from devsupport.ports import free_port
from devsupport.subprocesses import stop
from tests.support import zygote

Process = zygote.Forked | subprocess.Popen[bytes]

ROOT = Path(__file__).resolve().parent.parent
# The suite's locust runs compare their counts with exactly what the mock served, and a run whose mock
# injects faults may answer the preflight request with one: those runs go without it. The tests of the
# preflight itself (tests/test_preflight.py, tests/real/) turn it back on with LOCUST_NO_PREFLIGHT=false.
os.environ.setdefault("LOCUST_NO_PREFLIGHT", "true")
# So for the consistency check's reference requests, sent at each start (tests/test_consistency.py turns it on).
os.environ.setdefault("LOCUST_NO_CONSISTENCY", "true")
START_TIMEOUT_S = 10.0
# `make check` (the inner loop) sets POOLBENCH_NO_PROCESSES=1: a test that starts a process is skipped where it
# starts it (in a fixture or in its body), so that what runs is every test that needs none, without a list of them
# to keep. Tests of a process live behind it; `make test` runs them.
NO_PROCESSES = os.environ.get("POOLBENCH_NO_PROCESSES") == "1"


@pytest.fixture(scope="session", autouse=True)
def _no_processes_in_make_check() -> Iterator[None]:
    """Under POOLBENCH_NO_PROCESSES=1, a test's (or its fixture's) first child process skips it. Patched for the
    tests only: pytest-xdist starts its own workers as processes."""
    if not NO_PROCESSES:
        yield
        return
    started = subprocess.Popen._execute_child  # type: ignore[attr-defined]  (CPython's one place a child starts)

    def refused(self: subprocess.Popen[Any], args: Any, *rest: Any) -> None:
        program = args[0] if isinstance(args, list | tuple) else str(args).split()[0]
        pytest.skip(f"starts a process ({Path(str(program)).name}): make test runs it")

    subprocess.Popen._execute_child = refused  # type: ignore[attr-defined]
    yield
    subprocess.Popen._execute_child = started  # type: ignore[attr-defined]


STOP_TIMEOUT_S = 5.0
PREFIX = "poolbench-mock listening on "


@pytest.hookimpl(trylast=True)  # after -m has deselected
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`make test`'s capacity searches (marked `searches`, each with about how long it runs: seconds=N) in the
    order that spreads them over its four xdist workers: --dist load first hands each worker two tests in a row,
    then one more to each as its first ends, so the longest go first, each beside one of the shortest. In
    collection order, the two longest met on one worker: 175 s where the group needs 117. Only a selection of
    searches alone is reordered (a whole run keeps each module's tests together for its fixtures)."""
    if len(items) < 2 or not all(item.get_closest_marker("searches") for item in items):
        return

    def seconds(item: pytest.Item) -> float:
        return -float(item.get_closest_marker("searches").kwargs.get("seconds", 0))  # type: ignore[union-attr]

    longest = sorted(items, key=seconds)
    # the longest, the shortest, the second longest, the second shortest...
    items[:] = [longest[i // 2] if i % 2 == 0 else longest[-1 - i // 2] for i in range(len(longest))]


def pytest_configure(config: pytest.Config) -> None:
    """In a pytest-xdist worker, its queue of tests waits on OS locks, not gevent's. Locust's import above
    gevent-patches threading, so xdist's queue (made after this conftest is imported) waits on a gevent Event that
    xdist's receiver, a real thread, sets: gevent 26.9 then takes the wait for a deadlock between two tests
    (LoopExit: "This operation would block forever"), gevent 26.5 (the floor) never wakes it (the run hangs)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for plugin in config.pluginmanager.get_plugins():
        queue = getattr(plugin, "torun", None)
        if type(plugin).__name__ != "WorkerInteractor" or queue is None:
            continue
        if hasattr(queue, "_has_items_event"):  # xdist >= 3.7: its TestQueue
            queue._lock = gevent.monkey.get_original("_thread", "RLock")()
            queue._has_items_event = _ThreadEvent(bool(queue._items))
        elif hasattr(plugin, "_make_queue"):  # xdist 3.6: a queue.Queue of the execmodel (gevent's, patched)
            empty = plugin.channel.gateway.execmodel.queue.Empty
            plugin._make_queue = lambda empty=empty: _ThreadQueue(empty)
            plugin.torun = plugin._make_queue()


class _ThreadQueue:
    """put, get and get_nowait of queue.Queue on OS locks (xdist 3.6's worker uses these three)."""

    def __init__(self, empty: type[Exception]) -> None:
        self._items: collections.deque[Any] = collections.deque()
        self._guard = gevent.monkey.get_original("_thread", "allocate_lock")()
        self._has_items = _ThreadEvent(False)
        self._empty = empty

    def put(self, item: Any) -> None:
        with self._guard:
            self._items.append(item)
            self._has_items.set()

    def get_nowait(self) -> Any:
        with self._guard:
            if not self._items:
                raise self._empty
            item = self._items.popleft()
            if not self._items:
                self._has_items.clear()
            return item

    def get(self) -> Any:
        while True:
            try:
                return self.get_nowait()
            except self._empty:
                self._has_items.wait()


class _ThreadEvent:
    """set, clear and wait of threading.Event for a waiter in gevent's hub and a setter in another OS thread: a
    flag the waiter polls with gevent.sleep (a cross-thread wake-up is what gevent 26.5 misses, and blocking the
    hub's thread on an OS lock starved xdist 3.6's receiver)."""

    POLL_S = 0.005

    def __init__(self, is_set: bool) -> None:
        self._set = is_set

    def set(self) -> None:
        self._set = True

    def clear(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._set and (deadline is None or time.monotonic() < deadline):
            gevent.sleep(self.POLL_S)
        return self._set


@pytest.fixture(autouse=True)
def _master_port_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Locust's master binds 5557 unless told otherwise, and a worker an earlier test left behind (a
    worker waits a minute for a master that is gone) joins whichever master binds it next: a run then
    counts a stranger's requests, or a master that stops at start waits on it. Every test's masters
    and --processes workers get a free port of their own (a port given on the command line wins)."""
    port = str(free_port())
    monkeypatch.setenv("LOCUST_MASTER_BIND_PORT", port)
    monkeypatch.setenv("LOCUST_MASTER_NODE_PORT", port)


@dataclass
class MockHandle:
    url: str
    port: int
    proc: Process

    def stats(self) -> dict[str, Any]:
        resp = requests.get(f"{self.url}/mock/stats", timeout=5)
        resp.raise_for_status()
        return resp.json()

    def reset(self) -> None:
        requests.post(f"{self.url}/mock/reset", timeout=5).raise_for_status()


def _first_line(proc: Process, stderr: Any) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    line = b""
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([proc.stdout], [], [], max(remaining, 0))
        if not ready:
            break
        byte = os.read(proc.stdout.fileno(), 1)
        if not byte:
            break
        line += byte
    if not line.startswith(PREFIX.encode()):
        stderr.seek(0)
        raise RuntimeError(f"mock server did not start: {line!r}\n{stderr.read().decode(errors='replace')}")
    return line.decode().strip()


def _stop(proc: Process) -> None:
    if proc.poll() is None:
        stop(proc, STOP_TIMEOUT_S)


# Module scope, so that module-scoped fixtures may start servers too; each server stops at the
# end of the module that started it.
@pytest.fixture(scope="module")
def mock_server_factory() -> Iterator[Callable[..., MockHandle]]:
    started: list[Process] = []

    def start(*cli_args: str) -> MockHandle:
        cmd = [sys.executable, "-m", "poolbench_locust.mockserver", "--host", "127.0.0.1", "--port", "0", *cli_args]
        env = dict(os.environ)
        if not zygote.forkable(cmd, ROOT, env):  # a fresh interpreter, which finds the package from the root
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        # stderr goes to a file: a pipe nobody reads could fill up and block the server. Forked from the suite's
        # zygote, which has imported the mock (0.2 s of CPU a server), where it runs as a fresh one would.
        with tempfile.TemporaryFile() as stderr:
            proc = zygote.popen(cmd, stdout=subprocess.PIPE, stderr=stderr, cwd=ROOT, env=env)
            started.append(proc)
            url = _first_line(proc, stderr).removeprefix(PREFIX)
        return MockHandle(url=url, port=int(url.rsplit(":", 1)[1]), proc=proc)

    yield start
    for proc in started:
        _stop(proc)


@pytest.fixture
def mock_server(mock_server_factory: Callable[..., MockHandle]) -> Iterator[MockHandle]:
    """A fresh server with default flags for each test (its counters start at zero), stopped after it."""
    handle = mock_server_factory()
    yield handle
    _stop(handle.proc)
