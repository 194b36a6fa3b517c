"""What the bench/ scripts share: the mock server in its own process, headless Locust runs, their CSV
files, the OS's CPU and peak-RSS accounting, request bodies, tables and result files.

Everything binds or targets 127.0.0.1, and every child process is bounded in time (killed past it).
`probe()` runs inside a Locust process (the bench locustfiles call it): it takes the process's own
CPU time (getrusage) and request count at the start and the end of the measured window, and keeps
each request's reported time when asked to.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import re
import select
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devsupport.subprocesses import stop

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "bench"
RESULTS = HERE / "results"
PYTHON = sys.executable
CHILD_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
MOCK_PREFIX = "poolbench-mock listening on "
EMBEDDINGS = "/v1/embeddings"
RECEIVE_BUFFER = 4 * 1024 * 1024
"""SO_RCVBUF the Locust clients' connections ask for when a bench pins it (run_client's receive_buffer):
larger than any answer measured, so no answer fills the receiver's window (see pin_receive_buffer)."""


# ---------------------------------------------------------------- the mock server, in its own process


class Mock:
    """`python -m poolbench_locust.mockserver` on a free loopback port, stopped on exit."""

    def __init__(self, *flags: str) -> None:
        cmd = [PYTHON, "-m", "poolbench_locust.mockserver", "--host", "127.0.0.1", "--port", "0", *flags]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT, env=CHILD_ENV)
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 15)
        line = self.proc.stdout.readline().decode() if ready else ""
        if not line.startswith(MOCK_PREFIX):
            self.close()
            raise RuntimeError(f"the mock server did not start: {line!r}")
        self.url = line.removeprefix(MOCK_PREFIX).strip()
        self.host, self.port = "127.0.0.1", int(self.url.rsplit(":", 1)[1])

    def _call(self, method: str, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(urllib.request.Request(self.url + path, method=method), timeout=10) as resp:
            return json.loads(resp.read())

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "/mock/stats")

    def reset(self) -> None:
        self._call("POST", "/mock/reset")

    def server_ms(self) -> list[float]:
        """Each pooling request's time on the server since the last reset, in order (/mock/timings)."""
        return self._call("GET", "/mock/timings")["server_ms"]

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def close(self) -> None:
        if self.proc.poll() is None:
            stop(self.proc)

    def __enter__(self) -> Mock:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a running process, from /proc/<pid>/stat (the kernel's own accounting)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- child processes


@dataclass
class Finished:
    returncode: int
    cpu_s: float
    """utime + stime of the child and the children it waited for (wait4's rusage)."""
    peak_rss_mb: float
    """The largest peak RSS of the child or one of its children (ru_maxrss, the kernel's VmHWM)."""
    wall_s: float
    stderr: str


def run(cmd: Sequence[str], timeout: float, env: dict[str, str] | None = None, cwd: Path = ROOT) -> Finished:
    """Run a command to its end (killed after `timeout` seconds), with the kernel's accounting of it."""
    with tempfile.TemporaryFile() as err:
        started = time.monotonic()
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=env or CHILD_ENV, stdout=subprocess.DEVNULL, stderr=err)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    return Finished(
        proc.returncode,
        usage.ru_utime + usage.ru_stime,
        round(usage.ru_maxrss / 1024, 1),
        time.monotonic() - started,
        stderr,
    )


@dataclass
class LocustRun:
    finished: Finished
    stats: dict[str, str]
    """The Aggregated row of PREFIX_stats.csv."""
    pooling: dict[str, str] | None
    """The Aggregated row of PREFIX_pooling.csv (poolbench-locust runs only)."""
    probe: dict[str, Any] = field(default_factory=dict)
    """What `probe()` wrote from inside the Locust process."""


