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


THROUGHPUT = (
    "Name",
    "Request Count",
    "Failure Count",
    "Input Tokens/s",
    "Image Tokens/s",
    "Sequences/s",
    "Vectors/s",
    "MB/s",
    "Sent MB/s",
)
LATENCY = ("Name", "TTFB 50%", "E2E 50%", "E2E 95%", "Transfer 95%")
TOKENS = ("Name", "Input Tokens", "Image Tokens", "Token Source", "Client Tokens", "Token Gap %")
GOODPUT = ("Name", "SLO Met", "Goodput Requests/s", "Goodput Input Tokens/s")
SPLIT = (THROUGHPUT, LATENCY, TOKENS, GOODPUT)
"""The summary's tables within a width: throughput, latency, tokens, and goodput where --slo asks for it;
each holds those of its columns that `columns()` shows."""
TITLE = "Pooling statistics (tokens, sequences and vectors of successful requests; MB/s of every request; times in ms)"


def _lines(shown: tuple[str, ...], table: list[dict[str, Any]], width: int | None) -> list[str]:
    cells = [list(shown), *([cell(row[c]) for c in shown] for row in table)]
    lines: list[str] = []
    for part in texttable.fitted(cells, width):
        rule = "-" * max(len(line) for line in part)
        lines += [*([""] if lines else []), rule, part[0], rule, *part[1:-1], rule, part[-1]]
    return lines


def console_table(stats: PoolingStats, width: int | None = None) -> list[str]:
    """The pooling summary: one table of every column when `width` is 0 or None, else tables of throughput,
    latency, tokens and goodput, each fitted to `width` (--console-width)."""
    table = rows(stats)
    shown = columns(table, goodput=stats.slo is not None)
    out = texttable.wrapped(TITLE, width)
    if stats.slo is not None:
        out += texttable.wrapped(f"Goodput: successful requests that met every objective of --slo {stats.slo}", width)
    if not width:
        return out + _lines(shown, table, None)
    first = True
    for names in SPLIT:
        part = tuple(c for c in names if c == "Name" or c in shown)
        if len(part) > 1:  # goodput without --slo has no column
            out += [*([] if first else [""]), *_lines(part, table, width)]
            first = False
    return out
