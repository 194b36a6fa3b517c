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
from poolbench_locust.capacity.lanes import Lane, as_dict, chart, comparison
from poolbench_locust.capacity.report import row

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
    """One row a probe that has ended, as PREFIX_capacity.csv has it, in the tab's columns; with --ab-host the
    probe's host before its number ("B 3")."""
    if shape is None:
        return []
    found = []
    for lane in shape.lanes:
        for p in lane.outcome.probes:
            cells = {c: row(p)[c] for c in TAB_HEADER}
            if lane.side is not None:
                cells["Probe"] = f"{lane.side} {p.number}"
            found.append(cells)
    return found


def _lane_state(lane: Lane) -> dict[str, Any]:
    search, outcome = lane.search, lane.outcome
    return {
        "bracket": {"passed": search.passed, "failed": search.failed},
        "ended": outcome.ended,
        "answer": outcome.answer() if outcome.ended is not None and outcome.probes else None,
        "search_number": len(lane.searches.outcomes),
    }


def state(shape: CapacityShape | None) -> dict[str, Any]:
    """The search as the tab's JSON route answers it. `result` is the JSON result's `capacity` object;
    `answer` is set once the search has ended."""
    if shape is None:
        return {"search": False, "running": False, "how_to_start": HOW_TO_START}
    current = shape.current if shape.running else None
    lanes = shape.lanes
    hosts = None
    if len(lanes) > 1:  # --ab-host: each host's own; the run's answer once both ended
        hosts = {lane.side: {"host": lane.host, **_lane_state(lane)} for lane in lanes}
    return {
        "search": True,
        "running": shape.running,
        "current": None if current is None else {"probe": current[0], "rate": current[1], "host": shape.current_side},
        # --repeat N: which of the N searches runs; `result` then averages the searches so far
        **_lane_state(lanes[0]),
        "searches_planned": shape.searches.planned,
        "result": as_dict(lanes),
        "hosts": hosts,
    }


def _e2e_bound(shape: CapacityShape) -> float | None:
    slo = shape.settings.slo
    return slo.e2e_ms if slo is not None else None


def _status(shape: CapacityShape) -> str:
    """What the search is doing, or how it ended: a line, or a line a host and their comparison."""
    ended = all(lane.outcome.ended is not None and lane.outcome.probes for lane in shape.lanes)
    if len(shape.lanes) == 1 or (not shape.running and not ended):
        return _lane_status(shape, shape.lanes[0])
    lines = "".join(_lane_status(shape, lane) for lane in shape.lanes)
    if ended:
        lines += f"<p><b>{html.escape(comparison(shape.lanes))}</b></p>"
    return lines


def _lane_status(shape: CapacityShape, lane: Lane) -> str:
    """One line: what a host's search is doing, or how it ended."""
    outcome, search = lane.outcome, lane.search
    if outcome.ended is not None and outcome.probes:
        return f"<p><b>{html.escape(outcome.answer())}</b></p>"
    if not shape.running:
        return "<p>No search under way: one starts with the next run.</p>"
    parts = [f"Host {lane.side} ({lane.host}):"] if lane.side is not None else []
    if shape.current is not None and shape.current_side == lane.side:
        number, rate = shape.current
        parts.append(f"Probe {lane.prefix}{number}: {rate:,.1f} requests/s, measuring.")
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
    return f"<p>{html.escape(title)}</p>" + _status(shape) + chart(shape.lanes, _e2e_bound(shape))


def report_section(shape: CapacityShape | None, section_id: str) -> str:
    """The HTML report's Capacity section, or nothing when the run searched none."""
    if shape is None or not any(lane.outcome.probes for lane in shape.lanes):
        return ""
    said = []
    for lane in shape.lanes:
        outcome = lane.outcome
        if outcome.ended is not None:
            said.append(outcome.answer())
        else:  # the web UI's report, asked for while the search goes on: no answer yet
            said.append(f"The search{lane.label} is under way: {len(outcome.probes)} probes so far.")
    if len(shape.lanes) > 1 and all(lane.outcome.ended is not None for lane in shape.lanes):
        said.append(comparison(shape.lanes))
    body = (
        "".join(f"<p>{html.escape(text)}</p>" for text in said)
        + htmltables.table(TAB_HEADER, rows(shape))
        + chart(shape.lanes, _e2e_bound(shape))
    )
    return htmltables.section(section_id, "Capacity", body)