def run_locust(
    locustfile: str | Path,
    args: Sequence[str],
    seconds: float,
    *,
    classes: Sequence[str] = (),
    env: dict[str, str] | None = None,
    warmup: float = 0.0,
    record: bool = False,
    stop_timeout: float = 10.0,
    cwd: Path = ROOT,
) -> LocustRun:
    """One headless Locust run of `seconds` (in-flight requests finish within --stop-timeout)."""
    with tempfile.TemporaryDirectory() as tmp:
        prefix, probe_out = f"{tmp}/run", f"{tmp}/probe.json"
        cmd = [PYTHON, "-m", "locust", "-f", str(locustfile), "--headless", "--only-summary", "--csv", prefix]
        cmd += ["-t", f"{seconds:g}s", "--stop-timeout", f"{stop_timeout:g}s", *args, *classes]
        child_env = {**CHILD_ENV, **(env or {}), "BENCH_PROBE_OUT": probe_out, "BENCH_WARMUP": str(warmup)}
        if record:
            child_env["BENCH_RECORD"] = "1"
        finished = run(cmd, seconds + stop_timeout + 60, child_env, cwd)
        if finished.returncode not in (0, 1):  # 1: some request failed, which the tables show
            raise RuntimeError(f"locust exited {finished.returncode}: {' '.join(cmd)}\n{finished.stderr[-3000:]}")
        stats = csv_row(f"{prefix}_stats.csv")
        pooling = csv_row(f"{prefix}_pooling.csv") if Path(f"{prefix}_pooling.csv").exists() else None
        probe_data = json.loads(Path(probe_out).read_text()) if Path(probe_out).exists() else {}
    return LocustRun(finished, stats, pooling, probe_data)


def csv_row(path: str | Path, name: str = "Aggregated") -> dict[str, str]:
    with open(path, newline="") as f:
        return next(row for row in csv.DictReader(f) if row["Name"] == name)


# ---------------------------------------------------------------- the clients compared


PAIR_ROUTES = {"/rerank": "RerankUser", "/score": "ScoreUser"}
"""The pairs routes a Payload may name, and poolbench-locust's User class for each."""


@dataclass(frozen=True)
class Payload:
    """One request shape: `batch` inputs of `words` words answered in `encoding` on /v1/embeddings, or, on a
    route of PAIR_ROUTES, a query and `batch` documents (then `encoding` and `dims` are unused)."""

    encoding: str
    batch: int
    dims: int
    words: int = 3
    route: str = EMBEDDINGS

    def body(self) -> bytes:
        if self.route in PAIR_ROUTES:
            return pairs_body(self.route, self.batch, self.words)
        return embeddings_body(self.batch, self.words, self.encoding, self.dims)

    @property
    def user_class(self) -> str:
        return PAIR_ROUTES.get(self.route, "EmbeddingsUser")

    def poolbench_args(self) -> list[str]:
        if self.route in PAIR_ROUTES:
            shape: dict[str, Any] = {"--documents": self.batch}
        else:
            shape = {"--encoding-format": self.encoding, "--batch-size": self.batch, "--dimensions": self.dims}
        return [str(x) for item in {**shape, "--input-len": self.words}.items() for x in item]


@dataclass(frozen=True)
class Client:
    label: str
    kind: str
    """poolbench (bench/poolbench_locustfile.py), locust (a class of bench/plain_locustfile.py) or aiohttp."""
    name: str = ""
    """The plain Locust class, or vllm_client.py's --impl."""
    env: tuple[tuple[str, str], ...] = ()
    """Environment variables of a Locust client's process: its options (LOCUST_...)."""


POOLBENCH = Client("poolbench-locust", "poolbench")
POOLBENCH_NO_CONSISTENCY = Client(
    "poolbench-locust --no-consistency", "poolbench", env=(("LOCUST_NO_CONSISTENCY", "true"),)
)
FAST_STREAM = Client("FastHttpUser stream=True", "locust", "FastStream")
FAST = Client("FastHttpUser (reads body)", "locust", "FastBuffered")
FAST_JSON = Client("FastHttpUser + resp.json()", "locust", "FastJson")
FAST_ORJSON = Client("FastHttpUser + orjson.loads", "locust", "FastOrjson")
FAST_SIMDJSON = Client("FastHttpUser + simdjson parse", "locust", "FastSimdjson")
REQUESTS = Client("HttpUser (requests)", "locust", "Requests")


