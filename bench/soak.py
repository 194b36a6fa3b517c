"""Soak: does memory stay flat over a long run? poolbench-locust beside a plain FastHttpUser.

    python bench/soak.py [--minutes 30] [--users 8] [--rate 800] [--reset-rate 0.02]
    python bench/soak.py --counts [--minutes 3] [--users 20] [--rate 200] [--fault-rate 0.03]

By default (issue 29.9): two headless Locust processes run side by side for `--minutes`, each
against its own bundled mock server (its own process, `--fault reset-mid-body=RATE`: a connection
reset mid-body every 50th answer), `--users` users each sending `--rate` requests/s in all, small
float JSON embeddings: poolbench-locust with `--json-result`, `--csv` and `--prometheus-port` (scraped
every sample, as Prometheus would), and Locust's FastHttpUser (bench/plain_locustfile.py) with the
same `--csv`. Both run under `nice`, sized for two shared cores. Every ~10 s this script reads each
Locust process's RSS from /proc/PID/status and prints, per process, the least-squares slope of RSS in
MB/min over the last 10 minutes (the last third of a run shorter than 30 minutes), and whether
poolbench-locust's is at most 0.02 MB/min and not above the plain client's. Results go to
`bench/results/soak.json`.

With --counts: minutes of steady load with 1-5 % injected faults; RSS, open fds and greenlets stay
flat and every count agrees. The bundled mock server runs in its own process with `--fault
NAME=RATE` (a mix of statuses, broken wire and stalls past --request-timeout) and a seed; one
headless Locust process sends `--rate` requests/s (constant_throughput per user) to /v1/embeddings
and /rerank. That process samples itself (RSS and open fds from /proc/self, live greenlets from gc)
every few seconds. At the end, Locust's CSV, the pooling CSV and the mock's own counts must agree
exactly. Results go to `bench/results/soak_counts.json`.

This file is also the locustfile of that run and of tests/test_reliability.py: loaded by Locust
with POOLBENCH_USERS set, it declares those poolbench_locust User classes, tagged per user
(`context()["user_id"]`), and writes what the environment variables below ask for.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/soak.py`, or loaded by Locust as a locustfile
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    CHILD_ENV,
    HERE,
    PYTHON,
    ROOT,
    Mock,
    Payload,
    body_file,
    csv_row,
    machine_line,
    run_locust,
    write_result,
)
from devsupport.ports import free_port

USERS_ENV = "POOLBENCH_USERS"
"""Comma-separated names of poolbench_locust User classes to declare (unset: no locustfile role)."""
RATE_ENV = "POOLBENCH_USER_RATE"
"""Requests/s of each user (constant_throughput); unset: a closed loop with no wait."""
HOST_ENV = "POOLBENCH_CLASS_HOST"
"""A `host` for the classes themselves: each worker of a run may then aim at its own server."""
SAMPLES_ENV = "POOLBENCH_SAMPLES"
"""JSON-lines file: a sample of this process (RSS, fds, greenlets) every POOLBENCH_SAMPLE_S seconds."""
SAMPLE_S_ENV = "POOLBENCH_SAMPLE_S"
TRACK_ENV = "POOLBENCH_TRACK"
"""JSON file written at quitting: requests, failures and requests after the first failure, per user."""
REPORTS_ENV = "POOLBENCH_REPORTS"
"""JSON-lines file of a worker: its cumulative counts as of each report it ships to the master."""
QUIET_AFTER_ENV = "POOLBENCH_QUIET_AFTER"
"""Seconds after its first user started from which a user sends no more (it only waits): when Locust's run
time ends, no request is in flight. Locust stops a waiting user by throwing GreenletExit into it later, from
the hub; a user whose wait ended just then has sent its next request before the throw lands, and that
request reaches the server but never Locust's stats: the counts then disagree by Locust's race, not ours."""
QUIET_S = 2.0
"""How long before the end of a counted run its users go quiet: past the request timeout, so the last
request has ended."""

SOAK_USERS = ("EmbeddingsUser", "RerankUser")
SOAK_FAULTS = ("status-503", "reset-mid-body", "stall-before-headers", "garbled-json")
"""Injected in equal shares: each fails differently (answer, wire, deadline, body)."""
REQUEST_TIMEOUT_S = 1.0
STEADY_AFTER = 0.25
"""Share of the run (warm-up: imports, connection pools, first allocations) left out of the drift."""


# ---- the locustfile ----------------------------------------------------------------------------


class Tally:
    """What this process sent, per user and in total, from the request events."""

    def __init__(self) -> None:
        self.users: dict[int, dict[str, float]] = defaultdict(lambda: {"requests": 0, "failures": 0, "after": 0})
        self.total = {"requests": 0, "failures": 0, "input_tokens": 0, "sequences": 0, "sent_bytes": 0}
        self.stopping: float | None = None
        """When the run began to stop (test_stopping), on the monotonic clock."""

    def on_stopping(self, **_: Any) -> None:
        self.stopping = self.stopping or time.monotonic()

    def per_user(self) -> list[dict[str, float]]:
        """Each user's counts, and `ended_before_stop_s`: how long before the run began to stop its last request
        ended (negative: after; a request in flight at the stop ends within --stop-timeout)."""
        stopping = self.stopping or time.monotonic()
        return [
            {**{k: v for k, v in user.items() if k != "last_end"},
             "ended_before_stop_s": round(stopping - user.get("last_end", stopping), 3)}
            for user in self.users.values()
        ]  # fmt: skip

    def on_request(self, exception: BaseException | None, context: dict[str, Any], **_: Any) -> None:
        user = self.users[context.get("user_id", 0)]
        user["last_end"] = time.monotonic()
        if user["failures"]:
            user["after"] += 1  # a request after its first failure: the user went on
        user["requests"] += 1
        self.total["requests"] += 1
        self.total["sent_bytes"] += context.get("request_bytes", 0)  # every request's, as the Pooling table's
        if exception is None:
            self.total["input_tokens"] += context.get("input_tokens", 0)
            self.total["sequences"] += context.get("sequences", 0)
        else:
            user["failures"] += 1
            self.total["failures"] += 1


def _self_sample(runner: Any) -> dict[str, Any]:
    from greenlet import greenlet

    status = Path("/proc/self/status").read_text()
    return {
        "t": round(time.time(), 2),
        "rss_mb": round(int(status.split("VmRSS:")[1].split()[0]) / 1024, 1),
        "fds": len(os.listdir("/proc/self/fd")),
        "greenlets": sum(isinstance(o, greenlet) for o in gc.get_objects()),
        "users": runner.user_count,
    }


def _append(path: str, record: dict[str, Any]) -> None:
    # One write(2) per line on an O_APPEND file: in the kernel at once, so a SIGKILL loses none of it.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def _declare_locustfile(names: str) -> None:
    import gevent
    from locust import constant_throughput, events
    from locust.runners import MasterRunner, WorkerRunner

    import poolbench_locust as pb

    rate, host = os.environ.get(RATE_ENV), os.environ.get(HOST_ENV)
    quiet_after = float(os.environ.get(QUIET_AFTER_ENV) or 0)
    began: list[float] = []
    for name in names.split(","):
        attrs: dict[str, Any] = {"context": lambda self: {"user_id": id(self)}}
        if rate:
            paced = constant_throughput(float(rate))

            def wait_time(self: Any, paced: Any = paced) -> float:
                began[:] = began or [time.monotonic()]
                if quiet_after and time.monotonic() - began[0] >= quiet_after:
                    return 3600.0  # quiet: stopped while it waits, with nothing in flight
                return paced(self)

            attrs["wait_time"] = wait_time
        if host:
            attrs["host"] = host
        globals()[name] = type(name, (getattr(pb, name),), attrs)  # Locust runs the classes it finds here

    tally = Tally()
    events.request.add_listener(tally.on_request)
    events.test_stopping.add_listener(tally.on_stopping)

    @events.init.add_listener
    def on_init(environment: Any, runner: Any = None, **_: Any) -> None:
        if isinstance(runner, MasterRunner):
            return
        if samples := os.environ.get(SAMPLES_ENV):
            interval = float(os.environ.get(SAMPLE_S_ENV, "2"))

            def sample_forever() -> None:
                while True:
                    _append(samples, _self_sample(runner))
                    gevent.sleep(interval)

            gevent.spawn(sample_forever)
        if (reports := os.environ.get(REPORTS_ENV)) and isinstance(runner, WorkerRunner):
            # Every count up to this event goes into this report: no gevent switch between listeners.
            environment.events.report_to_master.add_listener(lambda **_: _append(reports, dict(tally.total)))

    @events.quitting.add_listener
    def on_quitting(**_: Any) -> None:
        if track := os.environ.get(TRACK_ENV):
            Path(track).write_text(json.dumps(tally.per_user()))


if names := os.environ.get(USERS_ENV):
    _declare_locustfile(names)


# ---- the soak run ------------------------------------------------------------------------------


def drift(samples: list[dict[str, Any]], key: str) -> dict[str, float]:
    """first/last/min/max of the steady part, and the least-squares slope per minute."""
    values = [s[key] for s in samples]
    times = [s["t"] - samples[0]["t"] for s in samples]
    mean_t, mean_v = sum(times) / len(times), sum(values) / len(values)
    spread = sum((t - mean_t) ** 2 for t in times) or 1.0
    slope = sum((t - mean_t) * (v - mean_v) for t, v in zip(times, values, strict=True)) / spread
    return {
        "first": values[0],
        "last": values[-1],
        "min": min(values),
        "max": max(values),
        "slope_per_min": round(slope * 60, 3),
    }


def soak(seconds: int, users: int, rate: float, fault_rate: float, interval: float = 2.0, seed: int = 1) -> dict:
    """Run the soak; return its samples, their drift and whether every count agrees."""
    share = fault_rate / len(SOAK_FAULTS)
    faults = [a for f in SOAK_FAULTS for a in ("--fault", f"{f}={share}")]
    with Mock("--seed", str(seed), *faults) as mock, tempfile.TemporaryDirectory() as tmp:
        samples_path = f"{tmp}/samples.jsonl"
        env = {
            USERS_ENV: ",".join(SOAK_USERS),
            RATE_ENV: str(rate / users),
            SAMPLES_ENV: samples_path,
            SAMPLE_S_ENV: str(interval),
            QUIET_AFTER_ENV: str(seconds - QUIET_S),
        }
        load = ["--host", mock.url, "-u", str(users), "-r", str(users), "--request-timeout", str(REQUEST_TIMEOUT_S)]
        load += ["--input-len", "16", "--batch-size", "4", "--documents", "4"]
        # The preflight's one request per class reaches the mock, whose counts must equal the load's alone.
        load += ["--no-preflight"]
        run = run_locust(Path(__file__).resolve(), load, seconds, env=env, stop_timeout=5)
        samples = [json.loads(line) for line in Path(samples_path).read_text().splitlines()]
        served = mock.stats()
    stats, pooling = run.stats, run.pooling
    assert pooling is not None, "no PREFIX_pooling.csv: poolbench-locust did not load"
    steady = [s for s in samples if s["t"] >= samples[0]["t"] + seconds * STEADY_AFTER and s["users"] == users]
    requests, failures = int(stats["Request Count"]), int(stats["Failure Count"])
    counts = {
        "locust_requests": requests,
        "pooling_requests": int(pooling["Request Count"]),
        "mock_requests": served["requests"],
        "locust_failures": failures,
        "pooling_failures": int(pooling["Failure Count"]),
        "mock_faults": sum(served["faults"].values()),
        "pooling_input_tokens": int(pooling["Input Tokens"]),
        "mock_prompt_tokens": served["prompt_tokens"],
        "mock_ok": served["ok"],
    }
    agree = (
        counts["locust_requests"] == counts["pooling_requests"] == counts["mock_requests"]
        and counts["locust_failures"] == counts["pooling_failures"] == counts["mock_faults"]
        and counts["pooling_input_tokens"] == counts["mock_prompt_tokens"]
        and requests - failures == counts["mock_ok"]
    )
    return {
        "seconds": seconds,
        "users": users,
        "target_rate": rate,
        "achieved_rate": round(requests / (seconds - QUIET_S), 1),  # while the users sent
        "fault_rate": fault_rate,
        "faults": served["faults"],
        "wall_s": round(run.finished.wall_s, 1),
        "counts": counts,
        "agree": agree,
        "drift": {key: drift(steady, key) for key in ("rss_mb", "fds", "greenlets")},
        "samples": samples,
    }


# ---- side by side: poolbench-locust and a plain FastHttpUser, RSS slopes ------------------------

SLOPE_WINDOW_S = 600
"""The slope is taken over the last 10 minutes of the run (the last third of a shorter run than 30)."""
TARGET_SLOPE_MB_PER_MIN = 0.02
"""Issue 42.5: poolbench-locust's slope over the last 10 minutes of 30 at most this, and not above the plain
client's (whose Locust keeps its own history and per-second counts unbounded)."""


