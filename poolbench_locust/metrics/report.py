"""One table of pooling figures, in Locust's column naming, for every place it is shown:
the web UI tab, the JSON and CSV routes, PREFIX_pooling.csv, the console and the HTML report."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from poolbench_locust.metrics.collector import Entry, PoolingStats

PERCENTILES = (0.50, 0.90, 0.95, 0.99)
TIMING_COLUMNS = (
    ("ttfb", "TTFB"),
    ("e2e", "E2E"),
    ("transfer", "Transfer"),
    ("queue", "Queue"),
    ("server_queue", "Server Queue"),
    ("server_inference", "Server Inference"),
)
MB = 1_000_000


def _percent(p: float) -> str:
    return f"{round(p * 100)}%"


def _elapsed(stats: PoolingStats, entry: Entry) -> float:
    if entry.last is None:
        return 0.0
    return max(entry.last - stats.start_time, 1e-9)


def _columns() -> list[tuple[str, Callable[[PoolingStats, Entry], Any]]]:
    cols: list[tuple[str, Callable[[PoolingStats, Entry], Any]]] = [
        ("Type", lambda s, e: "" if e is s.total else "POST"),
        ("Name", lambda s, e: e.name),
        ("Request Count", lambda s, e: e.requests),
        ("Failure Count", lambda s, e: e.failures),
        ("Input Tokens", lambda s, e: e.input_tokens),
        ("Input Tokens/s", lambda s, e: round(e.input_tokens / _elapsed(s, e), 1) if e.last else 0.0),
        ("Current Input Tokens/s", lambda s, e: round(e.current(0, s.start_time), 1)),
        ("Sequences", lambda s, e: e.sequences),
        ("Sequences/s", lambda s, e: round(e.sequences / _elapsed(s, e), 1) if e.last else 0.0),
        ("Current Sequences/s", lambda s, e: round(e.current(1, s.start_time), 1)),
        ("Bytes", lambda s, e: e.bytes),
        ("MB/s", lambda s, e: round(e.bytes / MB / _elapsed(s, e), 3) if e.last else 0.0),
        ("Current MB/s", lambda s, e: round(e.current(2, s.start_time) / MB, 3)),
        ("Token Source", lambda s, e: e.token_source()),
        ("Client Tokens", lambda s, e: e.client_tokens_compared or None),
        ("Token Gap %", lambda s, e: e.token_gap_percent()),
    ]
    for key, title in TIMING_COLUMNS:
        for p in PERCENTILES:
            cols.append((f"{title} {_percent(p)}", lambda s, e, key=key, p=p: e.timings[key].percentile(p)))
        cols.append((f"{title} Max", lambda s, e, key=key: round(e.timings[key].max) if e.timings[key].n else None))
    return cols


COLUMNS = _columns()
HEADER = [title for title, _ in COLUMNS]


def rows(stats: PoolingStats) -> list[dict[str, Any]]:
    """One row per request name, then the Aggregated row; a timing with no sample is None (shown empty)."""
    entries = [*stats.sorted_entries(), stats.total]
    return [{title: value(stats, entry) for title, value in COLUMNS} for entry in entries]
