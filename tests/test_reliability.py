"""Reliability, end to end: every fault of the mock inside a healthy run, a short soak, the loss of a
worker, bad configuration at start, and the API key kept out of every output."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import gevent
import gevent.event
import pytest
import requests
from locust import constant
from locust.env import Environment
from locust.event import Events
from locust.exception import StopUser

from bench import soak
from devsupport.ports import free_port
from poolbench_locust import EmbeddingsUser, RerankUser, start_checks
from poolbench_locust.metrics.collector import stats_of
from poolbench_locust.mockserver.faults import FAULTS
from poolbench_locust.options import ALL_OPTIONS
from poolbench_locust.webform import secrets
from tests.support import zygote
from tests.support.bad_values import BAD_VALUES
from tests.support.harness import options
from tests.support.locust_run import ROOT, Completed, csv_rows, locust_argv, run_locust
from tests.support.pooling_csv import assert_pooling_csv_matches
from tests.support.processes import run_and_find_leftovers

LOCUSTFILE = str(ROOT / "bench" / "soak.py")  # declares the User classes named in POOLBENCH_USERS
SHAPE = ["--batch-size", "4", "--input-len", "8", "--documents", "4"]
REQUEST_TIMEOUT_S = 1.0
"""Short, so that stalls end quickly; not shorter, so that a healthy request on a busy machine never times out."""
LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]", re.M)


@contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port bound by nobody else and listened on by nobody: connecting is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def csv_rows_all(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def log_time(stderr: str, marker: str) -> float:
    """Seconds (epoch) of the first Locust log line holding `marker`."""
    line = next(line for line in stderr.splitlines() if marker in line)
    stamp = LOG_TIME.match(line)
    assert stamp, line
    return time.mktime(time.strptime(stamp.group(1)[:19], "%Y-%m-%d %H:%M:%S")) + int(stamp.group(1)[20:]) / 1000


# ---- 1. the fault matrix ------------------------------------------------------------------------

MESSAGES: dict[str, str] = {
    "status-500": r"HTTP 500: .*fault status-500",
    "status-503": r"HTTP 503: .*fault status-503",
    "status-429": r"HTTP 429: .*fault status-429.*\(Retry-After: 1\)",
    "status-400": r"HTTP 400: .*fault status-400",
    "html-error": r"HTTP 502: HTML page: 502 Bad Gateway",
    "reset-before-headers": r"connection reset by the server before the response headers",
    "close-before-headers": r"connection closed by the server before the response headers",
    "reset-mid-body": r"connection reset by the server in the middle of the body",
    "short-content-length": r"body truncated: connection closed before Content-Length bytes arrived",
    "cut-chunk": r"body truncated: connection closed in the middle of the chunked body",
    "stall-before-headers": r"timeout: no response headers within --request-timeout",
    "stall-mid-body": r"timeout: the body did not end within --request-timeout",
    "wrong-content-type": r"wrong content type: expected application/\S+, got application/",
    "garbled-json": r"garbled JSON body: ",
    "missing-usage": r"answer has no token count \(looked for .+\); --require-server-tokens",
    "no-metadata": r"no metadata header in the bytes answer",
    "garbled-metadata": r"metadata header is not valid JSON",
    "metadata-offsets": r"metadata offsets do not match the body",
    "fewer-embeddings": r"expected \d+ (embeddings|results|embeddings in metadata), got \d+",
    "corrupt-gzip": r"corrupt compressed body",
    "zero-vectors": r"embedding is all zeros",
    "nan-vectors": r"embedding holds NaN or infinite values",
}
"""What each fault's failure says; each run mixes faults whose messages no other fault's matches."""

EVERY_ROUTE = (
    "status-500",
    "status-503",
    "status-429",
    "status-400",
    "html-error",
    "close-before-headers",
    "reset-mid-body",
    "short-content-length",
    "cut-chunk",
    "stall-before-headers",
    "stall-mid-body",
    "wrong-content-type",
    "fewer-embeddings",
    "corrupt-gzip",
)
"""Faults that spoil the answer of every route in every encoding (reset-before-headers: its own run)."""
STALLS = frozenset({"stall-before-headers", "stall-mid-body"})
"""Each costs its user --request-timeout: injected more rarely, so that the run keeps its pace."""

# A run mixes only faults that spoil every answer of every User class in it: a fault the mock
# injects where it does not apply is a normal answer, counted as a fault but not as `ok`.
MATRIX: dict[str, tuple[tuple[str, ...], str, tuple[str, ...]]] = {
    "json": (
        ("EmbeddingsUser", "PoolingUser", "RerankUser", "ScoreUser", "ClassifyUser", "CohereEmbedUser"),
        "float",
        (*EVERY_ROUTE, "garbled-json", "missing-usage"),
    ),
    "bytes": (
        ("EmbeddingsUser", "PoolingUser"),
        "bytes",
        (
            *EVERY_ROUTE,
            "missing-usage",
            "no-metadata",
            "garbled-metadata",
            "metadata-offsets",
            "zero-vectors",
            "nan-vectors",
        ),
    ),
    "base64": (
        ("EmbeddingsUser", "PoolingUser", "InfinityEmbeddingsUser"),
        "base64",
        ("zero-vectors", "nan-vectors", "fewer-embeddings", "garbled-json", "missing-usage", "reset-mid-body"),
    ),
    # A reset and a close before the headers, side by side: their messages must differ.
    "before-headers": (("EmbeddingsUser", "RerankUser"), "float", ("reset-before-headers", "close-before-headers")),
}
RESENT_FAULTS = frozenset({"reset-before-headers", "close-before-headers"})
"""Faults that, on a reused connection, are resent once instead of failing (a stale keep-alive connection)."""
MATRIX_USERS = 12
MATRIX_REQUESTS = 1000
"""A matrix run's length in requests (--max-requests), enough for each fault to be injected at its rate: 5 s
of a loaded machine ended 962."""


OWN_RUNS = {
    "packed-short": "tests/test_packed.py (a run of CohereEmbedUser --embedding-type int8, counted once each)",
    "packed-out-of-range": "tests/test_packed.py (the same run)",
    "sparse-bad-index": "tests/test_packed.py (TEISparseEmbedUser against the mock's TEI)",
}
"""Faults that spoil only an answer asked for with options no run of the matrix shares (--embedding-type, TEI's
sparse route): each has its run, counted once with its message, in the file named."""


def test_the_matrix_covers_every_fault_of_the_mock():
    in_matrix = {fault for _, _, faults in MATRIX.values() for fault in faults}
    assert in_matrix | set(OWN_RUNS) == set(FAULTS) and not in_matrix & set(OWN_RUNS)
    assert in_matrix == set(MESSAGES)


def fault_of(error: str, faults: tuple[str, ...]) -> str:
    """The one fault of the run whose message this failure is."""
    matches = [f for f in faults if re.search(MESSAGES[f], error)]
    assert len(matches) == 1, f"{error!r} matches {matches or 'no fault'} of {faults}"
    return matches[0]


@pytest.mark.parametrize("run", list(MATRIX))
def test_every_fault_is_counted_once_with_its_message_and_the_rest_adds_up(mock_server_factory, tmp_path, run):
    users, encoding, faults = MATRIX[run]
    rates = [a for f in faults for a in ("--fault", f"{f}={0.004 if f in STALLS else 0.01}")]
    mock = mock_server_factory(*rates, "--seed", "7")
    prefix, track = tmp_path / run, tmp_path / "users.json"
    started = time.monotonic()
    result = run_locust(
        LOCUSTFILE,
        *(*SHAPE, "--encoding-format", encoding, "--check-vectors", "--request-timeout", str(REQUEST_TIMEOUT_S)),
        "--require-server-tokens",  # missing-usage is a failure only then: a valid answer without a count is not
        *("--stop-timeout", "3"),  # requests in flight at the end finish and count
        *("--exit-code-on-error", "0"),  # the injected failures are expected: any other exit code is an error
        host=mock.url,
        users=MATRIX_USERS,
        requests=MATRIX_REQUESTS,
        csv=prefix,
        env={soak.USERS_ENV: ",".join(users), soak.TRACK_ENV: str(track)},
        timeout=90,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    served = mock.stats()

    # Failures: one per injected fault, each with its fault's message; except that a close or reset before
    # the headers on a reused connection is what a stale keep-alive connection looks like, so that request
    # is resent once on a fresh connection (engine/transport.py) and counted in Retries, not as a failure.
    pooling = assert_pooling_csv_matches(prefix, served)  # tokens and sequences of the successes, exactly
    assert set(pooling) - {"Aggregated"} == set(served["routes"])
    retries = int(pooling["Aggregated"]["Retries"])
    resendable = RESENT_FAULTS.intersection(faults)
    injected = {f: served["faults"].get(f, 0) for f in faults}
    counted = dict.fromkeys(faults, 0)
    for row in csv_rows_all(Path(f"{prefix}_failures.csv")):
        counted[fault_of(row["Error"], faults)] += int(row["Occurrences"])
    assert {f: n for f, n in counted.items() if f not in resendable} == {
        f: n for f, n in injected.items() if f not in resendable
    }, (counted, injected)
    assert sum(counted[f] for f in resendable) + retries == sum(injected[f] for f in resendable), (counted, retries)
    assert all(injected.values()), f"every fault of the run was injected: {injected}"

    # Successes are the rest, and no request is counted twice (or lost): Locust saw what the mock served,
    # less the stale attempts it resent.
    total = csv_rows(Path(f"{prefix}_stats.csv"))["Aggregated"]
    requests_, failures = int(total["Request Count"]), int(total["Failure Count"])
    assert requests_ >= MATRIX_REQUESTS, requests_
    assert requests_ + retries == served["requests"]
    assert failures + retries == sum(served["faults"].values()) and requests_ - failures == served["ok"]
    assert Path(f"{prefix}_exceptions.csv").read_text().count("\n") <= 1, "no client error behind a failure"

    # Every user went on after its failures, to the end of the run: it sent requests after its first failure,
    # or that failure was its last request because the run ended on its count then (the failed request, a
    # stall of up to --request-timeout, was in flight when the run began to stop, or had just ended). A user
    # that died at its first failure ended its last request before the stop, with far fewer requests than the
    # others (a 1,000-request run lasts about 2 s: one killed at its first failure by a mutation of the engine
    # ended 0.25 s before the stop, with 1 request where the median user sent 90).
    per_user = json.loads(track.read_text())
    assert len(per_user) == MATRIX_USERS
    median = statistics.median(u["requests"] for u in per_user)
    stopped = [
        u
        for u in per_user
        if u["failures"] and not u["after"] and u["ended_before_stop_s"] > 0.1 and u["requests"] < median / 2
    ]
    assert not stopped, (stopped, median)
    assert resendable or all(u["failures"] for u in per_user), per_user  # resent faults may spare a user

    # The run ends on its count, not the -t cap, then at most the deadline of the last request (a stall).
    stop = log_time(result.stderr, f"--max-requests {MATRIX_REQUESTS} reached")
    assert "--run-time limit reached" not in result.stderr
    assert log_time(result.stderr, "Shutting down (exit code") - stop < REQUEST_TIMEOUT_S + 3.0
    assert elapsed < 60


def test_connection_refused_mixed_into_a_healthy_run(mock_server):
    """In-process: a User class aimed at a closed port beside healthy ones (one Locust --host would
    aim all classes at one server, and the start-time check refuses a closed --host)."""
    attempts: dict[str, int] = {"Healthy": 0, "Refused": 0}
    stopping = gevent.event.Event()

    def tag(self: Any) -> dict[str, int]:
        return {"user_id": id(self)}

    def counted(name: str) -> Callable[[Any, Any], None]:
        def measure(self: Any, req: Any) -> None:
            # Users end between requests: Locust's stop kills a waiting user at its next switch, which can
            # fall inside the next measure() before anything is sent, after this count.
            if stopping.is_set():
                raise StopUser()
            attempts[name] += 1  # requests sent: each must be exactly one event
            EmbeddingsUser.measure(self, req)

        return measure

    tally = soak.Tally()
    with closed_port() as port:
        classes = [
            type(name, (base,), {"host": host, "wait_time": constant(0.005), "measure": counted(name), "context": tag})
            for name, base, host in (
                ("Healthy", EmbeddingsUser, mock_server.url),
                ("Refused", RerankUser, f"http://127.0.0.1:{port}"),
            )
        ]
        env = Environment(user_classes=classes, parsed_options=options(*SHAPE, "--request-timeout", "2"))
        env.stop_timeout = 5
        pooling = stats_of(env)
        env.events.request.add_listener(pooling.on_request)
        env.events.request.add_listener(tally.on_request)
        runner = env.create_local_runner()
        started = time.monotonic()
        runner.start(6, spawn_rate=100)
        gevent.sleep(3)
        stopping.set()
        while runner.user_count:
            assert time.monotonic() - started < 5, "nothing waits on a refused connection"
            gevent.sleep(0.01)
        runner.quit()
    served = mock_server.stats()
    healthy, refused = env.stats.get("/v1/embeddings", "POST"), env.stats.get("/rerank", "POST")
    assert refused.num_requests == refused.num_failures == attempts["Refused"] > 100
    assert [str(e.error) for e in env.stats.errors.values()] == ["connection refused"]
    assert healthy.num_failures == 0 and healthy.num_requests == attempts["Healthy"] == served["requests"] > 100
    assert pooling.total.requests == env.stats.total.num_requests
    assert pooling.total.input_tokens == served["prompt_tokens"]
    assert len(tally.users) == 6 and all(u["requests"] > 10 for u in tally.users.values())
    assert all(u["after"] for u in tally.users.values() if u["failures"]), "refused users went on"


# ---- 2. soak ----------------------------------------------------------------------------------------


@pytest.mark.timing
def test_short_soak_keeps_memory_fds_and_greenlets_flat_and_every_count_agrees():
    r = soak.soak(seconds=20, users=12, rate=120, fault_rate=0.03, interval=1)
    assert r["agree"], r["counts"]
    assert r["achieved_rate"] > 0.85 * r["target_rate"], r["achieved_rate"]
    assert sum(r["faults"].values()) > 0.01 * r["counts"]["mock_requests"], r["faults"]
    d = r["drift"]
    assert d["rss_mb"]["max"] - d["rss_mb"]["min"] < 8, d["rss_mb"]
    assert d["fds"]["max"] - d["fds"]["min"] <= 6, d["fds"]  # users' sockets, reopened after each broken one
    assert d["greenlets"]["max"] - d["greenlets"]["min"] <= 6, d["greenlets"]


# ---- 3. worker loss --------------------------------------------------------------------------------

WORKERS = 3
USERS_PER_WORKER = 2
USER_RATE = 20.0
RUN_TIME_S = 14.0
REPORT_INTERVAL_S = 3.0
"""Locust's worker report interval (locust.runners.WORKER_REPORT_INTERVAL)."""


