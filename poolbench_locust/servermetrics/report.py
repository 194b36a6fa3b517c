"""The server's view as tables: one row per server, and the reconciliation of its counts with the client's.

Every place shows these same rows: the web UI tabs, PREFIX_server_metrics.csv and
PREFIX_server_reconciliation.csv, the HTML report and the console. Times are in ms.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from poolbench_locust import htmltables, texttable
from poolbench_locust.charts.svg import Series, line_chart
from poolbench_locust.servermetrics import gpu
from poolbench_locust.servermetrics.deltas import ServerView
from poolbench_locust.servermetrics.flavors import DURATIONS

PERCENTILES = (0.50, 0.90, 0.99)
Value = int | float | str | None


def _ms(seconds: float | None) -> Value:
    if seconds is None:
        return None
    return "+Inf" if math.isinf(seconds) else round(seconds * 1000, 2)


def _count(view: ServerView, role: str) -> Value:
    return round(view.counters[role]) if view.has(role) else None


def _per_second(view: ServerView, role: str) -> Value:
    seconds = view.seconds()
    return round(view.counters[role] / seconds, 1) if view.has(role) and seconds > 0 else None


def _current(view: ServerView, role: str) -> Value:
    rate = view.current_rate(role)
    return None if rate is None else round(rate, 1)


def _mean(view: ServerView, role: str) -> Value:
    if view.has(role):
        return _ms(view.hists[role].mean())
    summed = DURATIONS.get(role)
    if summed is None or not view.has(summed) or not view.has("requests") or view.counters["requests"] <= 0:
        return None
    return _ms(view.counters[summed] / 1e6 / view.counters["requests"])


def _percentile(view: ServerView, role: str, p: float) -> Value:
    return _ms(view.hists[role].percentile(p)) if view.has(role) else None


def _gauge(view: ServerView, role: str, pick: Callable[[Any], float | None]) -> Value:
    if not view.has(role) or view.gauges[role].n == 0:
        return None
    value = pick(view.gauges[role])
    return None if value is None else round(value, 1)


def prefix_cache_hit_pct(view: ServerView) -> Value:
    """The share of the tokens looked up in the server's prefix cache during the run that it found there, in %:
    None where the server exports no such counters, or looked nothing up; None too where its hits outgrew its
    lookups (a restart of one counter and not the other, a server's bug): that is no share."""
    if not all(view.has(role) and role in view.seen for role in ("prefix_cache_queries", "prefix_cache_hits")):
        return None
    queries, hits = view.counters["prefix_cache_queries"], view.counters["prefix_cache_hits"]
    if queries <= 0 or hits > queries:
        return None
    return round(100 * hits / queries, 1)


_Cell = Callable[[ServerView], Value]
"""A column's value of a server. The lambdas that bind their loop's values as defaults are cast to it: mypy
cannot type such a lambda against a Callable."""


def _columns() -> list[tuple[str, Callable[[ServerView], Value]]]:
    cols: list[tuple[str, Callable[[ServerView], Value]]] = [
        ("Server", lambda v: v.shown),
        ("Kind", lambda v: v.flavor.name if v.flavor else ""),
        ("Scrapes", lambda v: v.scrapes),
        ("Failed Scrapes", lambda v: v.failures),
        ("Seconds", lambda v: round(v.seconds(), 1)),
        ("Requests", lambda v: _count(v, "requests")),
        ("Requests/s", lambda v: _per_second(v, "requests")),
        ("Current Requests/s", lambda v: _current(v, "requests")),
        ("Sequences", lambda v: _count(v, "sequences")),
        ("Prompt Tokens", lambda v: _count(v, "prompt_tokens")),
        ("Prompt Tokens/s", lambda v: _per_second(v, "prompt_tokens")),
        ("Current Prompt Tokens/s", lambda v: _current(v, "prompt_tokens")),
        ("Latency Mean", lambda v: _mean(v, "latency")),
    ]
    for p in PERCENTILES:
        cols.append((f"Latency {round(p * 100)}%", cast(_Cell, lambda v, p=p: _percentile(v, "latency", p))))
    cols += [
        ("Current Latency Mean", lambda v: _ms(v.current_mean("latency"))),
        ("HTTP Latency Mean", lambda v: _mean(v, "http_latency")),
        ("Queue Mean", lambda v: _mean(v, "queue")),
    ]
    for p in PERCENTILES:
        cols.append((f"Queue {round(p * 100)}%", cast(_Cell, lambda v, p=p: _percentile(v, "queue", p))))
    cols.append(("Compute Mean", lambda v: _mean(v, "compute")))
    for role, title in (("running", "Running"), ("waiting", "Waiting")):
        cols += [
            (title, cast(_Cell, lambda v, role=role: _gauge(v, role, lambda g: g.last))),
            (f"{title} Mean", cast(_Cell, lambda v, role=role: _gauge(v, role, lambda g: g.mean()))),
            (f"{title} Max", cast(_Cell, lambda v, role=role: _gauge(v, role, lambda g: g.max))),
        ]
    cols += [
        ("Prefix Cache Hit %", prefix_cache_hit_pct),
        # the client's share of repeated inputs (--repeat-ratio), beside the server's figure: server_rows fills it
        (CLIENT_REPEAT, lambda v: None),
        ("Rejected Series", lambda v: v.rejected),
        ("Counter Resets", lambda v: v.resets),
    ]
    return cols


CLIENT_REPEAT = "Client Repeat %"
"""--repeat-ratio in %, on the rows of a server that has a prefix-cache hit rate: the share of the inputs the
client sent as copies of earlier ones (each pool holds it to within one request's inputs)."""


SERVER_COLUMNS = _columns()
GPU_COLUMNS = {
    "GPUs": "gpus",
    "GPU Util Mean": "gpu_util_mean_pct",
    "GPU Util Max": "gpu_util_max_pct",
    "Power Mean W": "power_mean_w",
    "Power Max W": "power_max_w",
    "GPU Memory Max MiB": "memory_used_max_mib",
    "Energy J": "energy_j",
    "Energy J/1M Input Tokens": "energy_j_per_1m_input_tokens",
    "Energy J/1k Requests": "energy_j_per_1k_requests",
}
"""A dcgm-exporter target's columns (gpu.py's figures; utilisation in %); empty for every other server."""
GPU_KIND = "dcgm gpu"
"""The Kind of the rows that follow a dcgm-exporter target of several GPUs: one a GPU."""
# the GPU columns go before the last two, the scrape-quality counts (Rejected Series, Counter Resets)
HEADER = [title for title, _ in SERVER_COLUMNS[:-2]] + list(GPU_COLUMNS) + [t for t, _ in SERVER_COLUMNS[-2:]]


def _gpu_cells(figures: gpu.GpuFigures | gpu.OneGpu | None) -> dict[str, Value]:
    return {title: getattr(figures, name, None) if figures is not None else None for title, name in GPU_COLUMNS.items()}


def server_rows(
    views: Iterable[ServerView], client: Client | None = None, repeat_ratio: float | None = None
) -> list[dict[str, Value]]:
    """A row per server; a dcgm-exporter target of several GPUs is followed by a row per GPU. The client's
    input tokens and successful requests (None: unknown) give the energy per million and per thousand;
    `repeat_ratio` (--repeat-ratio) is shown beside a server's prefix-cache hit rate."""
    rows: list[dict[str, Value]] = []
    for view in views:
        row = {title: value(view) for title, value in SERVER_COLUMNS}
        if row["Prefix Cache Hit %"] is not None and repeat_ratio is not None:
            row[CLIENT_REPEAT] = round(100 * repeat_ratio, 1)
        figures = gpu.figures(view, *((client.input_tokens, client.successes) if client is not None else (0, 0)))
        rows.append({title: row.get(title) for title in HEADER} | _gpu_cells(figures))
        if figures is not None and len(figures.per_gpu) > 1:
            for one in figures.per_gpu:
                cells: dict[str, Value] = dict.fromkeys(HEADER)
                rows.append(cells | {"Server": f"{view.shown} {one.gpu}", "Kind": GPU_KIND} | _gpu_cells(one))
    return rows


@dataclass(frozen=True)
class Client:
    """The client's side of the reconciliation, from the pooling stats and Locust's own."""

    successes: int
    sequences: int
    input_tokens: int
    e2e_mean_ms: float | None
    in_flight: int
    """Requests that may be in flight at a scrape: the most users the run had (each has one at most)."""


LATENCY_GAP_FLOOR_MS = 10.0
"""A client mean above the server's by more than the server's own mean and more than this is flagged."""
LARGE_GAP_NOTE = (
    "larger than the server's own time: the client was saturated (see Client load: the rate sent, "
    "its lateness and CPU) or the network is slow"
)

RECONCILIATION_HEADER = ["Check", "Server", "Client", "Gap", "Allowed Gap", "Flagged", "Note"]


def _per_request(total: int, requests: int) -> int:
    return math.ceil(total / requests) if requests else 0


def reconciliation(views: Sequence[ServerView], client: Client) -> list[dict[str, Value]]:
    """Server against client, summed over the servers: a count gap larger than the requests in flight
    (in that figure's units) is flagged; so is a server mean latency above the client's, and a client mean
    above the server's by more than the server's own mean and more than LATENCY_GAP_FLOOR_MS."""
    answered = [v for v in views if v.scrapes]
    table: list[dict[str, Value]] = []

    def count_row(check: str, role: str, mine: int, allowed: int, note: str) -> None:
        having = [v for v in answered if v.has(role)]
        if not having:
            return
        theirs = round(sum(v.counters[role] for v in having))
        gap = theirs - mine
        table.append(
            {
                "Check": check,
                "Server": theirs,
                "Client": mine,
                "Gap": gap,
                "Allowed Gap": allowed,
                "Flagged": "yes" if abs(gap) > allowed else "",
                "Note": note,
            }
        )

    inflight = client.in_flight
    count_row(
        "Requests",
        "requests",
        client.successes,
        inflight,
        "the server's 2xx answers to the run's routes vs Locust's successful requests",
    )
    per = _per_request(client.sequences, client.successes)
    count_row("Sequences", "sequences", client.sequences, inflight * per, "prompts the server ran vs the client's")
    per = _per_request(client.input_tokens, client.successes)
    count_row(
        "Prompt Tokens",
        "prompt_tokens",
        client.input_tokens,
        inflight * per,
        "the server's token counter vs the client's Input Tokens",
    )
    latency = _server_mean(answered)
    if latency is not None and client.e2e_mean_ms is not None:
        role, server_ms = latency
        gap = round(client.e2e_mean_ms - server_ms, 2)
        note = f"client E2E minus the server's {'HTTP ' if role == 'http_latency' else ''}mean: "
        allowed = max(server_ms, LATENCY_GAP_FLOOR_MS)
        if gap > allowed:
            note += LARGE_GAP_NOTE
        else:
            note += "the network's and the client's share"
        table.append(
            {
                "Check": "Mean Latency",
                "Server": round(server_ms, 2),
                "Client": round(client.e2e_mean_ms, 2),
                "Gap": gap,
                "Allowed Gap": round(allowed, 2),
                "Flagged": "yes" if gap < 0 or gap > allowed else "",
                "Note": note,
            }
        )
    return table


def _server_mean(views: Sequence[ServerView]) -> tuple[str, float] | None:
    """The server's mean time of a request, over all servers: its HTTP layer's where it has one (a
    request's whole time there), else its own request latency (Triton's: its microseconds over its requests)."""
    for role in ("http_latency", "latency"):
        hists = [v.hists[role] for v in views if v.has(role) and v.hists[role].count > 0]
        if hists:
            return role, 1000 * sum(h.sum for h in hists) / sum(h.count for h in hists)
    summed = [v for v in views if v.has(DURATIONS["latency"]) and v.has("requests") and v.counters["requests"] > 0]
    if summed:
        total_us = sum(v.counters[DURATIONS["latency"]] for v in summed)
        return "latency", total_us / 1000 / sum(v.counters["requests"] for v in summed)
    return None


GAUGES = (("running", "requests running"), ("waiting", "requests waiting"))


def gauge_chart(view: ServerView) -> str:
    """Requests running and waiting at each scrape, as an inline SVG (no script: the report stays one file)."""
    points = [(at, values) for at, values in view.history if any(values.get(r) is not None for r, _ in GAUGES)]
    if len(points) < 2:
        return ""
    t0 = points[0][0]
    series = [
        Series(legend, [(at - t0, value) for at, values in points if (value := values.get(role)) is not None])
        for role, legend in GAUGES
        if view.has(role)  # a gauge the server has not (TEI's running) gets no line and no legend
    ]
    return line_chart(
        f"{view.shown}: requests {' and '.join(s.label.removeprefix('requests ') for s in series)}, at each scrape",
        series,
        y_unit="requests",
        x_label="elapsed (m:ss)",
        x_from_zero=True,
        markers=len(points) <= 60,
    )


def html_section(servers: list[dict[str, Value]], checks: list[dict[str, Value]], charts: str = "") -> str:
    body = (
        htmltables.table(HEADER, servers)
        + "<h3>Server against client</h3>"
        + htmltables.table(RECONCILIATION_HEADER, checks)
        + charts
    )
    return htmltables.section("poolbench-server-metrics", CAPTION, body)


CAPTION = "Server metrics (the server's own /metrics; times in ms, GPU util in %)"
CONSOLE_COLUMNS = (
    "Server",
    "Kind",
    "Requests",
    "Sequences",
    "Prompt Tokens",
    "Latency Mean",
    "Latency 99%",
    "HTTP Latency Mean",
    "Queue Mean",
    "Running Max",
    "Waiting Max",
    "Failed Scrapes",
)


def _aligned(header: Sequence[str], table: Sequence[dict[str, Value]], width: int | None = None) -> list[str]:
    cells = [list(header)] + [["" if r[c] is None else str(r[c]) for c in header] for r in table]
    return texttable.fitted_lines(cells, width, right=False)


GPU_CONSOLE_COLUMNS = ("Server", "GPUs", "GPU Util Mean", "GPU Util Max", "Power Mean W", "GPU Memory Max MiB")
ENERGY_CONSOLE_COLUMNS = ("Server", "Seconds", "Energy J", "Energy J/1M Input Tokens", "Energy J/1k Requests")


def console_lines(
    servers: list[dict[str, Value]], checks: list[dict[str, Value]], width: int | None = None
) -> list[str]:
    """The server's tables for the console, each fitted to `width` (--console-width; 0 or None: whole)."""
    gpus = [r for r in servers if r["Kind"] in (gpu.DCGM.name, GPU_KIND)]
    servers = [r for r in servers if r["Kind"] != GPU_KIND]
    columns: tuple[str, ...] = CONSOLE_COLUMNS
    if any(r.get("Prefix Cache Hit %") is not None for r in servers):  # a server's cache answered: beside it
        columns = (*columns[:-1], "Prefix Cache Hit %", CLIENT_REPEAT, columns[-1])
    lines = [CAPTION, *_aligned(columns, servers, width)]
    if gpus:
        targets = [r for r in gpus if r["Kind"] == gpu.DCGM.name]
        lines += ["", "GPUs (dcgm-exporter; util in %)", *_aligned(GPU_CONSOLE_COLUMNS, gpus, width)]
        lines += ["", "Energy of the measured window", *_aligned(ENERGY_CONSOLE_COLUMNS, targets, width)]
    if checks:
        lines += ["", "Server against client", *_aligned(RECONCILIATION_HEADER[:-1], checks, width)]
        # the table leaves its notes out (too wide for a console), but not this one: it changes the reading
        for r in checks:
            if LARGE_GAP_NOTE in str(r["Note"]):
                lines += texttable.wrapped(f"{r['Check']} flagged: {r['Note']}", width)
    return lines
