"""What one request costs the pooling stats collector on the hot path: Entry.log and PoolingStats.on_request.

The collector runs once per request event, in the same gevent hub as the users, at thousands of
requests per second: every microsecond it takes is a microsecond the client cannot send with. This
times it in-process on prepared request contexts (no network), median of several rounds, and prints
CPU microseconds per call. It is a measurement, not a test: the figures depend on the machine.

    .venv/bin/python bench/collector_cost.py [--requests 200000] [--rounds 7] [--slo e2e_ms=300,ttfb_ms=100]
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

from poolbench_locust.metrics.collector import Entry, PoolingStats

CASES = {
    "closed loop (ttfb)": {},
    "open loop (+ queue)": {"queue": True},
    "TEI (+ server timings)": {"server": True},
}


def contexts(n: int, queue: bool = False, server: bool = False, seed: int = 1) -> list[tuple[float, dict[str, Any]]]:
    """n (e2e ms, context) pairs shaped like the engine's: a spread of times, 1 in 50 a failure."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        ttfb = rng.uniform(5.0, 60.0)
        e2e = ttfb + rng.uniform(0.5, 250.0)
        context: dict[str, Any] = {"sequences": 4, "ttfb_ms": ttfb, "request_bytes": 2_400}  # as the engine sends
        if rng.random() >= 0.02:
            context.update(input_tokens=rng.randint(50, 600), token_source="server")
        if queue:
            context["queue_ms"] = rng.choice((0.0, rng.uniform(0.0, 20.0)))
        if server:
            context["server_queue_ms"] = rng.uniform(0.0, 5.0)
            context["server_inference_ms"] = rng.uniform(1.0, 50.0)
        out.append((e2e, context))
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


def entry_log(samples: list[tuple[float, dict[str, Any]]], start: float) -> Callable[[], None]:
    def run() -> None:
        entry = Entry("/v1/embeddings")
        now = start
        for e2e, context in samples:
            now += 0.0005  # 2,000 requests/s: a new second every 2,000 calls, as in a real run
            entry.log(now, e2e, 4096, "input_tokens" not in context, context)

    return run


def on_request(samples: list[tuple[float, dict[str, Any]]], stats_factory: Callable[[], PoolingStats]) -> Callable:
    def run() -> None:
        stats = stats_factory()
        for e2e, context in samples:
            failure = None if "input_tokens" in context else "HTTP 503"
            stats.on_request("/v1/embeddings", e2e, 4096, failure, context)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--slo", default=None, help="also time on_request with this --slo (where supported)")
    args = parser.parse_args()

    def fresh_stats(worker: bool = False) -> PoolingStats:
        stats = PoolingStats()
        if worker and hasattr(stats, "keeps_total"):  # a worker logs no total (where the collector has the switch)
            stats.keeps_total = False
        if args.slo is not None:
            from poolbench_locust.metrics import goodput

            stats.slo = goodput.parse_slo(args.slo)
        return stats

    print(f"Python {sys.version.split()[0]}, {args.requests:,} requests a round, median of {args.rounds} rounds")
    print(f"{'case':<26}{'Entry.log us':>14}{'on_request us':>15}{'on a worker us':>16}")
    start = time.time()
    for case, flags in CASES.items():
        samples = contexts(args.requests, **flags)
        log_us = timed(entry_log(samples, start), args.requests, args.rounds)
        # on_request reads the clock itself; time.time is what it calls, as in a run.
        request_us = timed(on_request(samples, fresh_stats), args.requests, args.rounds)
        worker_us = timed(on_request(samples, lambda: fresh_stats(worker=True)), args.requests, args.rounds)
        print(f"{case:<26}{log_us:>14.3f}{request_us:>15.3f}{worker_us:>16.3f}")
    # What a worker ships each report interval (3 s), packed as Locust packs it (msgpack).
    for rate in (100, 1000, 5000):
        stats = fresh_stats(worker=True)
        on_request(contexts(rate * 3), lambda stats=stats: stats)()
        packed = msgpack.packb(stats.take_report(), use_bin_type=True)
        print(f"report of 3 s at {rate:,} requests/s: {len(packed):,} bytes (msgpack)")


if __name__ == "__main__":
    main()
