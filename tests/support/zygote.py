"""`python -m locust ...` and `python -m poolbench_locust.mockserver ...` for the suite without paying their start
each time: a "zygote" process that has imported Locust, its main, the plugin and the mock server once, and forks a
child per process a test starts.

A run's CPU was mostly Locust's own start (about 0.9 s of CPU to import locust, locust.main and
poolbench_locust.plugin, before the first request; 0.2 s for a mock server), paid by hundreds of processes per
suite on 2 cores. A forked child is a real process all the same: its own pid, the test's argv, environment and
working directory, its stdin, stdout and stderr the test's, its exit status and signals as a fresh `python -m
MODULE` has them, and its CPU (with that of the processes it waited for) counted for the test that waited for it
(devsupport/test_times.py).

Two ways in: `run` is `subprocess.run` (run_locust's runs), `popen` is `subprocess.Popen` for a process the test
drives while it runs (a web UI, workers and their master, a mock server): the handle has Popen's pid, poll, wait,
communicate, send_signal, terminate, kill and pipes. Its signals go through the zygote, which is the child's
parent: one sent after the child ended (and was reaped) reaches no other process that got its pid.

What a fork cannot give, a fresh process does: a process whose environment differs from the zygote's in what is
read at import (PYTHON*, GEVENT*, LOCUST_SKIP_*, LOCUST_PLAYWRIGHT: a hidden C pass's sitecustomize.py, say),
another working directory, another interpreter or module goes to `subprocess` as before, and so does every
process under POOLBENCH_TESTS_FORK=0 (the switch to compare against). A test of what only a fresh process shows
(the `locust` console script, a run in a session of its own whose leftovers are counted) starts it itself. Each
pytest process (each xdist worker) starts its own zygote at its first fork; it ends when that process does (its
stdin closes), and takes its children with it.

The zygote's loop uses the stdlib as it was before Locust's import gevent-patched it (no hub runs in it); a
child re-initialises gevent after the fork, as Locust's own --processes workers do.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
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
from typing import IO, Any

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
MODULES = ("locust", "poolbench_locust.mockserver")
"""What the zygote forks: `python -m` of these (it has imported them)."""
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

    import poolbench_locust.mockserver.server
    import poolbench_locust.plugin  # noqa: F401

    # What the imports made, out of the collector's sight: a child's exit (its final collection walks every
    # object) cost 0.2 s of CPU more without it, and a collection in a child would copy the pages it touched.
    # They live as long as a fresh interpreter keeps its modules' objects: to its end.
    gc.freeze()

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
    listening: dict[socket.socket, int] = {}  # a child's connection, while the test holds its end open
    control = sys.stdin.fileno()
    while True:
        ready, _, _ = ORIGINAL_SELECT([listener, control, wake_r, *listening], [], [])
        if wake_r in ready:
            while True:
                try:
                    if not os.read(wake_r, 512):
                        break
                except BlockingIOError:
                    break
        _reap(children, listening)
        if control in ready and not os.read(control, 512):
            break  # the pytest process that started this zygote has ended
        for conn in [c for c in ready if c in listening]:
            _signal(conn, listening, children)
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
            listening[conn] = pid
            conn.sendall(f"pid {pid}".encode())
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _reap(children: dict[int, socket.socket], listening: dict[socket.socket, int]) -> None:
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
        listening.pop(conn, None)
        cpu = usage.ru_utime + usage.ru_stime
        with contextlib.suppress(OSError):  # the test stopped listening (it was interrupted)
            conn.sendall(f"exit {os.waitstatus_to_exitcode(status)} {cpu:.6f}".encode())
        conn.close()


def _signal(conn: socket.socket, listening: dict[socket.socket, int], children: dict[int, socket.socket]) -> None:
    """The test's `signal N` for a child not reaped yet (its pid is still its own); an end of the connection
    (the test dropped its handle) leaves the child running, as a dropped Popen does."""
    try:
        message = conn.recv(64)
    except OSError:
        message = b""
    if not message:
        del listening[conn]
        return
    words = message.split()
    pid = listening[conn]
    if len(words) == 2 and words[0] == b"signal" and words[1].isdigit() and pid in children:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(pid, int(words[1]))


def _child(request: dict[str, Any], fds: list[int], gevent: Any) -> None:
    """In the forked child: become `python -m MODULE ARGS` in the test's cwd and environment, on its fds.

    It never returns: the module's exit (sys.exit, an exception) propagates out of serve() and this interpreter
    ends as `python -m MODULE`'s would, atexit functions and finalisation included (a --processes worker's last
    stats reach its master only as its ZeroMQ socket is closed there: os._exit lost them)."""
    try:
        signal.set_wakeup_fd(-1)
        ORIGINAL_SIGNAL(signal.SIGCHLD, signal.SIG_DFL)
        # As a fresh interpreter sets it: KeyboardInterrupt on Ctrl+C, unless it started with SIGINT ignored.
        ORIGINAL_SIGNAL(signal.SIGINT, signal.SIG_IGN if request["sigint_ignored"] else signal.default_int_handler)
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

    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    raise SystemExit(0)


# ---- the test's side: subprocess.run and subprocess.Popen ------------------------------------------------------

_BASE_ENV = dict(os.environ)
"""The zygote's environment: the pytest process's as it started (a test's monkeypatched variables reach each
run through the run's own environment)."""
_lock = threading.Lock()
_zygote: dict[str, Any] = {}
_children_cpu_s = [0.0]


def children_cpu_s() -> float:
    """CPU used by the processes forked so far and waited for (and the processes they waited for):
    getrusage(RUSAGE_CHILDREN) counts the zygote's children in the zygote, not here."""
    return _children_cpu_s[0]


def forkable(argv: Sequence[str], cwd: Path | str, env: Mapping[str, str]) -> bool:
    """Whether a forked child runs `argv` exactly as a fresh interpreter would."""
    if os.environ.get(SWITCH, "1") == "0" or len(argv) < 3 or list(argv[:2]) != [sys.executable, "-m"]:
        return False
    if argv[2] not in MODULES or Path(cwd).resolve() != ROOT:
        return False
    keys = {k for k in (*env, *_BASE_ENV) if k.startswith(IMPORT_TIME_PREFIXES)}
    return all(env.get(k) == _BASE_ENV.get(k) for k in keys)


class Forked:
    """A process forked by the zygote, driven as a subprocess.Popen is (the part of its interface the suite uses).

    `stdout` and `stderr` are file objects where PIPE was asked for; `communicate` reads them to their end."""

    def __init__(
        self, args: list[str], pid: int, conn: socket.socket, pipes: dict[str, IO[Any] | None], text: bool
    ) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self.stdin = None
        self.stdout = pipes.get("stdout")
        self.stderr = pipes.get("stderr")
        self._conn = conn
        self._text = text
        self._read: dict[int, list[bytes]] = {}

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._conn], [], [], 0)[0]:
            self._status()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._conn], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
            self._status()
        assert self.returncode is not None
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Read the pipes to their end, then wait; within `timeout` seconds for both, else TimeoutExpired (what was
        read is kept for the next call, as Popen keeps it)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        streams = [f for f in (self.stdout, self.stderr) if f is not None]
        for f in streams:
            self._read.setdefault(f.fileno(), [])
        open_fds = [f.fileno() for f in streams if not f.closed]
        while open_fds:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
            for fd in select.select(open_fds, [], [], left)[0]:
                data = os.read(fd, 65536)
                if data:
                    self._read[fd].append(data)
                else:
                    open_fds.remove(fd)
        self.wait(None if deadline is None else max(deadline - time.monotonic(), 0))
        outputs = []
        for f in (self.stdout, self.stderr):
            if f is None:
                outputs.append(None)
                continue
            data = b"".join(self._read.get(f.fileno(), []))
            f.close()
            outputs.append(_text(data) if self._text else data)
        return outputs[0], outputs[1]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(OSError):  # the zygote is gone, and its children with it
                self._conn.send(f"signal {int(sig)}".encode())

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *exc: object) -> None:
        for f in (self.stdout, self.stderr):
            if f is not None:
                f.close()
        self.wait()

    def _status(self) -> None:
        message = self._conn.recv(128).decode()
        if not message.startswith("exit "):
            raise RuntimeError(f"the Locust zygote lost its child: {message!r}")
        _, code, cpu = message.split()
        self.returncode = int(code)
        _children_cpu_s[0] += float(cpu)
        self._conn.close()


