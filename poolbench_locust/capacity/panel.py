"""What the web UI's Capacity tab and the HTML report show of a search: its state as JSON (the probes so far,
each as the JSON result has it, the bracket, the probe measuring now, the answer once the search has
ended), the tab's rows (PREFIX_capacity.csv's columns), and the HTML under the tab's table and in the
report (the bracket or the answer, and the probes' chart).

Every text goes into HTML escaped: a probe's reasons may quote what a server said (its queue, its name)."""

from __future__ import annotations

import html
from typing import Any

from poolbench_locust import htmltables
from poolbench_locust.capacity.capacity_shape import CapacityShape
from poolbench_locust.capacity.report import Outcome, probe_sheet, row

TAB_HEADER = (
    "Probe",
    "Target Requests/s",
    "Sent Ratio",
    "Requests/s",
    "Attainment",
    "E2E 99%",
    "Server Waiting",
    "Passed",
    "Limited By",
    "Why",
)
"""The tab's columns: PREFIX_capacity.csv's, with their values as it has them."""
HOW_TO_START = (
    "No capacity search in this run. To start one, tick 'Find the capacity' in the form's Capacity group (or "
    "start locust with --find-capacity), give an objective (--slo, e.g. e2e_ms=200) and Users (the most "
    "requests in flight at once); its probes, the bracket and the answer show here as the search goes."
)


def rows(shape: CapacityShape | None) -> list[dict[str, Any]]:
    """One row a probe that has ended, as PREFIX_capacity.csv has it, in the tab's columns."""
    if shape is None:
        return []
    return [{c: row(p)[c] for c in TAB_HEADER} for p in shape.outcome.probes]


def state(shape: CapacityShape | None) -> dict[str, Any]:
    """The search as the tab's JSON route answers it. `result` is the JSON result's `capacity` object;
    `answer` is set once the search has ended."""
    if shape is None:
        return {"search": False, "running": False, "how_to_start": HOW_TO_START}
    outcome, search = shape.outcome, shape.search
    ended = outcome.ended is not None
    current = shape.current if shape.running else None
    return {
        "search": True,
        "running": shape.running,
        "current": None if current is None else {"probe": current[0], "rate": current[1]},
        "bracket": {"passed": search.passed, "failed": search.failed},
        "ended": outcome.ended,
        "answer": outcome.answer() if ended and outcome.probes else None,
        # --repeat N: which of the N searches runs; `result` then averages the searches so far
        "search_number": len(shape.searches.outcomes),
        "searches_planned": shape.searches.planned,
        "result": shape.searches.as_dict(),
    }


def _e2e_bound(shape: CapacityShape) -> float | None:
    slo = shape.settings.slo
    return slo.e2e_ms if slo is not None else None


def _status(shape: CapacityShape) -> str:
    """One line: what the search is doing, or how it ended."""
    outcome, search = shape.outcome, shape.search
    if outcome.ended is not None and outcome.probes:
        return f"<p><b>{html.escape(outcome.answer())}</b></p>"
    if not shape.running:
        return "<p>No search under way: one starts with the next run.</p>"
    parts = []
    if shape.current is not None:
        number, rate = shape.current
        parts.append(f"Probe {number}: {rate:,.1f} requests/s, measuring.")
    if search.passed is not None and search.failed is not None:
        parts.append(
            f"Bracket: {search.passed:,.1f} requests/s passed, {search.failed:,.1f} requests/s failed "
            f"(bisecting to {100 * shape.settings.capacity_precision:g} %)."
        )
    elif search.passed is not None:
        parts.append(f"Highest rate that passed: {search.passed:,.1f} requests/s (doubling).")
    elif search.failed is not None:
        parts.append(f"Lowest rate that failed: {search.failed:,.1f} requests/s (halving).")
    return f"<p>{html.escape(' '.join(parts))}</p>"


def fragment(shape: CapacityShape | None) -> str:
    """What the tab shows under its table: the search's status or answer, then the probes' chart."""
    if shape is None:
        return f"<p>{html.escape(HOW_TO_START)}</p>"
    title = (
        f"Capacity search: {100 * shape.settings.capacity_attainment:g} % of requests within "
        f"{shape.outcome.slo} (--find-capacity)"
    )
    return f"<p>{html.escape(title)}</p>" + _status(shape) + probe_sheet(shape.outcome, _e2e_bound(shape))


def report_section(shape: CapacityShape | None, section_id: str) -> str:
    """The HTML report's Capacity section, or nothing when the run searched none."""
    if shape is None or not shape.outcome.probes:
        return ""
    outcome: Outcome = shape.outcome
    if outcome.ended is not None:
        status = outcome.answer()
    else:  # the web UI's report, asked for while the search goes on: no answer yet
        status = f"The search is under way: {len(outcome.probes)} probes so far."
    body = (
        f"<p>{html.escape(status)}</p>"
        + htmltables.table(TAB_HEADER, rows(shape))
        + probe_sheet(outcome, _e2e_bound(shape))
    )
    return htmltables.section(section_id, "Capacity", body)
