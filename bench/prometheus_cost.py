"""What --prometheus-port costs the users: per request, per scrape, and in requests/s of a real run.

    .venv/bin/python bench/prometheus_cost.py [--requests 200000] [--rounds 5] [--seconds 8] [--runs 3]

1. Per request (in-process, CPU µs a call, median of rounds): the pooling stats alone (what a run with
   the exporter does: its collector reads the stats only when scraped) against the stats plus the
   design not taken, prometheus_client Counters and Histograms updated on every request event.
2. Per scrape: building the page from stats that hold `--requests` requests over three names (the
   custom collector walks each histogram's buckets), against prometheus_client's own metrics.
3. A real run: one Locust process (users and endpoint share its gevent hub) against the bundled
   mock, closed loop, no scrape / a scrape every 1 s / every 0.1 s, the three taking turns `--runs`
   times; requests/s from the Pooling CSV, median per case, and how long the scrapes took.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from bench.collector_cost import contexts, timed
from bench.common import Mock, csv_row, machine_line, run, table, write_result
from poolbench_locust.exporter.series import BUCKETS_S, Gauges, PoolingCollector
from poolbench_locust.metrics.collector import PoolingStats

NAMES = ("/v1/embeddings", "/rerank", "/score")
USERS = 16


def fed_stats(samples: list[tuple[float, dict[str, Any]]]) -> PoolingStats:
    stats = PoolingStats()
    for i, (e2e, context) in enumerate(samples):
        stats.on_request(NAMES[i % 3], e2e, 4096, None if "input_tokens" in context else "HTTP 503", context)
    return stats


def per_request_metrics() -> tuple[CollectorRegistry, Any]:
    """The design not taken: prometheus_client's metrics, updated in the request event."""
    registry = CollectorRegistry()
    labels = ["name", "method"]
    requests = Counter("r", "", [*labels, "result"], registry=registry)
    tokens = Counter("t", "", [*labels, "source"], registry=registry)
    sequences = Counter("s", "", labels, registry=registry)
    body = Counter("b", "", labels, registry=registry)
    timings = [Histogram(k, "", labels, buckets=BUCKETS_S, registry=registry) for k in ("e", "f", "x")]

    def on_request(name: str, e2e: float, length: int, exception: Any, context: dict[str, Any]) -> None:
        requests.labels(name, "POST", "failure" if exception else "success").inc()
        body.labels(name, "POST").inc(length)
        if exception is None:
            tokens.labels(name, "POST", context["token_source"]).inc(context["input_tokens"])
            sequences.labels(name, "POST").inc(context["sequences"])
        ttfb = context["ttfb_ms"]
        for histogram, ms in zip(timings, (e2e, ttfb, e2e - ttfb), strict=True):
            histogram.labels(name, "POST").observe(ms / 1000)

    return registry, on_request