def popen(
    argv: Sequence[str],
    *,
    cwd: Path | str = ROOT,
    env: Mapping[str, str] | None = None,
    stdin: Any = None,
    stdout: Any = None,
    stderr: Any = None,
    text: bool = False,
    sigint_default: bool = False,
) -> Forked | subprocess.Popen[Any]:
    """`subprocess.Popen(argv, cwd=cwd, env=env, stdin=..., stdout=..., stderr=..., text=text)` by a fork of the
    zygote where `forkable`, by subprocess.Popen otherwise. stdin: None or DEVNULL; stdout and stderr: None,
    DEVNULL, PIPE, a file or a descriptor (stderr also STDOUT). `sigint_default`: the process takes Ctrl+C as a
    terminal delivers it even where this one ignores SIGINT (a shell's background job)."""
    env = dict(os.environ if env is None else env)
    if not forkable(argv, cwd, env):
        reset = (lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) if sigint_default else None
        return subprocess.Popen(
            list(argv), cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr, text=text, preexec_fn=reset
        )
    close = _unpatched_close()
    opened: list[int] = []  # this side's copies of the child's descriptors, closed once it has its own
    pipes: dict[str, IO[Any] | None] = {}

    def descriptor(name: str, target: Any, default: int) -> int:
        if target is None:
            return default
        if target == subprocess.DEVNULL:
            opened.append(os.open(os.devnull, os.O_RDWR))
            return opened[-1]
        if target == subprocess.PIPE and name != "stdin":
            read_end, write_end = os.pipe()
            opened.append(write_end)
            # Closed by communicate or __exit__. communicate reads the descriptor, as Popen's does.
            pipes[name] = open(read_end, "r" if text else "rb", buffering=-1 if text else 0)  # noqa: SIM115
            return write_end
        if isinstance(target, int) and target >= 0:
            return target
        if hasattr(target, "fileno"):
            return int(target.fileno())
        raise ValueError(f"zygote.popen: {name}={target!r} is not supported")

    try:
        fds = [descriptor("stdin", stdin, 0), descriptor("stdout", stdout, 1)]
        fds.append(fds[1] if stderr == subprocess.STDOUT else descriptor("stderr", stderr, 2))
        request = {
            "module": argv[2],
            "args": list(argv[3:]),
            "cwd": str(cwd),
            "env": env,
            "sigint_ignored": not sigint_default and signal.getsignal(signal.SIGINT) == signal.SIG_IGN,
        }
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            conn.connect(_socket_path())
            socket.send_fds(conn, [json.dumps(request).encode()], fds)
            pid = int(conn.recv(64).decode().removeprefix("pid "))
        except BaseException:
            conn.close()
            raise
    except BaseException:
        for pipe in pipes.values():
            if pipe is not None:
                pipe.close()
        raise
    finally:
        # The write ends closed now (gevent's close, in a pytest process that imported Locust, waits for its
        # loop): the child's end is then the pipes' end.
        for fd in opened:
            close(fd)
    return Forked(list(argv), pid, conn, pipes, text)


def run(
    argv: Sequence[str], cwd: Path | str, env: Mapping[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)`, by a fork of
    the zygote where `forkable`, by subprocess.run otherwise."""
    if not forkable(argv, cwd, env):
        return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=timeout, env=dict(env))
    proc = popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert isinstance(proc, Forked)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # as subprocess.run does: killed, and what it said kept in the exception
        proc.kill()
        stdout, stderr = proc.communicate()
        raise subprocess.TimeoutExpired(list(argv), timeout, output=stdout, stderr=stderr) from None
    except BaseException:  # an interrupted test leaves no run behind
        with proc:
            proc.kill()
        raise
    return subprocess.CompletedProcess(list(argv), proc.returncode, stdout, stderr)


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


def _unpatched_close() -> Any:
    try:
        from gevent.monkey import get_original
    except ImportError:
        return os.close
    return get_original("os", "close")


def _text(data: bytes) -> str:
    # As subprocess (text=True) decodes: the locale's encoding, universal newlines.
    import locale

    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


if __name__ == "__main__":
    serve(sys.argv[1])