def shipped_reports(path: Path) -> list[dict[str, int]]:
    """A worker's cumulative counts as of each report it shipped (bench/soak.py, REPORTS_ENV)."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.timing
def test_a_killed_worker_loses_at_most_its_last_report_interval(mock_server_factory, tmp_path):
    """Each worker aims at its own mock (the classes' own host), so the mocks count per worker.

    The dead worker wrote its cumulative counts at every report it shipped. The master's totals must
    equal exactly what the survivors' mocks served (their final reports carry everything) plus the
    dead worker's counts at its last report (or the one before, had it died between writing that
    line and sending the report). What it served after that is lost: at most one report interval of
    its users' traffic plus their requests in flight.
    """
    mocks = [mock_server_factory() for _ in range(WORKERS)]
    reports = [tmp_path / f"reports-{i}.jsonl" for i in range(WORKERS)]
    port = str(free_port())
    base = {soak.USERS_ENV: "EmbeddingsUser", soak.RATE_ENV: str(USER_RATE)}
    # The survivors go quiet before the run ends, or Locust's stop race (bench/soak.py, QUIET_AFTER_ENV) has
    # their mocks count a request their stats never see: seen in CI on a busy machine, one such a survivor.
    quiet = {soak.QUIET_AFTER_ENV: str(RUN_TIME_S - soak.QUIET_S)}
    workers = [
        zygote.popen(
            locust_argv(LOCUSTFILE, *SHAPE, *f"--worker --master-host 127.0.0.1 --master-port {port}".split()),
            cwd=ROOT,
            env={**os.environ, **base, soak.HOST_ENV: mock.url, soak.REPORTS_ENV: str(path), **quiet},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for mock, path in zip(mocks, reports, strict=True)
    ]
    prefix = tmp_path / "dist"
    master = zygote.popen(
        locust_argv(
            LOCUSTFILE,
            *SHAPE,
            *f"--master --master-bind-host 127.0.0.1 --master-bind-port {port} --expect-workers {WORKERS}".split(),
            *("--stop-timeout", "3"),
            headless=True,
            users=WORKERS * USERS_PER_WORKER,
            spawn_rate=100,
            run_time=f"{RUN_TIME_S:g}s",
            csv=prefix,
        ),
        cwd=ROOT,
        env={**os.environ, **base, soak.HOST_ENV: mocks[0].url},  # a class host: no --host, no embedded mock
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    doomed = workers[-1]
    try:
        deadline = time.monotonic() + 30
        while not shipped_reports(reports[-1])[-1:] or not shipped_reports(reports[-1])[-1]["requests"]:
            assert time.monotonic() < deadline and master.poll() is None, "the worker never reported requests"
            time.sleep(0.1)
        time.sleep(1.0)  # between two reports: some of its requests are not reported yet
        doomed.send_signal(signal.SIGKILL)
        _, stderr = master.communicate(timeout=60)
    finally:
        for w in workers:
            if w.poll() is None and w is not doomed:
                w.wait(timeout=30)
        doomed.wait(timeout=5)
    assert master.returncode == 0, stderr[-3000:]
    assert "failed to send heartbeat, setting state to missing" in stderr, "the master logs the loss"

    survivors = [m.stats() for m in mocks[:-1]]
    lost_worker = mocks[-1].stats()
    shipped = shipped_reports(reports[-1])
    total = csv_rows(Path(f"{prefix}_stats.csv"))["Aggregated"]
    merged = int(total["Request Count"])
    assert int(total["Failure Count"]) == 0
    from_dead = merged - sum(s["requests"] for s in survivors)
    candidates = [r for r in shipped[-2:] if r["requests"] == from_dead]
    assert candidates, f"master holds {from_dead} of the dead worker's requests; it reported {shipped[-2:]}"
    reported = candidates[-1]
    served_tokens = sum(s["prompt_tokens"] for s in survivors) + reported["input_tokens"]
    served_sequences = sum(s["sequences"] for s in survivors) + reported["sequences"]
    received = sum(s["bytes_received"] for s in survivors) + reported["sent_bytes"]
    assert_pooling_csv_matches(
        prefix, {"prompt_tokens": served_tokens, "sequences": served_sequences, "bytes_received": received}
    )

    lost = lost_worker["requests"] - reported["requests"]
    bound = USERS_PER_WORKER * USER_RATE * (REPORT_INTERVAL_S + 0.5) + USERS_PER_WORKER
    assert 0 <= lost <= bound, (lost, bound)


# ---- 4. bad configuration ---------------------------------------------------------------------------

FREE_TEXT = {
    "--model",
    "--input-type",
    "--infer-input",
    "--infer-output",
    "--api-key",
    "--tokenizer",
    "--ca-bundle",
    "--dataset-column",
    "--prometheus-host",
}
"""Options whose every text is a value argparse accepts."""
CHECKED = [o.flag for o in ALL_OPTIONS if not o.is_flag and o.flag not in FREE_TEXT]


def test_every_option_with_a_parser_has_a_bad_value_here():
    assert set(CHECKED) <= set(BAD_VALUES), set(CHECKED) - set(BAD_VALUES)


def error_lines(result: Completed) -> list[str]:
    return [line for line in result.stderr.splitlines() if "ERROR" in line or "error:" in line]


def assert_stops_at_start(result: Completed, message: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-2000:]
    assert "Traceback" not in output, output[-3000:]
    lines = error_lines(result)
    assert len(lines) == 1 and message in lines[0], lines or output[-2000:]
    assert "Aggregated" not in output, "no request was sent"


def run_many(runs: list[Callable[[], Completed]]) -> list[Completed]:
    """Locust processes side by side: each is mostly its import time, and these end at start."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda run: run(), runs))


