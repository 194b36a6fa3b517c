"""--find-capacity with --ab-host: each host's own search, their probes interleaved in time (A's probe, then
B's, then A's next...), so that both see the same drift of the machine's noise. A lane is one host's searches
(the run's only one without --ab-host): its bracket, its verdicts, its answer. Here too is where the lanes show
together: the console's tables and answers, PREFIX_capacity.csv (a Host column), the chart, the JSON result's
`capacity` (A's keys, as --host's, and each host's under `ab`)."""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from poolbench_locust.capacity.repeated import Searches
from poolbench_locust.capacity.report import CSV_COLUMNS, Outcome, probe_sheet, probes_sheet, row
from poolbench_locust.capacity.search import Search
from poolbench_locust.options import Settings
from poolbench_locust.urls import shown_url

logger = logging.getLogger("poolbench_locust")


@dataclass
class Lane:
    """One host's searches: `side` None for the run's only host, else "A" (--host) or "B" (--ab-host)."""

    side: str | None
    host: str
    settings: Settings
    searches: Searches = field(init=False)
    search: Search = field(init=False)
    outcome: Outcome = field(init=False)
    number: int = 0
    """The probes of its current search so far."""
    done: bool = False
    """Its searches are over: it probes no more."""

    def __post_init__(self) -> None:
        self.searches = Searches(self.settings.repeat)
        self.new_search()

    @property
    def label(self) -> str:
        """After "Capacity" in its answer: empty for the only host, " of A (URL)" for an A/B run's."""
        return "" if self.side is None else f" of {self.side} ({self.host})"

    @property
    def prefix(self) -> str:
        """Before a probe's number in the log: "A" or "B" (A3: A's third probe), empty for the only host."""
        return self.side or ""

    def new_search(self) -> None:
        """The next search, from the start rate: it knows nothing of the one before."""
        s = self.settings
        self.search = Search(s.capacity_start_rate, s.capacity_precision)
        self.outcome = Outcome(str(s.slo), s.capacity_attainment, s.capacity_precision, label=self.label)
        self.searches.outcomes.append(self.outcome)
        self.number = 0
        if s.repeat > 1:
            logger.info("Capacity search %d of %d%s", len(self.searches.outcomes), s.repeat, self.label)

    def next_rate(self) -> float | None:
        """The rate of this host's next probe, its searches moved on as each ends; None once all are over."""
        while not self.done:
            if self.outcome.ended is None:
                if (rate := self.search.next_rate()) is not None:
                    return rate
                search = self.search
                converged = search.converged()
                self.outcome.ended = (
                    "converged" if converged else "no rate passed" if search.passed is None else "every rate passed"
                )
            self.done = self.searches.over()
            logger.info("Capacity search%s over after %d probes (%s)", self.label, self.number, self.outcome.ended)
            if not self.done:
                self.new_search()
        return None

    def finish(self, ended: str) -> None:
        """The run is ending: a search that had not ended by itself ended so; one ended before its first probe
        is not a search."""
        self.done = True
        if self.outcome.ended is None and self.outcome.probes:
            self.outcome.ended = ended
        if not self.outcome.probes and len(self.searches.outcomes) > 1:
            self.searches.outcomes.pop()
            self.outcome = self.searches.outcomes[-1]


def new_lanes(settings: Settings, host: str | None) -> list[Lane]:
    """The run's lanes: its only host's, or with --ab-host A's and B's."""
    if settings.ab_host is None:
        return [Lane(None, "", settings)]
    return [Lane("A", shown_url(host or ""), settings), Lane("B", shown_url(settings.ab_host), settings)]


def b_against_a(lanes: list[Lane]) -> float | None:
    """B's capacity against A's, in % of A's, where both claimed one; else None."""
    if len(lanes) != 2:
        return None
    a, b = (lane.searches.as_dict()["requests_per_s"] for lane in lanes)
    return None if a is None or b is None or not a > 0 else 100.0 * (b - a) / a


def comparison(lanes: list[Lane]) -> str:
    """The closing line of an A/B search: each host's capacity and B's against A's."""
    shown = []
    for lane in lanes:
        found = lane.searches.as_dict()["requests_per_s"]
        shown.append(f"{lane.side} {'none claimed' if found is None else f'{found:,.1f} requests/s'}")
    text = f"Capacity, B against A (each host's own search, their probes interleaved): {', '.join(shown)}"
    if (difference := b_against_a(lanes)) is None:
        return text + "; no difference without a capacity of each."
    if difference == 0:
        return text + "; B equal to A."
    return text + f"; B {abs(difference):.0f} % {'higher' if difference > 0 else 'lower'} than A."


def console_lines(lanes: list[Lane], width: int | None) -> list[str]:
    if len(lanes) == 1:
        return lanes[0].searches.console_lines(width)
    lines: list[str] = []
    for lane in lanes:
        if lane.searches.outcomes and lane.outcome.probes:
            lines += [f"Host {lane.side}: {lane.host}", *lane.searches.console_lines(width), ""]
    return [*lines, comparison(lanes)]


def csv_table(lanes: list[Lane]) -> tuple[list[str], list[dict[str, Any]]]:
    """PREFIX_capacity.csv's columns and rows: one a probe; with --repeat its search first, with --ab-host its
    host before that."""
    repeated = lanes[0].settings.repeat > 1
    columns = (["Host"] if len(lanes) > 1 else []) + (["Search"] if repeated else []) + list(CSV_COLUMNS)
    rows = []
    for lane in lanes:
        for number, outcome in enumerate(lane.searches.outcomes, 1):
            lead = ({"Host": lane.side} if lane.side else {}) | ({"Search": number} if repeated else {})
            rows += [lead | row(p) for p in outcome.probes]
    return columns, rows


def write_csv(lanes: list[Lane], path: str) -> None:
    columns, rows = csv_table(lanes)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def as_dict(lanes: list[Lane]) -> dict[str, Any]:
    """The JSON result's `capacity`: the only host's searches; with --ab-host A's (--host's) keys, and each
    host's own under `ab` with B's capacity against A's."""
    first = lanes[0].searches.as_dict()
    if len(lanes) == 1:
        return {**first, "ab": None}
    hosts = {lane.side: {"host": lane.host, **lane.searches.as_dict()} for lane in lanes if lane.side}
    return {**first, "ab": {**hosts, "b_against_a_percent": b_against_a(lanes), "answer": comparison(lanes)}}


def failed(lanes: Iterable[Lane]) -> list[Outcome]:
    """Each host's searches that claimed no capacity of its server."""
    return [o for lane in lanes for o in lane.searches.outcomes if o.failed()]


def chart(lanes: list[Lane], e2e_bound_ms: float | None) -> str:
    """PREFIX_capacity.svg: the probes' attainment and E2E p99 against their rate; with --ab-host a line a host."""
    if len(lanes) == 1:
        return probe_sheet(lanes[0].outcome, e2e_bound_ms)
    first = lanes[0].outcome
    title = f"Capacity search of each host: {100 * first.target_attainment:g} % within {first.slo}"
    groups = [(lane.side or "", lane.outcome.probes) for lane in lanes]
    return probes_sheet(title, groups, first.target_attainment, e2e_bound_ms)
