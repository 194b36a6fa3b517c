"""One table of pooling figures, in Locust's column naming, for every place it is shown:
the web UI tab, the JSON and CSV routes, PREFIX_pooling.csv, the console and the HTML report."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

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


def shown_ms(value: float | None) -> float | None:
    """A time as shown: five significant digits (0.005 % at most, under the histogram's 0.05 %), to the µs."""
    if value is None:
        return None
    return round(float(f"{value:.5g}"), 3)


_Cell = Callable[[PoolingStats, Entry], Any]
"""A column's value of a row. The lambdas that bind their loop's values as defaults are cast to it: mypy
cannot type such a lambda against a Callable."""


def _goodput(amount: Callable[[Entry], int]) -> Callable[[PoolingStats, Entry], Any]:
    """A goodput column: empty without --slo."""
    return lambda s, e: None if s.slo is None else round(s.per_second(e, amount(e)), 1)


def _columns() -> list[tuple[str, Callable[[PoolingStats, Entry], Any]]]:
    cols: list[tuple[str, Callable[[PoolingStats, Entry], Any]]] = [
        ("Type", lambda s, e: "" if e is s.total else "POST"),
        ("Name", lambda s, e: e.name),
        ("Request Count", lambda s, e: e.requests),
        ("Failure Count", lambda s, e: e.failures),
        ("Input Tokens", lambda s, e: e.input_tokens),
        ("Input Tokens/s", lambda s, e: round(s.per_second(e, e.input_tokens), 1)),
        ("Current Input Tokens/s", lambda s, e: round(e.current(0, s.start_time), 1)),
        ("Image Tokens", lambda s, e: e.image_tokens if e.image_token_requests else None),
        ("Image Tokens/s", lambda s, e: round(s.per_second(e, e.image_tokens), 1) if e.image_token_requests else None),
        ("Sequences", lambda s, e: e.sequences),
        ("Sequences/s", lambda s, e: round(s.per_second(e, e.sequences), 1)),
        ("Current Sequences/s", lambda s, e: round(e.current(1, s.start_time), 1)),
        ("Vectors", lambda s, e: e.vectors),
        ("Vectors/s", lambda s, e: round(s.per_second(e, e.vectors), 1)),
        ("Current Vectors/s", lambda s, e: round(e.current(4, s.start_time), 1)),
        ("Bytes", lambda s, e: e.bytes),
        ("MB/s", lambda s, e: round(s.per_second(e, e.bytes) / MB, 3)),
        ("Current MB/s", lambda s, e: round(e.current(2, s.start_time) / MB, 3)),
        ("Sent Bytes", lambda s, e: e.sent_bytes),
        ("Sent MB/s", lambda s, e: round(s.per_second(e, e.sent_bytes) / MB, 3)),
        ("Current Sent MB/s", lambda s, e: round(e.current(3, s.start_time) / MB, 3)),
        ("Token Source", lambda s, e: e.token_source()),
        ("Client Tokens", lambda s, e: e.client_tokens_compared or None),
        ("Token Gap %", lambda s, e: e.token_gap_percent()),
        ("Retries", lambda s, e: e.retries),
        ("SLO Met", lambda s, e: None if s.slo is None else e.good_requests),
        ("Goodput Requests/s", _goodput(lambda e: e.good_requests)),
        ("Goodput Input Tokens/s", _goodput(lambda e: e.good_input_tokens)),
    ]
    for key, title in TIMING_COLUMNS:
        if key == "e2e":
            cols.append(("E2E Mean", lambda s, e: shown_ms(e.e2e_moments.mean())))
            cols.append(("E2E Stddev", lambda s, e: shown_ms(e.e2e_moments.stddev())))
        for p in PERCENTILES:
            cell = cast(_Cell, lambda s, e, key=key, p=p: shown_ms(e.timings[key].percentile(p)))
            cols.append((f"{title} {_percent(p)}", cell))
        cell = cast(_Cell, lambda s, e, key=key: shown_ms(e.timings[key].max) if e.timings[key].n else None)
        cols.append((f"{title} Max", cell))
    return cols


COLUMNS = _columns()
HEADER = [title for title, _ in COLUMNS]


def rows(stats: PoolingStats) -> list[dict[str, Any]]:
    """One row per request name, then the Aggregated row; a timing with no sample is None (shown empty)."""
    entries = [*stats.sorted_entries(), stats.total]
    return [{title: value(stats, entry) for title, value in COLUMNS} for entry in entries]


def csv_text(table: Iterable[dict[str, Any]], header: Sequence[str] = HEADER) -> str:
    """A table's rows as CSV text, as Locust writes its own (None is an empty cell)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    for row in table:
        writer.writerow(["" if row[c] is None else row[c] for c in header])
    return out.getvalue()