def _rss_mb(pid: int) -> float | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return round(int(status.split("VmRSS:")[1].split()[0]) / 1024, 2) if "VmRSS:" in status else None


def _scrape(port: int) -> int:
    """Read /metrics as Prometheus would; the bytes served (0 if it did not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            return len(resp.read())
    except OSError:
        return 0


def slope(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MB) pairs, in MB per minute; None below three pairs."""
    if len(samples) < 3:
        return None
    times, values = [t for t, _ in samples], [v for _, v in samples]
    mean_t, mean_v = sum(times) / len(times), sum(values) / len(values)
    spread = sum((t - mean_t) ** 2 for t in times) or 1.0
    return sum((t - mean_t) * (v - mean_v) for t, v in samples) / spread * 60


def _start(locustfile: Path, extra: list[str], seconds: int, prefix: str, env: dict[str, str]) -> subprocess.Popen:
    cmd = [PYTHON, "-m", "locust", "-f", str(locustfile), "--headless", "--only-summary", "--csv", prefix]
    cmd += ["-t", f"{seconds}s", "--stop-timeout", "5s", *extra]
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env={**CHILD_ENV, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: os.nice(10),  # the pid stays Locust's own (`nice locust` would too, but this is plainer)
    )


def side_by_side(seconds: int, users: int, rate: float, reset_rate: float, interval: float = 10.0) -> dict[str, Any]:
    """Run both clients for `seconds`; their RSS every `interval` s, slopes and request counts."""
    payload = Payload("float", 1, 16)
    faults = ("--seed", "1", "--fault", f"reset-mid-body={reset_rate}")
    port = free_port()
    with (
        Mock(*faults) as mock_a,
        Mock(*faults) as mock_b,
        body_file(payload.body()) as body,
        tempfile.TemporaryDirectory() as tmp,
    ):
        load = ["-u", str(users), "-r", str(users)]
        env = {"BENCH_BODY_FILE": body, "BENCH_USER_CLASS": payload.user_class, "BENCH_USER_RATE": f"{rate / users:g}"}
        pb_extra = [*load, "--host", mock_a.url, *payload.poolbench_args(), "--json-result", f"{tmp}/result.json"]
        pb_extra += ["--prometheus-port", str(port), "--prometheus-host", "127.0.0.1"]
        procs = {
            "poolbench": _start(HERE / "poolbench_locustfile.py", pb_extra, seconds, f"{tmp}/pb", env),
            "fasthttpuser": _start(
                HERE / "plain_locustfile.py", [*load, "--host", mock_b.url, "FastBuffered"], seconds, f"{tmp}/fast", env
            ),
        }
        started = time.monotonic()
        rss: dict[str, list[tuple[float, float]]] = {name: [] for name in procs}
        scraped = 0
        deadline = started + seconds + 120
        while any(p.poll() is None for p in procs.values()) and time.monotonic() < deadline:
            t = time.monotonic() - started
            if t <= seconds:  # the run itself, not its stopping and the writing of its results
                for name, proc in procs.items():
                    if (mb := _rss_mb(proc.pid)) is not None:
                        rss[name].append((round(t, 1), mb))
                scraped = max(scraped, _scrape(port))
            time.sleep(interval - (time.monotonic() - started) % interval)
        errors = {}
        for name, proc in procs.items():
            if proc.poll() is None:
                proc.kill()
            _, err = proc.communicate()
            if proc.returncode not in (0, 1):
                errors[name] = err.decode(errors="replace")[-2000:]
        if errors:
            raise RuntimeError(f"a Locust process failed: {errors}")
        stats = {"poolbench": csv_row(f"{tmp}/pb_stats.csv"), "fasthttpuser": csv_row(f"{tmp}/fast_stats.csv")}
        result_doc = json.loads(Path(f"{tmp}/result.json").read_text())
        result_bytes = Path(f"{tmp}/result.json").stat().st_size
    window = min(SLOPE_WINDOW_S, seconds / 3)
    out: dict[str, Any] = {
        "seconds": seconds,
        "users": users,
        "rate_per_process": rate,
        "reset_rate": reset_rate,
        "interval_s": interval,
        "slope_window_s": round(window),
        "flags": "--csv --json-result --prometheus-port (poolbench-locust); --csv (FastHttpUser)",
        "json_result_bytes": result_bytes,
        "json_result_series_seconds": result_doc.get("series_seconds"),
        "json_result_history_interval_s": result_doc.get("history", {}).get("interval_s"),
        "metrics_bytes": scraped,
        "processes": {},
    }
    for name, samples in rss.items():
        last = [(t, mb) for t, mb in samples if t >= seconds - window]
        requests, failures = int(stats[name]["Request Count"]), int(stats[name]["Failure Count"])
        out["processes"][name] = {
            "requests": requests,
            "failures": failures,
            "requests_per_s": round(requests / seconds, 1),
            "rss_first_mb": samples[0][1] if samples else None,
            "rss_last_mb": samples[-1][1] if samples else None,
            "rss_max_mb": max((mb for _, mb in samples), default=None),
            "slope_mb_per_min": None if (s := slope(last)) is None else round(s, 4),
            "samples": samples,
        }
    slopes = [p["slope_mb_per_min"] for p in out["processes"].values()]
    # Both processes run Locust, whose own per-second state grows (docs/results.md): the difference is ours.
    out["poolbench_own_slope_mb_per_min"] = None if None in slopes else round(slopes[0] - slopes[1], 4)
    ours, plain = slopes
    out["target_slope_mb_per_min"] = TARGET_SLOPE_MB_PER_MIN
    out["meets_target"] = ours is not None and ours <= TARGET_SLOPE_MB_PER_MIN
    out["not_above_plain"] = None not in slopes and ours <= plain
    return out


