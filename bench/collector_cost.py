"""What one request event costs the listeners on it: Locust's own stats and the pooling stats, each
alone and together as the engine fires the event.

Every request fires one request event (engine/user.py), and every listener on it runs in the same
gevent hub as the users, at thousands of requests per second: a microsecond there is a microsecond
the client cannot send with. The listeners of a run (grep add_listener): Locust's runner's own
(RequestStats.log_request, and log_error for a failure: runners.py) and the pooling stats'
(PoolingStats.on_request, added by metrics/pooling_reports.py); bench/common.py and bench/soak.py add
theirs only to the benches' own runs. This times them in-process on request events shaped like the
engine's (no network): the closed loop (time to headers), the open loop (+ queueing), a server that
sends its own timings (TEI), and --slo (goodput judged per request), on a local runner (Locust keeps
its response-time cache, the pooling stats their total) and on a worker (neither). It prints CPU
microseconds per request event, median of several rounds, and writes bench/results/collector_cost.json.
It is a measurement, not a test: the figures depend on the machine.

    .venv/bin/python bench/collector_cost.py [--requests 100000] [--rounds 7] [--slo e2e_ms=300,ttfb_ms=100]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from locust.env import Environment
from locust.event import Events
from locust.stats import RequestStats

from bench.common import ROOT, write_result
from poolbench_locust.metrics import goodput
from poolbench_locust.metrics.collector import PoolingStats

NAME = "/v1/embeddings"
CASES: dict[str, dict[str, Any]] = {
    "closed loop (ttfb)": {},
    "open loop (+ queue)": {"queue": True},
    "TEI (+ server timings)": {"server": True},
    "closed loop, --slo": {"slo": True},
}
LISTENERS = ("locust", "pooling", "both (fire)")
"""Locust's own listener alone, the pooling stats' alone, and the event fired to every listener."""

Event = dict[str, Any]


class _Failure(Exception):
    pass


def events(n: int, queue: bool = False, server: bool = False, seed: int = 1) -> list[Event]:
    """n request events' keyword arguments shaped like the engine's: a spread of times, 1 in 50 a failure."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        ttfb = rng.uniform(5.0, 60.0)
        e2e = ttfb + rng.uniform(0.5, 250.0)
        context: dict[str, Any] = {"sequences": 4, "ttfb_ms": ttfb, "request_bytes": 2_400}  # as the engine sends
        failed = rng.random() < 0.02
        if not failed:
            context.update(input_tokens=rng.randint(50, 600), token_source="server")
        if queue:
            context["queue_ms"] = rng.choice((0.0, rng.uniform(0.0, 20.0)))
        if server:
            context["server_queue_ms"] = rng.uniform(0.0, 5.0)
            context["server_inference_ms"] = rng.uniform(1.0, 50.0)
        out.append(
            {
                "request_type": "POST",
                "name": NAME,
                "response_time": e2e,
                "response_length": 4096,
                "exception": _Failure("HTTP 503: Service Unavailable") if failed else None,
                "context": context,
                "url": "http://127.0.0.1:8000/v1/embeddings",
                "start_time": 0.0,
                "response": None,
            }
        )
    return out


def timed(run: Callable[[], None], calls: int, rounds: int) -> float:
    """Median CPU microseconds per call over `rounds` runs of `run` (each making `calls` calls): the
    process's own CPU time, which other processes crowding the cores disturb less than the wall clock."""
    per_call = []
    for _ in range(rounds):
        gc.collect()
        start = time.process_time()
        run()
        per_call.append((time.process_time() - start) / calls * 1e6)
    return statistics.median(per_call)


def listeners(worker: bool, slo: goodput.Slo | None) -> tuple[Environment, PoolingStats]:
    """A fresh environment with the listeners of a run on its request event: Locust's runner's own
    and the pooling stats' (as pooling_reports.on_init adds it)."""
    environment = Environment(events=Events())
    environment.create_local_runner()  # adds Locust's own listener
    if worker:  # as Environment.create_worker_runner: no response-time cache
        environment.stats = RequestStats(use_response_times_cache=False)
    stats = PoolingStats()
    stats.slo = slo
    stats.keeps_total = not worker
    environment.events.request.add_listener(stats.on_request)
    return environment, stats


def one_listener(samples: list[Event], which: str, worker: bool, slo: goodput.Slo | None) -> Callable[[], None]:
    def run() -> None:
        environment, stats = listeners(worker, slo)
        hook = environment.events.request
        if which == "locust":
            locust_listener = hook._handlers[0]
            for kwargs in samples:
                locust_listener(**kwargs)
        elif which == "pooling":
            on_request = stats.on_request
            for kwargs in samples:
                on_request(**kwargs)
        else:
            fire = hook.fire
            for kwargs in samples:
                fire(**kwargs)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--slo", default="e2e_ms=300,ttfb_ms=100", help="the --slo of the --slo case")
    parser.add_argument("--label", default="", help="a word for this run's figures in the result (e.g. before)")
    parser.add_argument("--out", default="collector_cost", help="the result's name under bench/results/")
    args = parser.parse_args()
    slo = goodput.parse_slo(args.slo)

    print(f"Python {sys.version.split()[0]}, {args.requests:,} request events a round, median of {args.rounds} rounds")
    print("CPU us per request event, local runner | worker")
    print(f"{'case':<26}" + "".join(f"{w:>14}" for w in LISTENERS) + " |" + "".join(f"{w:>14}" for w in LISTENERS))
    figures: dict[str, Any] = {}
    for case, flags in CASES.items():
        samples = events(args.requests, queue=flags.get("queue", False), server=flags.get("server", False))
        case_slo = slo if flags.get("slo") else None
        row: dict[str, dict[str, float]] = {}
        for place, worker in (("local", False), ("worker", True)):
            row[place] = {
                which: round(timed(one_listener(samples, which, worker, case_slo), args.requests, args.rounds), 3)
                for which in LISTENERS
            }
        figures[case] = row
        print(
            f"{case:<26}"
            + "".join(f"{row['local'][w]:>14.3f}" for w in LISTENERS)
            + " |"
            + "".join(f"{row['worker'][w]:>14.3f}" for w in LISTENERS)
        )
    # What a worker ships each report interval (3 s), packed as Locust packs it (msgpack).
    report_bytes = {}
    for rate in (100, 1000, 5000):
        _, stats = listeners(worker=True, slo=None)
        for kwargs in events(rate * 3):
            stats.on_request(**kwargs)
        report_bytes[rate] = len(msgpack.packb(stats.take_report(), use_bin_type=True))
        print(f"report of 3 s at {rate:,} requests/s: {report_bytes[rate]:,} bytes (msgpack)")
    result = {
        "label": args.label,
        "requests": args.requests,
        "rounds": args.rounds,
        "slo": args.slo,
        "unit": "CPU us per request event, median of rounds",
        "cases": figures,
        "report_bytes_3s": report_bytes,
    }
    print(f"written: {write_result(args.out, result).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
