"""Soak: minutes of steady load with 1-5 % injected faults; RSS, open fds and greenlets stay flat.

    python bench/soak.py [--minutes 3] [--users 20] [--rate 200] [--fault-rate 0.03]

The bundled mock server runs in its own process with `--fault NAME=RATE` (a mix of statuses,
broken wire and stalls past --request-timeout) and a seed; one headless Locust process sends
`--rate` requests/s (constant_throughput per user) to /v1/embeddings and /rerank. That process
samples itself (RSS and open fds from /proc/self, live greenlets from gc) every few seconds.
At the end, Locust's CSV, the pooling CSV and the mock's own counts must agree exactly.
Results go to `bench/results/soak.json`.

This file is also the locustfile of that run and of tests/test_reliability.py: loaded by Locust
with POOLBENCH_USERS set, it declares those poolbench_locust User classes, tagged per user
(`context()["user_id"]`), and writes what the environment variables below ask for.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/soak.py`, or loaded by Locust as a locustfile
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, Mock, run_locust, write_result

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
        self.users: dict[int, dict[str, int]] = defaultdict(lambda: {"requests": 0, "failures": 0, "after": 0})
        self.total = {"requests": 0, "failures": 0, "input_tokens": 0, "sequences": 0}

    def on_request(self, exception: BaseException | None, context: dict[str, Any], **_: Any) -> None:
        user = self.users[context.get("user_id", 0)]
        if user["failures"]:
            user["after"] += 1  # a request after its first failure: the user went on
        user["requests"] += 1
        self.total["requests"] += 1
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
    for name in names.split(","):
        attrs: dict[str, Any] = {"context": lambda self: {"user_id": id(self)}}
        if rate:
            attrs["wait_time"] = constant_throughput(float(rate))
        if host:
            attrs["host"] = host
        globals()[name] = type(name, (getattr(pb, name),), attrs)  # Locust runs the classes it finds here

    tally = Tally()
    events.request.add_listener(tally.on_request)

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
            Path(track).write_text(json.dumps(list(tally.users.values())))


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
        }
        load = ["--host", mock.url, "-u", str(users), "-r", str(users), "--request-timeout", str(REQUEST_TIMEOUT_S)]
        load += ["--input-len", "16", "--batch-size", "4", "--documents", "4"]
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
        "achieved_rate": round(requests / seconds, 1),
        "fault_rate": fault_rate,
        "faults": served["faults"],
        "wall_s": round(run.finished.wall_s, 1),
        "counts": counts,
        "agree": agree,
        "drift": {key: drift(steady, key) for key in ("rss_mb", "fds", "greenlets")},
        "samples": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--rate", type=float, default=200, help="requests/s of the whole run")
    parser.add_argument("--fault-rate", type=float, default=0.03, help="share of requests with a fault")
    parser.add_argument("--interval", type=float, default=5, help="seconds between samples")
    args = parser.parse_args()
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
    print(f"written: {write_result('soak', r).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
