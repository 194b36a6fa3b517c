"""Percentile error, before and after: Locust's bucketing (two significant digits, what the pooling
table used) against the log-linear histogram (metrics/histogram.py), on the same samples.

    .venv/bin/python bench/percentile_error.py [--seconds 15] [--users 8]

1. Drawn samples (seeded), 20,000 per distribution, at the scales pooling servers answer in; the
   error of each percentile against the nearest-rank percentile of the sorted samples.
2. One real run: the bundled mock holds the headers 50 ms and trickles the body to about 264 ms
   (the case of issue 13). The client's own clock of each request (the request events) against
   the server's own time (/mock/timings): the client's overhead, about +1 ms on a quiet machine.
   Then Locust's own table (rounded as before) and the pooling table (the new histogram) of the
   same requests against the client's clock: what each table adds to it.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/percentile_error.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from locust.stats import bucket_response_time, calculate_response_time_percentile

from bench.common import HERE, Mock, machine_line, percentile, run_locust, table, write_result
from poolbench_locust.metrics.histogram import Histogram

FRACTIONS = (0.50, 0.90, 0.95, 0.99)
DRAWS = 20_000
DISTRIBUTIONS: dict[str, Callable[[random.Random], float]] = {
    "small JSON, 2-10 ms": lambda r: r.lognormvariate(1.4, 0.35),
    "trickled body, ~264 ms": lambda r: r.gauss(264.0, 4.0),
    "large batches, 0.1-1 s": lambda r: r.uniform(100.0, 1000.0),
    "long, 1-6 s": lambda r: r.uniform(1000.0, 6000.0),
    "overloaded, 10-60 s": lambda r: r.uniform(10_000.0, 60_000.0),
}


def locust_bucketed(values: list[float]) -> Callable[[float], float]:
    """Locust's own way, as the pooling stats did it before: bucket_response_time, then its percentile."""
    counts: dict[int, int] = {}
    for v in values:
        key = bucket_response_time(v)
        counts[key] = counts.get(key, 0) + 1
    return lambda f: calculate_response_time_percentile(counts, len(values), f)


def log_linear(values: list[float]) -> Callable[[float], float]:
    histogram = Histogram()
    for v in values:
        histogram.add(v)
    return lambda f: histogram.percentile(f) or 0.0


def error_percent(reported: float, true: float) -> float:
    return 100.0 * (reported - true) / true


def drawn(seed: int) -> list[list[object]]:
    rows: list[list[object]] = []
    for name, draw in DISTRIBUTIONS.items():
        rng = random.Random(seed)
        values = [max(draw(rng), 0.01) for _ in range(DRAWS)]
        old, new = locust_bucketed(values), log_linear(values)
        for f in FRACTIONS:
            true = percentile(values, f)
            before, after = old(f), new(f)
            before_error, after_error = f"{error_percent(before, true):+.3f}", f"{error_percent(after, true):+.4f}"
            rows.append([name, f"p{round(f * 100)}", f"{true:.3f}", before, before_error, f"{after:.3f}", after_error])
    return rows


def real_run(seconds: float, users: int) -> tuple[list[list[object]], dict[str, object]]:
    with Mock("--ttfb-ms", "50", "--body-ms", "214", "--dim", "384") as mock:
        run = run_locust(
            HERE / "poolbench_locustfile.py",
            ["-u", str(users), "-r", str(users), "--host", mock.url, "--batch-size", "1", "--input-len", "3"],
            seconds,
            record=True,
        )
        server = mock.server_ms()
    client = [sample[0] for sample in run.probe.get("samples", [])]
    rows: list[list[object]] = []
    for f in FRACTIONS:
        true, exact = percentile(server, f), percentile(client, f)
        old = float(run.stats[f"{round(f * 100)}%"])
        assert run.pooling is not None
        new = float(run.pooling[f"E2E {round(f * 100)}%"])
        errors = [f"{error_percent(v, exact):+.3f}" for v in (old, new)]
        rows.append([f"p{round(f * 100)}", f"{true:.3f}", f"{exact:.3f}", f"{error_percent(exact, true):+.3f}"])
        rows[-1] += [old, errors[0], new, errors[1]]
    facts = {"requests": len(server), "client_requests": len(client)}
    return rows, facts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    drawn_rows = drawn(args.seed)
    print(f"1. Drawn samples, {DRAWS:,} each, seed {args.seed}: error against the sorted samples")
    headers = ("distribution", "pct", "true ms", "Locust's buckets", "error %", "log-linear", "error %")
    print(table(headers, drawn_rows))
    real_rows, facts = real_run(args.seconds, args.users)
    print(f"\n2. Mock, headers at 50 ms, body to ~264 ms, {args.users} users, {facts['requests']} requests:")
    print("   the client's clock against the server's own times, and both tables against the client's clock")
    headers = ("pct", "server ms", "client ms", "error %", "Locust's table", "error %", "pooling table", "error %")
    print(table(headers, real_rows))
    print(machine_line())
    out = write_result("percentile_error", {"drawn": drawn_rows, "mock_run": real_rows, **facts})
    print(f"written: {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