def side_by_side_main(minutes: float, users: int, rate: float, reset_rate: float, interval: float) -> None:
    r = side_by_side(round(minutes * 60), users, rate, reset_rate, interval)
    print(f"soak: {r['seconds']} s side by side, {users} users and {rate:g} requests/s each, resets {reset_rate:.0%}")
    print(f"RSS slope over the last {r['slope_window_s']} s (least squares), MB/min:")
    print(f"{'process':<14}{'requests':>10}{'failures':>10}{'req/s':>8}{'RSS first':>11}{'last':>8}{'slope':>10}")
    for name, p in r["processes"].items():
        print(
            f"{name:<14}{p['requests']:>10}{p['failures']:>10}{p['requests_per_s']:>8}"
            f"{p['rss_first_mb']:>11}{p['rss_last_mb']:>8}{p['slope_mb_per_min']:>10}"
        )
    own = r["poolbench_own_slope_mb_per_min"]
    print(f"poolbench-locust's own (its slope less FastHttpUser's, Locust's own growth): {own} MB/min")
    ours, plain = (p["slope_mb_per_min"] for p in r["processes"].values())
    target = r["target_slope_mb_per_min"]
    print(f"poolbench-locust's slope {ours} MB/min: at most {target}: {'yes' if r['meets_target'] else 'NO'};")
    print(f"  not above FastHttpUser's ({plain}): {'yes' if r['not_above_plain'] else 'NO'}")
    if r["seconds"] < 1800:
        print(f"  (a {r['seconds'] / 60:g}-minute run: the target is for 30 minutes, its last 10)")
    print(f"JSON result: {r['json_result_bytes']} bytes, series at {r['json_result_series_seconds']} s,")
    print(f"  history every {r['json_result_history_interval_s']} s; /metrics {r['metrics_bytes']} bytes")
    print(machine_line())
    print(f"written: {write_result('soak', r).relative_to(ROOT)}")