@pytest.mark.parametrize("source", ["flag", "env"])
@pytest.mark.parametrize("flag", CHECKED)
def test_bad_value_of_each_option_stops_at_start_with_one_line(monkeypatch, capsys, flag, source):
    """The parser Locust's main uses, in-process (tests/test_cli.py runs a few of these as processes)."""
    bad, message = BAD_VALUES[flag]
    if source == "env":
        monkeypatch.setenv(next(o.env_var for o in ALL_OPTIONS if o.flag == flag), bad)
    with pytest.raises(SystemExit) as stop:
        options(*([flag, bad] if source == "flag" else []))
    assert stop.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and f"error: argument {flag}: {message}" in lines[0], lines


COMBINATIONS = [
    (["--sweep-rates", "10,20", "--sweep-users", "4,8"], "--sweep-rates: choose --sweep-rates or --sweep-users"),
    (["--sweep-rates", "10,20", "--request-rate", "5"], "--request-rate: --sweep-rates sets the rate of each step"),
    (["--max-concurrency", "4"], "--max-concurrency: caps an open-loop run"),
]
NO_ENDPOINT = """
    import poolbench_locust as pb


    class Forgetful(pb.EndpointUser):
        weight = 1
"""


@pytest.fixture(scope="module")
def start_results(tmp_path_factory) -> dict[str, Completed]:
    """Every host form that cannot be load-tested, bad combinations and a User class that is missing
    its endpoint, each started as users start it (the web UI too)."""
    forgetful = tmp_path_factory.mktemp("locustfile") / "forgetful.py"
    forgetful.write_text(textwrap.dedent(NO_ENDPOINT))

    def headless(host: str, *args: str, locustfile: str = "locustfiles/embeddings.py") -> Callable[[], Completed]:
        return partial(run_locust, locustfile, *args, run_time="2s", host=host, timeout=60)

    with closed_port() as port, closed_port() as web_port:
        closed = f"http://127.0.0.1:{port}"
        runs: dict[str, Callable[[], Completed]] = {
            "no scheme": headless("127.0.0.1:8000"),
            "other scheme": headless("ftp://127.0.0.1:21"),
            "no host name": headless("http://:8000"),
            "port out of range": headless("http://127.0.0.1:99999"),
            "unresolvable name": headless("http://pooling-server.invalid:8000"),
            "closed port": headless(closed),
            "closed port, web UI": partial(
                run_locust,
                "locustfiles/embeddings.py",
                *("--autostart", "--web-host", "127.0.0.1", "--web-port", str(web_port)),
                headless=False,
                run_time="2s",
                host=closed,
                timeout=60,
            ),
            "credentials hidden": headless(closed.replace("//", "//user:hunter2@")),
            **{f"combination {i}": headless(closed, *args) for i, (args, _) in enumerate(COMBINATIONS)},
            "no endpoint": headless(closed, locustfile=str(forgetful)),
        }
        return dict(zip(runs, run_many(list(runs.values())), strict=True))