def vllm_clients(headers_too: bool = False) -> tuple[list[Client], str]:
    """vLLM's own request function, or our faithful aiohttp loop where it cannot be had (and why)."""
    from bench import vllm_client

    path, note = vllm_client.prepare()
    clients = [Client("vLLM endpoint_request_func", "aiohttp", "vllm")] if path else []
    clients = clients or [Client("aiohttp loop as vLLM's (own)", "aiohttp", "loop")]
    if headers_too:
        clients.append(Client("aiohttp, clock at headers (own)", "aiohttp", "headers"))
    return clients, note


@dataclass
class ClientRun:
    samples: list[list[Any]]
    """[reported ms, ttfb ms or None, ok] per request, when recorded."""
    window: dict[str, float]
    finished: Finished
    peak_rss_mb: float | None = None
    """The client process's own peak RSS (VmHWM of its own memory), where it reported it; see own_peak_rss_mb."""
    receive_buffer: int | None = None
    """SO_RCVBUF of the client's connections as the kernel set it, where the bench pinned it."""


def run_client(
    client: Client,
    url: str,
    payload: Payload,
    seconds: float,
    *,
    users: int = 1,
    rate: float | None = None,
    warmup: float = 0.0,
    record: bool = False,
    receive_buffer: int | None = None,
) -> ClientRun:
    """Run one client process against `url`: `users` closed loops, or `rate` requests/s in all.

    `receive_buffer`: the SO_RCVBUF of a Locust client's connections (pin_receive_buffer); None leaves
    the kernel's autotuning. vLLM's client and the aiohttp loop are not pinned (aiohttp sets no buffer).
    """
    with body_file(payload.body()) as body:
        if client.kind == "aiohttp":
            with tempfile.TemporaryDirectory() as tmp:
                out = f"{tmp}/out.json"
                cmd = [PYTHON, str(HERE / "vllm_client.py"), "--url", url, "--body-file", body, "--out", out]
                cmd += ["--impl", client.name, "--seconds", f"{seconds:g}", "--warmup", f"{warmup:g}"]
                cmd += ["--rate", f"{rate:g}"] if rate else ["--concurrency", str(users)]
                finished = run(cmd, seconds + 120)
                if finished.returncode != 0:
                    raise RuntimeError(f"{client.label} failed:\n{finished.stderr[-3000:]}")
                data = json.loads(Path(out).read_text())
            return ClientRun(data["samples"], data["window"], finished)
        env = {"BENCH_BODY_FILE": body, "BENCH_ROUTE": payload.route, "BENCH_USER_CLASS": payload.user_class}
        env |= dict(client.env)
        tree = ROOT
        if client.kind == "poolbench" and client.name:  # another checkout of poolbench-locust, measured beside
            # `python -m locust` puts its working directory first on sys.path: the checkout's, not this one
            tree = Path(client.name).resolve()
            env["PYTHONPATH"] = os.pathsep.join([str(tree), CHILD_ENV["PYTHONPATH"]])
        if rate:
            env["BENCH_USER_RATE"] = f"{rate / users:g}"
        if receive_buffer:
            env["BENCH_RCVBUF"] = str(receive_buffer)
        load = ["-u", str(users), "-r", str(users), "--host", url]
        if client.kind == "poolbench":
            r = run_locust(
                HERE / "poolbench_locustfile.py",
                [*load, *payload.poolbench_args()],
                seconds,
                env=env,
                warmup=warmup,
                record=record,
                cwd=tree,
            )
        else:
            r = run_locust(
                HERE / "plain_locustfile.py",
                load,
                seconds,
                classes=[client.name],
                env=env,
                warmup=warmup,
                record=record,
            )
    samples, window_, rss = r.probe.get("samples", []), r.probe.get("window") or {}, r.probe.get("peak_rss_mb")
    return ClientRun(samples, window_, r.finished, rss, r.probe.get("receive_buffer"))