def counts_main(args: argparse.Namespace) -> None:
    r = soak(round(args.minutes * 60), args.users, args.rate, args.fault_rate, args.interval)
    print(f"soak: {r['seconds']} s, {r['users']} users, {r['achieved_rate']} of {r['target_rate']:g} requests/s")
    print(f"faults injected ({args.fault_rate:.0%}): {r['faults']}")
    print(f"{'t s':>6}{'RSS MB':>9}{'fds':>6}{'greenlets':>11}{'users':>7}")
    t0 = r["samples"][0]["t"]
    for s in r["samples"]:
        print(f"{s['t'] - t0:>6.0f}{s['rss_mb']:>9.1f}{s['fds']:>6}{s['greenlets']:>11}{s['users']:>7}")
    print(f"steady part (after {STEADY_AFTER:.0%} of the run): first, last, min, max, slope per minute")
    for key, d in r["drift"].items():
        print(f"  {key:<10}{d['first']:>8}{d['last']:>8}{d['min']:>8}{d['max']:>8}{d['slope_per_min']:>10}")
    print("counts:", ", ".join(f"{k} {v}" for k, v in r["counts"].items()))
    print("Locust, pooling stats and the mock agree" if r["agree"] else "COUNTS DISAGREE")
    print(f"written: {write_result('soak_counts', r).relative_to(ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", action="store_true", help="the fault soak whose counts must agree")
    parser.add_argument("--minutes", type=float, help="30 (side by side), 3 (--counts)")
    parser.add_argument("--users", type=int, help="8 per process (side by side), 20 (--counts)")
    parser.add_argument("--rate", type=float, help="requests/s of each process: 800 (side by side), 200 (--counts)")
    parser.add_argument("--fault-rate", type=float, default=0.03, help="--counts: share of requests with a fault")
    parser.add_argument("--reset-rate", type=float, default=0.02, help="share of answers reset mid-body")
    parser.add_argument("--interval", type=float, help="seconds between samples: 10 (side by side), 5 (--counts)")
    args = parser.parse_args()
    if args.counts:
        args.minutes, args.users = args.minutes or 3, args.users or 20
        args.rate, args.interval = args.rate or 200, args.interval or 5
        counts_main(args)
    else:
        side_by_side_main(args.minutes or 30, args.users or 8, args.rate or 800, args.reset_rate, args.interval or 10)


if __name__ == "__main__":
    main()