HOST_CASES = {
    "no scheme": "--host 127.0.0.1:8000: not an http:// or https:// URL with a host",
    "other scheme": "--host ftp://127.0.0.1:21: not an http:// or https:// URL",
    "no host name": "--host http://:8000: not an http:// or https:// URL with a host",
    "port out of range": "--host http://127.0.0.1:99999: the port must be a number in 1..65535",
    "unresolvable name": "--host http://pooling-server.invalid:8000: cannot resolve pooling-server.invalid",
    "closed port": ": connection refused (nothing listens there)",
    "closed port, web UI": ": connection refused (nothing listens there)",  # --autostart: the run starts now
    "credentials hidden": "--host http://***@127.0.0.1:",
    **{f"combination {i}": message for i, (_, message) in enumerate(COMBINATIONS)},
    "no endpoint": "Forgetful: declares no endpoint; set `endpoint = Endpoint(...)`",
}


@pytest.mark.parametrize("case", list(HOST_CASES))
def test_unreachable_host_bad_combination_or_missing_endpoint_stops_at_start(start_results, case):
    result = start_results[case]
    assert_stops_at_start(result, HOST_CASES[case])
    assert "hunter2" not in result.stdout + result.stderr


def test_processes_stopping_at_start_leave_no_worker_behind():
    with closed_port() as port:
        argv = locust_argv(
            "locustfiles/embeddings.py",
            *("--processes", "2", "--loglevel", "DEBUG"),  # DEBUG: the master says which worker it had to end
            headless=True,
            run_time="2s",
            host=f"http://127.0.0.1:{port}",
        )
        code, output, left = run_and_find_leftovers(argv, grace=1.0)
    assert code == 1 and "connection refused" in output, output[-3000:]
    outlived = "worker processes outlived the master that stopped at start"
    assert [p.info for p in left] == [], f"{outlived}:\n{output[-3000:]}"