# ---------------------------------------------------------------- inside a Locust process


def probe() -> None:
    """Listen to this Locust process: CPU seconds and requests of the window, each request's time.

    The window opens BENCH_WARMUP seconds after the test starts and closes when it stops; with
    BENCH_RECORD=1 every request's response_time (and the engine's ttfb_ms) is kept. Written as
    JSON to BENCH_PROBE_OUT when Locust quits.
    """
    out = os.environ.get("BENCH_PROBE_OUT")
    if not out:
        return
    pinned = pin_receive_buffer(int(os.environ.get("BENCH_RCVBUF") or 0))
    import resource

    import gevent
    from locust import events

    warmup = float(os.environ.get("BENCH_WARMUP") or 0)
    marks: dict[str, Any] = {}
    samples: list[tuple[float, float | None, bool]] = []

    def snapshot(environment: Any) -> dict[str, float]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        total = environment.stats.total
        return {
            "time": time.monotonic(),
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "requests": total.num_requests,
            "failures": total.num_failures,
            "bytes": total.total_content_length,
        }

    @events.init.add_listener
    def on_init(**_: Any) -> None:
        # gevent's loop clock stands still until the loop first runs: in a locustfile that used no
        # gevent before Locust set its --run-time timer, the seconds of imports before it were taken
        # off the run (a 5 s run of a plain FastHttpUser stopped after 1.2 s, before the window opened).
        gevent.get_hub().loop.update_now()

    if os.environ.get("BENCH_RECORD") == "1":

        @events.request.add_listener
        def on_request(response_time: float, exception: Any, context: dict[str, Any], **_: Any) -> None:
            samples.append((response_time, context.get("ttfb_ms"), exception is None))

    @events.test_start.add_listener
    def on_start(environment: Any, **_: Any) -> None:
        def mark() -> None:
            gevent.sleep(warmup)
            marks["start"] = snapshot(environment)

        gevent.spawn(mark)

    @events.test_stop.add_listener
    def on_stop(environment: Any, **_: Any) -> None:
        marks["end"] = snapshot(environment)

    @events.quitting.add_listener
    def on_quit(environment: Any, **_: Any) -> None:
        report = {"window": window(marks), "samples": samples, "peak_rss_mb": own_peak_rss_mb()}
        report["receive_buffer"] = pinned[0] if pinned else None
        Path(out).write_text(json.dumps(report))


