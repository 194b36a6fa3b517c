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
    "Sent MB/s",
    "Token Source",
    "TTFB 50%",
    "E2E 50%",
    "E2E 95%",
    "Transfer 95%",
)
GAP_COLUMNS = ("Client Tokens", "Token Gap %")
"""Shown after Token Source when some row has both counts."""
IMAGE_COLUMNS = ("Image Tokens", "Image Tokens/s")
"""Shown after Input Tokens/s when some answer gave an image token count (Cohere's billed_units.image_tokens)."""
VECTOR_COLUMNS = ("Vectors/s",)
"""Shown after Sequences/s when some row's answers held other than one vector per sequence (token-level)."""
GOODPUT_COLUMNS = ("SLO Met", "Goodput Requests/s", "Goodput Input Tokens/s")
"""Shown at the end when --slo is given."""


def cell(value: Any) -> str:
    """A figure as the console shows it: empty for none, thousands separated (1,234,567.8)."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{value:,}"


def _after(shown: tuple[str, ...], column: str, added: tuple[str, ...]) -> tuple[str, ...]:
    at = shown.index(column) + 1
    return (*shown[:at], *added, *shown[at:])


def columns(table: list[dict[str, Any]], goodput: bool = False) -> tuple[str, ...]:
    """The summary's columns: the optional ones only where some row has a figure for them."""
    shown = SUMMARY_COLUMNS + (GOODPUT_COLUMNS if goodput else ())
    if any(row["Image Tokens"] is not None for row in table):
        shown = _after(shown, "Input Tokens/s", IMAGE_COLUMNS)
    if any(row["Vectors"] != row["Sequences"] for row in table):
        shown = _after(shown, "Sequences/s", VECTOR_COLUMNS)
    if any(row["Client Tokens"] is not None for row in table):
        shown = _after(shown, "Token Source", GAP_COLUMNS)
    return shown


def console_table(stats: PoolingStats) -> list[str]:
    table = rows(stats)
    shown = columns(table, goodput=stats.slo is not None)
    cells = [list(shown), *([cell(row[c]) for c in shown] for row in table)]
    lines = texttable.aligned(cells)
    rule = "-" * len(lines[0])
    return [
        "Pooling statistics (tokens, sequences and vectors of successful requests; MB/s received and "
        "Sent MB/s of every request; times in ms)",
        *([] if stats.slo is None else [f"Goodput: successful requests that met every objective of --slo {stats.slo}"]),
        rule,
        lines[0],
        rule,
        *lines[1:-1],
        rule,
        lines[-1],
    ]