def test_a_host_typed_into_the_web_ui_is_checked_before_users_spawn(mock_server, caplog):
    env = Environment(user_classes=[EmbeddingsUser], parsed_options=options(), host=mock_server.url)
    runner = env.create_local_runner()
    start_checks.on_test_start(env)
    assert runner.state == "ready" and not caplog.records
    with closed_port() as port:
        env.host = f"http://127.0.0.1:{port}"  # what the form's host field does before the test starts
        start_checks.on_test_start(env)
        gevent.sleep(0.1)
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == [
        f"--host {env.host}: cannot connect to 127.0.0.1:{port}: connection refused (nothing listens there)"
    ]
    assert runner.state == "stopped"
    runner.quit()


# ---- 5. secrets -------------------------------------------------------------------------------------

SECRET = "sk-poolbench-TOPSECRET-4b1d"
WEB_PATHS = ("/", "/stats/requests", "/pooling/stats", "/pooling/csv", "/stats/report", "/logs", "/tasks")
WEB_PATHS += ("/exceptions", "/stats/requests/csv", "/stats/failures/csv")
WEB_PATHS += ("/pooling/history", "/pooling/charts")


@pytest.mark.parametrize(
    ("args", "env"),
    [(["--api-key", SECRET], {}), ([], {"OPENAI_API_KEY": SECRET})],
    ids=["--api-key", "OPENAI_API_KEY"],
)
def test_the_api_key_appears_in_no_output(mock_server_factory, tmp_path, args, env):
    mock = mock_server_factory("--fault", "status-503=0.05", "--seed", "2")
    port = free_port()
    prefix, report, logfile = tmp_path / "run", tmp_path / "report.html", tmp_path / "locust.log"
    proc = zygote.popen(
        locust_argv(
            "locustfiles/demo.py",
            *(*SHAPE, *args),
            *f"--web-host 127.0.0.1 --web-port {port} --autostart --autoquit 1".split(),
            *("--html", str(report), "--logfile", str(logfile)),
            users=2,
            run_time="5s",
            host=mock.url,
            csv=prefix,
        ),
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pages: dict[str, str] = {}
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        # Every page once the run has figures (the page "/" costs 0.3 s of CPU to build: fetched every half second
        # with the others, a busy machine fetched none before the run ended).
        while time.monotonic() < deadline and not pages:
            time.sleep(0.5)
            try:
                if "Aggregated" in requests.get(base + "/pooling/stats", timeout=5).text:
                    pages = {path: requests.get(base + path, timeout=10).text for path in WEB_PATHS}
            except requests.RequestException:
                continue
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode in (0, 1), stderr[-3000:]  # 1: the injected 503s
    assert "extra_options" in pages.get("/", ""), "the web UI page was fetched"
    if "OPENAI_API_KEY" not in env:  # a key in Locust's own options: its field shows the placeholder
        assert secrets.PLACEHOLDER in pages["/"]
    outputs = {"stdout": stdout, "stderr": stderr, **{f"web {p}": t for p, t in pages.items()}}
    outputs |= {f.name: f.read_text(errors="replace") for f in tmp_path.iterdir() if f.is_file()}
    assert {"run_stats.csv", "run_pooling.csv", "report.html", "locust.log"} <= set(outputs)
    assert [name for name, text in outputs.items() if SECRET in text] == []


def test_a_web_ui_form_sent_back_with_the_placeholder_keeps_the_key(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["locust"])  # Locust's page parses sys.argv for the form's defaults
    env = Environment(user_classes=[EmbeddingsUser], parsed_options=options("--api-key", SECRET), events=Events())
    runner = env.create_local_runner()
    web = env.create_web_ui("127.0.0.1", 0, delayed_start=True)
    secrets.install(env, web)
    assert SECRET not in web.app.test_client().get("/").get_data(as_text=True)

    def start(api_key: str) -> None:
        # no users: the run starts (test_start) and sends nothing
        form = {"user_count": "0", "spawn_rate": "1", "host": "http://127.0.0.1:9", "api_key": api_key}
        assert web.app.test_client().post("/swarm", data=form).get_json()["success"]
        gevent.sleep(0.2)
        runner.stop()

    start(secrets.PLACEHOLDER)  # what the form sends when left as it is
    assert env.parsed_options.api_key == SECRET
    start("sk-typed-into-the-form")
    assert env.parsed_options.api_key == "sk-typed-into-the-form" == env.poolbench_secrets["api_key"]
    start(secrets.PLACEHOLDER)
    assert env.parsed_options.api_key == "sk-typed-into-the-form"
    runner.quit()
