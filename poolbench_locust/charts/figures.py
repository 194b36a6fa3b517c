"""Which charts a run gets, drawn from records: one dict per second of the run (a history sample's
Aggregated row, or a row of PREFIX_pooling_history.csv) or per sweep step (a row of PREFIX_sweep.csv).
The live history and the CSV files after the fact give the same records, hence the same pictures."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from poolbench_locust.charts.svg import HEIGHT, WIDTH, Series, finite, line_chart, number_label
from poolbench_locust.metrics.history import Sample, window_column

Record = Mapping[str, Any]
Chart = tuple[str, str, tuple[tuple[str, str], ...]]
"""(title, unit, ((column, legend), ...)): one chart, a line per column."""

POOLING_CHARTS: tuple[Chart, ...] = (
    ("Input tokens/s", "tokens/s", (("Current Input Tokens/s", "input tokens/s"),)),
    ("Sequences/s", "sequences/s", (("Current Sequences/s", "sequences/s"),)),
    ("MB/s received and sent", "MB/s", (("Current MB/s", "received"), ("Current Sent MB/s", "sent"))),
    (
        "Time to headers (TTFB), last 10 s",
        "ms",
        ((window_column("TTFB", 0.5), "p50"), (window_column("TTFB", 0.95), "p95")),
    ),
    ("End to end (E2E), last 10 s", "ms", ((window_column("E2E", 0.5), "p50"), (window_column("E2E", 0.95), "p95"))),
    ("Users", "users", (("User Count", "users"),)),
)
STATS_CHARTS: tuple[Chart, ...] = (
    ("Requests/s (Locust)", "requests/s", (("Requests/s", "requests/s"), ("Failures/s", "failures/s"))),
    ("Response time (Locust)", "ms", (("50%", "p50"), ("95%", "p95"))),
    ("Users", "users", (("User Count", "users"),)),
)
"""From Locust's own PREFIX_stats_history.csv."""
KNEE_THROUGHPUTS = (("Requests/s", "requests/s"), ("Input Tokens/s", "input tokens/s"))
KNEE_LATENCIES = (("E2E 50%", "E2E p50"), ("E2E 99%", "E2E p99"))
KNEE_NOTES = ("Step", "Target")
"""What labels a knee's point: the step's number and its target (users, or requests/s)."""


def records_of(samples: Iterable[Sample]) -> list[dict[str, Any]]:
    """The Aggregated row of each history sample, with its time and user count, as the CSV has them
    (the time in whole seconds, as Locust writes it: the live chart and the CSV's are the same)."""
    return [
        {**sample["rows"][-1], "Timestamp": int(sample["time"]), "User Count": sample["user_count"]}
        for sample in samples
        if sample["rows"]
    ]


def time_charts(records: Sequence[Record], charts: Sequence[Chart]) -> list[str]:
    """One SVG per chart, against the seconds since the first record."""
    times = [finite(r.get("Timestamp")) for r in records]
    start = min((t for t in times if t is not None), default=0.0)
    drawn = []
    for title, unit, columns in charts:
        series = [
            Series(
                legend,
                [
                    (t - start, y)
                    for t, r in zip(times, records, strict=True)
                    if t is not None and (y := finite(r.get(column))) is not None
                ],
            )
            for column, legend in columns
        ]
        drawn.append(line_chart(title, series, y_unit=unit, x_label="elapsed (m:ss)", x_from_zero=True))
    return drawn


def knee_charts(steps: Sequence[Record]) -> list[str]:
    """E2E p50/p99 against the throughput each sweep step achieved, one chart per throughput; the
    p99 points labelled with their step and its target (users, or requests/s), the x axis fitted
    to the throughputs reached."""
    drawn = []
    for column, label in KNEE_THROUGHPUTS:
        series = []
        for latency, legend in KNEE_LATENCIES:
            kept = [
                ((x, y), _step_note(s))
                for s in steps
                if (x := finite(s.get(column))) is not None and (y := finite(s.get(latency))) is not None
            ]
            notes = [n for _, n in kept] if latency == KNEE_LATENCIES[-1][0] else []
            series.append(Series(legend, [p for p, _ in kept], notes))
        drawn.append(
            line_chart(
                f"Sweep: E2E against {label}",
                series,
                y_unit="ms",
                x_label=f"{label} achieved; points: step #, target",
                x_format=number_label,
                markers=True,
            )
        )
    return drawn


def _step_note(step: Record) -> str:
    number, target = finite(step.get("Step")), finite(step.get("Target"))
    if number is None:
        return ""
    return f"#{number:g}" + (f" {number_label(target)}" if target is not None else "")


def sheet(title: str, charts: Sequence[str]) -> str:
    """Several charts as one standalone SVG image, two to a row."""
    if not charts:
        return ""
    columns = min(2, len(charts))
    rows = (len(charts) + columns - 1) // columns
    width, height = WIDTH * columns, HEIGHT * rows + 30
    cells = "".join(
        f'<g transform="translate({(i % columns) * WIDTH},{30 + (i // columns) * HEIGHT})">{chart}</g>'
        for i, chart in enumerate(charts)
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
        f'<rect width="{width}" height="{height}" fill="#fff"/>'
        f'<text x="12" y="20" font-family="sans-serif" font-size="15" font-weight="bold">{escape(title)}</text>'
        f"{cells}</svg>"
    )


def knee_sheet(steps: Sequence[Record]) -> str:
    """The sweep's knee as one image: PREFIX_sweep.svg."""
    return sheet("Sweep: the knee", knee_charts(steps))
