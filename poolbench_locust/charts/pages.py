"""The charts in HTML: a section of the HTML report (--html and the web UI's /stats/report), and the
fragment the web UI's Pooling tab shows live, both drawn from the run's history."""

from __future__ import annotations

from typing import Any

from locust.env import Environment

from poolbench_locust import htmltables
from poolbench_locust.charts.figures import POOLING_CHARTS, knee_charts, records_of, time_charts
from poolbench_locust.metrics.history import history_of
from poolbench_locust.sweep.steps import STEP_COLUMNS
from poolbench_locust.sweep.sweep_shape import SweepShape

SECTION_ID = "poolbench-charts"


def sweep_steps(environment: Environment, ended: bool = False) -> list[dict[str, Any]]:
    """The sweep's rows so far, as PREFIX_sweep.csv has them (none when the run is no sweep); with
    `ended`, the last step's row too."""
    shape = environment.shape_class
    if not isinstance(shape, SweepShape):
        return []
    if ended:
        shape.finish()
    return [dict(zip(STEP_COLUMNS, row, strict=True)) for row in shape.rows]


def grid(charts: list[str]) -> str:
    return '<div style="display:flex;flex-wrap:wrap;gap:8px">' + "".join(charts) + "</div>"


def live_fragment(environment: Environment) -> str:
    """What the Pooling tab shows under its table: the charts of the run so far."""
    charts = time_charts(records_of(history_of(environment).samples), POOLING_CHARTS)
    if steps := sweep_steps(environment):
        charts += knee_charts(steps)
    return grid(charts)


def report_section(environment: Environment, ended: bool = False) -> str:
    charts = time_charts(records_of(history_of(environment).samples), POOLING_CHARTS)
    parts = [
        htmltables.STYLE,
        f'<section id="{SECTION_ID}" class="poolbench-section">',
        "<h2>Pooling charts</h2>",
        "<p>Throughput over Locust's current 10 s window; TTFB and E2E percentiles of the requests of the last "
        "10 s; sampled every second (further apart on long runs).</p>",
        grid(charts),
    ]
    if steps := sweep_steps(environment, ended):
        parts += ["<h3>Sweep</h3>", grid(knee_charts(steps))]
    parts.append("</section>")
    return "".join(parts)