def pin_receive_buffer(size: int) -> list[int]:
    """Give every connection geventhttpclient opens in this process an SO_RCVBUF of `size` (0: leave it);
    returns a list that takes the size the kernel set on the first one (it doubles what is asked, up to
    twice net.core.rmem_max).

    Why: with the kernel's autotuned receive buffer, a 691 kB answer on loopback filled the client's
    window 2.4 to 5 times per answer (TcpExt TCPToZeroWindowAdv; 7 to 12 pure ACKs per answer), so the
    sender stalled and was restarted by the client's window updates, whose processing, and the sending
    they release, the kernel runs in the client's system call and charges to the client. How far the
    buffer has grown depends on each connection's history, and a plain FastHttpUser's CPU per request
    on large bodies moved between rounds (0.59 to 1.17 ms in 9 closed-loop runs of a throwaway client).
    With 4 MB asked (before connect, which fixes the window scale), no window filled (0.0 per answer,
    1 pure ACK) and 12 runs stayed within 0.98 to 1.06 ms: every client is measured with the same buffer,
    and the figures measure the client, not the buffer's history. The mock writes a body in one
    sendall already; its SO_SNDBUF changed nothing (the windows still filled).
    """
    got: list[int] = []
    if size <= 0:
        return got
    import socket

    from geventhttpclient.connectionpool import ConnectionPool

    create = ConnectionPool._create_tcp_socket

    def create_pinned(self: ConnectionPool, family: int, socktype: int, protocol: int) -> Any:
        sock = create(self, family, socktype, protocol)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
        if not got:
            got.append(sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
        return sock

    ConnectionPool._create_tcp_socket = create_pinned  # type: ignore[method-assign]
    return got


def own_peak_rss_mb() -> float | None:
    """This process's peak RSS since its exec (VmHWM), in MB; None off Linux.

    Not wait4's ru_maxrss: the kernel folds the image a child was spawned from into that figure, so a
    Locust started from a pytest process of 200 MB reports 200 MB however little it used itself (in
    CI, a 100 MB body's growth read as 80 MB).
    """
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return round(int(match.group(1)) / 1024, 1) if match else None


def window(marks: dict[str, Any]) -> dict[str, float] | None:
    """What happened between the start and end snapshots: seconds, CPU seconds, requests, bytes."""
    if "start" not in marks or "end" not in marks:
        return None
    start, end = marks["start"], marks["end"]
    return {key: end[key] - start[key] for key in ("time", "cpu_s", "requests", "failures", "bytes")}


# ---------------------------------------------------------------- requests, tables, results


def embeddings_body(batch: int, words: int, encoding: str, dims: int) -> bytes:
    """A /v1/embeddings request like poolbench-locust's: `batch` inputs of `words` words each."""
    texts = [" ".join(f"w{i}x{j}" for j in range(words)) for i in range(batch)]
    doc = {"model": "mock-model", "input": texts, "encoding_format": encoding, "dimensions": dims}
    return json.dumps(doc).encode()


def pairs_body(route: str, documents: int, words: int) -> bytes:
    """A /rerank or /score request like poolbench-locust's: a query and `documents` documents of `words` words."""
    docs = [" ".join(f"d{i}x{j}" for j in range(words)) for i in range(documents)]
    query = " ".join(f"q{j}" for j in range(words))
    pair = {"query": query, "documents": docs} if route == "/rerank" else {"text_1": query, "text_2": docs}
    return json.dumps({"model": "mock-model", **pair}).encode()


@contextlib.contextmanager
def body_file(body: bytes) -> Iterator[str]:
    """The request body in a temporary file, for a child process to read (BENCH_BODY_FILE)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        f.write(body)
        f.flush()
        yield f.name


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (fraction in (0, 1])."""
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(fraction * len(ordered)))) - 1]


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))

    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths), *(line(r) for r in cells[1:])])


def _cpu_ticks() -> list[int]:
    """The machine's CPU time by kind since boot (/proc/stat): user nice system idle iowait irq softirq steal."""
    return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]


_TICKS_AT_START = _cpu_ticks()


def steal_percent() -> float:
    """Share of the machine's CPU time the hypervisor gave to others since this module was imported:
    when it is high, a virtual machine's cores are not all its own and CPU figures move with it."""
    ticks = [now - then for now, then in zip(_cpu_ticks(), _TICKS_AT_START, strict=True)]
    return round(100 * ticks[7] / max(sum(ticks), 1), 1)


def machine_line() -> str:
    """The machine, for the end of a printed table."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"machine: {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}, load {load}, CPU steal {steal_percent()} %"


def write_result(name: str, data: dict[str, Any]) -> Path:
    """bench/results/<name>.json, with the machine's core count, the date, the load average (1, 5,
    15 min) as the run ended and the CPU steal during it: other work on the machine shows there."""
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{name}.json"
    machine = {"cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d"), "loadavg": os.getloadavg()}
    machine["cpu_steal_percent"] = steal_percent()
    out.write_text(json.dumps({**data, **machine}, indent=2) + "\n")
    return out
