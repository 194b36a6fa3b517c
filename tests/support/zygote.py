"""`python -m locust ...` for the suite's runs without paying Locust's start each time: a "zygote" process that has
imported Locust, its main and the plugin once, and forks a child per run.

A run's CPU was mostly Locust's own start (about 0.9 s of CPU to import locust, locust.main and
poolbench_locust.plugin, before the first request), paid by hundreds of runs per suite on 2 cores. A forked
child is a real process all the same: its own pid, the test's argv, environment and working directory, its
stdin, stdout and stderr the test's, its exit status and signals as a fresh `python -m locust` has them, and
its CPU (with that of the processes it waited for) counted for the test that ran it (devsupport/test_times.py).

What a fork cannot give, a fresh process does: a run whose environment differs from the zygote's in what is
read at import (PYTHON*, GEVENT*, LOCUST_SKIP_*, LOCUST_PLAYWRIGHT: a hidden C pass's sitecustomize.py, say),
another working directory or another interpreter goes to `subprocess.run` as before, and so does every run
under POOLBENCH_TESTS_FORK=0 (the switch to compare against). Each pytest process (each xdist worker) starts its
own zygote at its first run; it ends when that process does (its stdin closes), and takes its children with it.

The zygote's loop uses the stdlib as it was before Locust's import gevent-patched it (no hub runs in it); a
child re-initialises gevent after the fork, as Locust's own --processes workers do.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# What the zygote's loop uses, as the stdlib has it before `import locust` (in serve()) gevent-patches it.
# gevent's os.close (26+) defers a close to its hub's loop, which never runs in the zygote.
ORIGINAL_SELECT = select.select
ORIGINAL_SOCKET = socket.socket
ORIGINAL_SIGNAL = signal.signal
ORIGINAL_FORK = os.fork
ORIGINAL_WAIT4 = os.wait4
ORIGINAL_CLOSE = os.close

ROOT = Path(__file__).resolve().parents[2]
SWITCH = "POOLBENCH_TESTS_FORK"
IMPORT_TIME_PREFIXES = ("PYTHON", "GEVENT", "LOCUST_SKIP_", "LOCUST_PLAYWRIGHT")
"""Variables read at import (by Python, gevent, locust/__init__.py): a run that sets them differently needs a
fresh interpreter."""
START_TIMEOUT_S = 60.0
MESSAGE_MAX = 1 << 20


# ---- the zygote (python -m tests.support.zygote SOCKET) ------------------------------------------------------


def serve(path: str) -> None:
    listener = ORIGINAL_SOCKET(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    import gevent
    import locust
    import locust.main  # noqa: F401

    import poolbench_locust.plugin  # noqa: F401

    # A child's end wakes the loop through this pipe (SIGCHLD's handler writes to it), not a poll. Set after
    # the imports: gevent's hub, made at import, leaves SIGCHLD at its default (a child restores that).
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    ORIGINAL_SIGNAL(signal.SIGCHLD, lambda *_: None)

    sys.stdout.write("ready\n")
    sys.stdout.flush()
    children: dict[int, socket.socket] = {}
    control = sys.stdin.fileno()
    while True:
        ready, _, _ = ORIGINAL_SELECT([listener, control, wake_r], [], [])
        if wake_r in ready:
            while True:
                try:
                    if not os.read(wake_r, 512):
                        break
                except BlockingIOError:
                    break
        _reap(children)
        if control in ready and not os.read(control, 512):
            break  # the pytest process that started this zygote has ended
        if listener in ready:
            # The unpatched accept: socket.accept would wrap the connection in gevent's socket class.
            fd, _ = listener._accept()  # type: ignore[attr-defined]
            conn = ORIGINAL_SOCKET(fileno=fd)
            try:
                message, fds, _, _ = socket.recv_fds(conn, MESSAGE_MAX, 3)
                request = json.loads(message)
            except (OSError, ValueError) as error:
                sys.stderr.write(f"zygote: a bad request: {error!r}\n")
                conn.close()
                continue
            pid = ORIGINAL_FORK()
            if pid == 0:
                # Detached before they are closed: the sockets' objects, finalised at this child's exit, must not
                # close the numbers again (Locust's own files by then).
                owned = [listener.detach(), *(c.detach() for c in children.values())]
                for fd in (wake_r, wake_w, control, *owned):
                    ORIGINAL_CLOSE(fd)
                conn.close()
                _child(request, fds, gevent)  # never returns
            for fd in fds:
                ORIGINAL_CLOSE(fd)
            children[pid] = conn
            conn.sendall(f"pid {pid}".encode())
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status, usage = ORIGINAL_WAIT4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        cpu = usage.ru_utime + usage.ru_stime
        with contextlib.suppress(OSError):  # the test stopped listening (it was interrupted)
            conn.sendall(f"exit {os.waitstatus_to_exitcode(status)} {cpu:.6f}".encode())
        conn.close()


def _child(request: dict[str, Any], fds: list[int], gevent: Any) -> None:
    """In the forked child: become `python -m locust ARGS` in the test's cwd and environment, on its fds.

    It never returns: Locust's exit (sys.exit, an exception) propagates out of serve() and this interpreter ends
    as `python -m locust`'s would, atexit functions and finalisation included (a --processes worker's last
    stats reach its master only as its ZeroMQ socket is closed there: os._exit lost them)."""
    try:
        signal.set_wakeup_fd(-1)
        ORIGINAL_SIGNAL(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                ORIGINAL_CLOSE(fd)
        gevent.reinit()
        # The hub's loop keeps the time of its last turn, the zygote's start: a timer set before the child's first
        # turn (Locust's -t) would be due that long ago, and fire at once.
        gevent.get_hub().loop.update_now()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["-m", *request["args"]]
    except BaseException:
        import traceback

        traceback.print_exc()
        os._exit(70)  # not a second zygote
    import runpy

    runpy.run_module("locust", run_name="__main__", alter_sys=True)
    raise SystemExit(0)


# ---- the test's side: run_locust's `subprocess.run` -----------------------------------------------------------

_BASE_ENV = dict(os.environ)
"""The zygote's environment: the pytest process's as it started (a test's monkeypatched variables reach each
run through the run's own environment)."""
_lock = threading.Lock()
_zygote: dict[str, Any] = {}
_children_cpu_s = [0.0]


def children_cpu_s() -> float:
    """CPU used by the runs forked so far (and the processes they waited for): getrusage(RUSAGE_CHILDREN)
    counts the zygote's children in the zygote, not here."""
    return _children_cpu_s[0]


def forkable(argv: Sequence[str], cwd: Path | str, env: Mapping[str, str]) -> bool:
    """Whether a forked child runs `argv` exactly as a fresh interpreter would."""
    if os.environ.get(SWITCH, "1") == "0" or list(argv[:3]) != [sys.executable, "-m", "locust"]:
        return False
    if Path(cwd).resolve() != ROOT:
        return False
    keys = {k for k in (*env, *_BASE_ENV) if k.startswith(IMPORT_TIME_PREFIXES)}
    return all(env.get(k) == _BASE_ENV.get(k) for k in keys)


def _socket_path() -> str:
    with _lock:
        if _zygote and _zygote["proc"].poll() is None:
            return str(_zygote["path"])
        folder = tempfile.mkdtemp(prefix="poolbench-zygote-")
        path = os.path.join(folder, "s")
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.zygote", path],
            cwd=ROOT,
            env=_BASE_ENV,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
        line = proc.stdout.readline() if ready else b""
        if line != b"ready\n":
            proc.kill()
            raise RuntimeError(f"the Locust zygote did not start: {line!r}")
        _zygote.update(proc=proc, path=path, folder=folder)
        atexit.register(_stop, proc, folder)
        return path


def _stop(proc: subprocess.Popen[bytes], folder: str) -> None:
    if proc.stdin is not None:
        proc.stdin.close()  # the zygote's signal to end (it kills a child still running)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for name in os.listdir(folder):
        os.unlink(os.path.join(folder, name))
    os.rmdir(folder)


def run(
    argv: Sequence[str], cwd: Path | str, env: Mapping[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)`, by a fork of
    the zygote where `forkable`, by subprocess.run otherwise."""
    if not forkable(argv, cwd, env):
        return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=timeout, env=dict(env))
    deadline = time.monotonic() + timeout
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        try:
            conn.connect(_socket_path())
            request = json.dumps({"args": list(argv[3:]), "cwd": str(cwd), "env": dict(env)}).encode()
            socket.send_fds(conn, [request], [0, out_w, err_w])
        finally:
            # The write ends closed now (gevent's close, in a pytest process that imported Locust, waits for
            # its loop): the child's end is then the pipes' end.
            _unpatched_close()(out_w)
            _unpatched_close()(err_w)
        pid = int(conn.recv(64).decode().removeprefix("pid "))
    except BaseException:
        for fd in (out_r, err_r):
            os.close(fd)
        conn.close()
        raise
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    open_fds = [out_r, err_r]
    status: tuple[int, float] | None = None
    try:
        while open_fds or status is None:
            left = deadline - time.monotonic()
            if left <= 0:
                _kill(pid)
                status = status or _status(conn)
                raise subprocess.TimeoutExpired(list(argv), timeout)
            watched = [*open_fds, *([] if status is not None else [conn])]
            ready, _, _ = select.select(watched, [], [], left)
            for fd in ready:
                if fd is conn:
                    status = _status(conn)
                    continue
                data = os.read(fd, 65536)
                if data:
                    chunks[fd].append(data)
                else:
                    open_fds.remove(fd)
    except BaseException:
        if status is None:  # as subprocess.run does: an interrupted test leaves no run behind
            _kill(pid)
        raise
    finally:
        for fd in (out_r, err_r):
            os.close(fd)
        conn.close()
    returncode, cpu = status
    _children_cpu_s[0] += cpu
    return subprocess.CompletedProcess(list(argv), returncode, _text(chunks[out_r]), _text(chunks[err_r]))


def _unpatched_close() -> Any:
    try:
        from gevent.monkey import get_original
    except ImportError:
        return os.close
    return get_original("os", "close")


def _status(conn: socket.socket) -> tuple[int, float]:
    message = conn.recv(128).decode()
    if not message.startswith("exit "):
        raise RuntimeError(f"the Locust zygote lost its child: {message!r}")
    _, code, cpu = message.split()
    return int(code), float(cpu)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _text(chunks: list[bytes]) -> str:
    # As subprocess.run(text=True) decodes: the locale's encoding, universal newlines.
    import locale

    text = b"".join(chunks).decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


if __name__ == "__main__":
    serve(sys.argv[1])
