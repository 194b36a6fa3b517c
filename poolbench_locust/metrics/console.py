"""The pooling summary printed after Locust's own tables: the figures a run is judged by, with
thousands separators, and the client's token count beside the server's wherever both exist (a
server whose `usage` counts characters shows at once)."""

from __future__ import annotations

from typing import Any

from poolbench_locust import texttable
from poolbench_locust.metrics.collector import PoolingStats
from poolbench_locust.metrics.table import rows

SUMMARY_COLUMNS = (
    "Name",
    "Request Count",
    "Failure Count",
    "Input Tokens",
    "Input Tokens/s",
    "Sequences/s",
    "MB/s",
    "Token Source",
    "TTFB 50%",
    "E2E 50%",
    "E2E 95%",
    "Transfer 95%",
)
GAP_COLUMNS = ("Client Tokens", "Token Gap %")
"""Shown after Token Source when some row has both counts."""
GOODPUT_COLUMNS = ("SLO Met", "Goodput Requests/s", "Goodput Input Tokens/s")
"""Shown at the end when --slo is given."""


def cell(value: Any) -> str:
    """A figure as the console shows it: empty for none, thousands separated (1,234,567.8)."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{value:,}"


def columns(table: list[dict[str, Any]], goodput: bool = False) -> tuple[str, ...]:
    shown = SUMMARY_COLUMNS + (GOODPUT_COLUMNS if goodput else ())
    if not any(row["Client Tokens"] is not None for row in table):
        return shown
    at = shown.index("Token Source") + 1
    return (*shown[:at], *GAP_COLUMNS, *shown[at:])


def console_table(stats: PoolingStats) -> list[str]:
    table = rows(stats)
    shown = columns(table, goodput=stats.slo is not None)
    cells = [list(shown), *([cell(row[c]) for c in shown] for row in table)]
    lines = texttable.aligned(cells)
    rule = "-" * len(lines[0])
    return [
        "Pooling statistics (tokens, sequences and bytes of successful requests; times in ms)",
        *([] if stats.slo is None else [f"Goodput: successful requests that met every objective of --slo {stats.slo}"]),
        rule,
        lines[0],
        rule,
        *lines[1:-1],
        rule,
        lines[-1],
    ]
