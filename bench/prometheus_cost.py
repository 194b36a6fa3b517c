"""What --prometheus-port costs the users: per request, per scrape, and in requests/s of a real run.

    .venv/bin/python bench/prometheus_cost.py [--requests 200000] [--rounds 5] [--seconds 8] [--runs 3]

1. Per request (in-process, CPU µs a call, median of rounds): the pooling stats alone (what a run with
   the exporter does: its collector reads the stats only when scraped) against the stats plus the
   design not taken, prometheus_client Counters and Histograms updated on every request event.
2. Per scrape: building the page from stats that hold `--requests` requests over three names (the
   custom collector walks each histogram's buckets), against prometheus_client's own metrics.
3. Real runs, side by side: two Locust processes at once (users and endpoint share each one's gevent
   hub), closed loop, each against a mock of its own, one scraped every 1 s (or 0.1 s) and one not,
   `--runs` pairs; the ratio of their requests/s and of their CPU per request (median of the pairs),
   and how long the scrapes took. On a shared machine run after run moves by tens of percent; the two
   of a pair share whatever else runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from bench.collector_cost import events, timed
from bench.common import CHILD_ENV, ROOT, Mock, csv_row, machine_line, table, write_result
from devsupport.ports import free_port
from poolbench_locust.exporter.series import BUCKETS_S, Gauges, PoolingCollector
from poolbench_locust.metrics.collector import PoolingStats

NAMES = ("/v1/embeddings", "/rerank", "/score")
USERS = 16


def contexts(n: int) -> list[tuple[float, dict[str, Any]]]:
    """n requests' E2E and context as the engine sends them (bench/collector_cost.py's events)."""
    return [(event["response_time"], event["context"]) for event in events(n)]


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
    gauges = Gauges(lambda: USERS, lambda: None, lambda: {"local": 0.0}, dict)
    collector = CollectorRegistry(auto_describe=False)
    collector.register(PoolingCollector(lambda: stats, lambda: 1, gauges))

    def cold_scrape() -> None:  # a new collector (it keeps nothing between scrapes: as scrape_ms)
        cold = CollectorRegistry(auto_describe=False)
        cold.register(PoolingCollector(lambda: stats, lambda: 1, gauges))
        generate_latest(cold)

    own, update = per_request_metrics()
    for i, (e2e, context) in enumerate(samples):
        update(NAMES[i % 3], e2e, 4096, failure[i], context)
    keys = sum(h.buckets() for e in stats.entries.values() for h in e.timings.values())
    return {
        "stats_us": timed(stats_only, requests, rounds),
        "stats_and_metrics_us": timed(stats_and_metrics, requests, rounds),
        "scrape_ms": timed(lambda: generate_latest(collector), 1, rounds * 4) / 1000,
        "scrape_cold_ms": timed(cold_scrape, 1, rounds * 4) / 1000,
        "scrape_own_metrics_ms": timed(lambda: generate_latest(own), 1, rounds * 4) / 1000,
        "histogram_buckets": keys,
    }


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


@dataclass
class Client:
    """One Locust process of a pair, with or without a scraper beside it."""

    mock: Mock
    interval: float | None
    tmp: str

    def start(self, seconds: float) -> None:
        port = free_port()
        cmd = [sys.executable, "-m", "locust", "-f", "locustfiles/embeddings.py", "--headless", "--only-summary"]
        cmd += ["--host", self.mock.url, "-u", str(USERS), "-r", str(USERS), "-t", f"{seconds:g}s"]
        cmd += ["--csv", f"{self.tmp}/run", "--stop-timeout", "5"]
        cmd += ["--prometheus-port", str(port), "--prometheus-host", "127.0.0.1"]
        with open(f"{self.tmp}/log", "w") as log:
            self.locust = subprocess.Popen(cmd, cwd=ROOT, env=CHILD_ENV, stdout=subprocess.DEVNULL, stderr=log)
        self.scraper = None
        if self.interval:
            url = f"http://127.0.0.1:{port}/metrics"
            with open(f"{self.tmp}/scrapes", "w") as out:
                self.scraper = subprocess.Popen([sys.executable, "-c", SCRAPER, url, str(self.interval)], stdout=out)

    def finish(self) -> tuple[float, float, list[float]]:
        """requests/s, the Locust process's CPU µs per request, and the scrapes' milliseconds."""
        _, status, usage = os.wait4(self.locust.pid, 0)
        if self.scraper is not None:
            self.scraper.terminate()
            self.scraper.wait()
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(Path(f"{self.tmp}/log").read_text()[-3000:])
        row = csv_row(f"{self.tmp}/run_stats.csv")
        took = [float(x) for x in Path(f"{self.tmp}/scrapes").read_text().split()] if self.interval else []
        cpu_us = (usage.ru_utime + usage.ru_stime) / max(int(row["Request Count"]), 1) * 1e6
        return float(row["Requests/s"]), cpu_us, took


def pair(mocks: tuple[Mock, Mock], seconds: float, interval: float, swap: bool) -> dict[str, Any]:
    """A client without scrapes and one scraped every `interval` s, at the same time, each on a mock of
    its own (swapped every other pair): whatever else loads the machine loads both."""
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        plain = Client(mocks[swap], None, a)
        scraped = Client(mocks[not swap], interval, b)
        plain.start(seconds)
        scraped.start(seconds)
        (rate0, cpu0, _), (rate1, cpu1, took) = plain.finish(), scraped.finish()
    return {"rate": rate1 / rate0, "cpu": cpu1 / cpu0, "took": took, "rates": (rate0, rate1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    figures = in_process(args.requests, args.rounds)
    print(f"Per request ({args.requests:,} requests over 3 names, CPU µs a call, median of {args.rounds}):")
    print(
        table(
            ["design", "µs/request", "page build, ms (no new keys / all new)"],
            [
                [
                    "pooling stats, read at scrape (taken)",
                    f"{figures['stats_us']:.3f}",
                    f"{figures['scrape_ms']:.2f} / {figures['scrape_cold_ms']:.2f}",
                ],
                [
                    "+ prometheus_client metrics per request",
                    f"{figures['stats_and_metrics_us']:.3f}",
                    f"{figures['scrape_own_metrics_ms']:.2f}",
                ],
            ],
        )
    )
    print(f"({figures['histogram_buckets']:,} pooling-histogram buckets walked per scrape)\n")

    intervals = {"scrape every 1 s": 1.0, "scrape every 0.1 s": 0.1}
    pairs: dict[str, list[dict[str, Any]]] = {case: [] for case in intervals}
    with Mock() as one, Mock() as two:
        for i in range(args.runs):
            for case, interval in intervals.items():
                pairs[case].append(pair((one, two), args.seconds, interval, swap=bool(i % 2)))
    rows = []
    for case, results in pairs.items():
        took = [t for r in results for t in r["took"]]
        rows.append(
            [
                case,
                f"{statistics.median(r['rates'][0] for r in results):.0f}",
                f"{statistics.median(r['rates'][1] for r in results):.0f}",
                f"{100 * (statistics.median(r['rate'] for r in results) - 1):+.1f} %",
                f"{100 * (statistics.median(r['cpu'] for r in results) - 1):+.1f} %",
                f"{statistics.median(took):.1f} / {max(took):.1f}" if took else "",
                str(len(took)),
            ]
        )
    print(
        f"Two Locust processes side by side ({USERS} users each, closed loop, a mock each, {args.seconds:g} s), "
        f"one scraped, one not; median of {args.runs} pairs:"
    )
    headers = ["case", "req/s plain", "req/s scraped", "req/s ratio", "CPU/request ratio", "scrape ms med/max", "n"]
    print(table(headers, rows))
    print(machine_line())
    out = write_result("prometheus_cost", {**figures, "pairs": pairs, "users": USERS, "seconds": args.seconds})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