def in_process(requests: int, rounds: int) -> dict[str, float]:
    samples = contexts(requests)
    failure = [None if "input_tokens" in c else "HTTP 503" for _, c in samples]

    def stats_only() -> None:
        stats = PoolingStats()
        for i, (e2e, context) in enumerate(samples):
            stats.on_request(NAMES[i % 3], e2e, 4096, failure[i], context)

    def stats_and_metrics() -> None:
        stats = PoolingStats()
        _, update = per_request_metrics()
        for i, (e2e, context) in enumerate(samples):
            stats.on_request(NAMES[i % 3], e2e, 4096, failure[i], context)
            update(NAMES[i % 3], e2e, 4096, failure[i], context)

    stats = fed_stats(samples)
    collector = CollectorRegistry(auto_describe=False)
    collector.register(
        PoolingCollector(lambda: stats, lambda: 1, Gauges(lambda: USERS, lambda: None, lambda: {"local": 0.0}, dict))
    )
    own, update = per_request_metrics()
    for i, (e2e, context) in enumerate(samples):
        update(NAMES[i % 3], e2e, 4096, failure[i], context)
    keys = sum(len(h.counts) for e in stats.entries.values() for h in e.timings.values())
    return {
        "stats_us": timed(stats_only, requests, rounds),
        "stats_and_metrics_us": timed(stats_and_metrics, requests, rounds),
        "scrape_ms": timed(lambda: generate_latest(collector), 1, rounds * 4) / 1000,
        "scrape_own_metrics_ms": timed(lambda: generate_latest(own), 1, rounds * 4) / 1000,
        "histogram_buckets": keys,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SCRAPER = """
import sys, time, urllib.request
url, interval = sys.argv[1], float(sys.argv[2])
while True:
    time.sleep(interval)
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            answer.read()
    except OSError:
        continue
    print(f"{(time.perf_counter() - start) * 1000:.3f}", flush=True)
"""
"""The scraper: a process of its own (this one blocks in wait4 while Locust runs), printing each
successful scrape's milliseconds."""


def one_run(mock: Mock, seconds: float, interval: float | None) -> tuple[float, float, list[float]]:
    """requests/s, the Locust process's CPU µs per request, and the scrapes' milliseconds."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp, open(f"{tmp}/scrapes", "w+") as out:
        cmd = [sys.executable, "-m", "locust", "-f", "locustfiles/embeddings.py", "--headless", "--only-summary"]
        cmd += ["--host", mock.url, "-u", str(USERS), "-r", str(USERS), "-t", f"{seconds:g}s", "--csv", f"{tmp}/run"]
        cmd += ["--prometheus-port", str(port), "--prometheus-host", "127.0.0.1", "--stop-timeout", "5"]
        url = f"http://127.0.0.1:{port}/metrics"
        scraper = None
        if interval:
            scraper = subprocess.Popen([sys.executable, "-c", SCRAPER, url, str(interval)], stdout=out)
        try:
            finished = run(cmd, seconds + 60)
        finally:
            if scraper is not None:
                scraper.terminate()
                scraper.wait()
        if finished.returncode != 0:
            raise RuntimeError(finished.stderr[-3000:])
        row = csv_row(f"{tmp}/run_stats.csv")
        out.seek(0)
        took = [float(line) for line in out.read().split()]
    requests = int(row["Request Count"])
    return float(row["Requests/s"]), finished.cpu_s / max(requests, 1) * 1e6, took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    figures = in_process(args.requests, args.rounds)
    print(f"Per request ({args.requests:,} requests over 3 names, CPU µs a call, median of {args.rounds}):")
    print(
        table(
            ["design", "µs/request", "page build, ms"],
            [
                ["pooling stats, read at scrape (taken)", f"{figures['stats_us']:.3f}", f"{figures['scrape_ms']:.2f}"],
                [
                    "+ prometheus_client metrics per request",
                    f"{figures['stats_and_metrics_us']:.3f}",
                    f"{figures['scrape_own_metrics_ms']:.2f}",
                ],
            ],
        )
    )
    print(f"({figures['histogram_buckets']:,} pooling-histogram buckets walked per scrape)\n")

    cases = {"no scrape": None, "scrape every 1 s": 1.0, "scrape every 0.1 s": 0.1}
    rates: dict[str, list[float]] = {c: [] for c in cases}
    cpu: dict[str, list[float]] = {c: [] for c in cases}
    took: dict[str, list[float]] = {c: [] for c in cases}
    with Mock() as mock:
        for _ in range(args.runs):
            for case, interval in cases.items():  # taking turns: the machine's other load hits all alike
                rate, cpu_us, times = one_run(mock, args.seconds, interval)
                rates[case].append(rate)
                cpu[case].append(cpu_us)
                took[case].extend(times)
    base, base_cpu = statistics.median(rates["no scrape"]), statistics.median(cpu["no scrape"])
    rows = []
    for case in cases:
        median, cpu_us = statistics.median(rates[case]), statistics.median(cpu[case])
        scrape = f"{statistics.median(took[case]):.1f} / {max(took[case]):.1f}" if took[case] else ""
        rows.append(
            [
                case,
                f"{median:.0f}",
                f"{100 * (median / base - 1):+.1f} %",
                f"{cpu_us:.0f}",
                f"{100 * (cpu_us / base_cpu - 1):+.1f} %",
                scrape,
                str(len(took[case])),
            ]
        )
    print(f"One Locust process, {USERS} users, closed loop on the mock, {args.seconds:g} s, median of {args.runs}:")
    headers = ["case", "requests/s", "vs none", "CPU µs/request", "vs none", "scrape ms (median / max)", "scrapes"]
    print(table(headers, rows))
    print(machine_line())
    runs = {"requests_per_s": rates, "cpu_us_per_request": cpu, "scrape_took_ms": took}
    out = write_result("prometheus_cost", {**figures, **runs, "users": USERS, "seconds": args.seconds})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
