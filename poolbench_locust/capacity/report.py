"""Where the search shows: the console's probe table and its one answer line, PREFIX_capacity.csv (one
row a probe) and the JSON result's `capacity` object, all from one `Outcome`."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from typing import Any

from poolbench_locust import texttable
from poolbench_locust.capacity import probe_energy
from poolbench_locust.capacity.probes import CLIENT, USERS, Probe
from poolbench_locust.charts.figures import sheet
from poolbench_locust.charts.svg import Series, line_chart, number_label
from poolbench_locust.consistency.state import TOTAL, WINDOW_COLUMNS, window_cells
from poolbench_locust.metrics.pacing import users_advice
from poolbench_locust.metrics.table import shown_ms

CSV_COLUMNS = (
    "Probe",
    "Target Requests/s",
    "Seconds",
    "Scheduled",
    "Sent",
    "Sent Ratio",
    "Request Count",
    "Failure Count",
    "Good Count",
    "Requests/s",
    "Sequences/s",
    "Input Tokens/s",
    "Attainment",
    "E2E 50%",
    "E2E 99%",
    "TTFB 99%",
    "Peak CPU %",
    "Server Waiting",
    "Server Running",
    "Server Latency Mean",
    "Passed",
    "Limited By",
    "Client Limit",
    "Users Needed",
    "Why",
    *probe_energy.CSV_COLUMNS,
    *(title for title, _ in WINDOW_COLUMNS),
)
CONSOLE_COLUMNS = (
    "Probe",
    "Target Requests/s",
    "Sent Ratio",
    "Requests/s",
    "Attainment",
    "E2E 50%",
    "E2E 99%",
    "Peak CPU %",
    "Passed",
    "Limited By",
)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def row(probe: Probe) -> dict[str, Any]:
    return {
        "Probe": probe.number,
        "Target Requests/s": round(probe.rate, 2),
        "Seconds": round(probe.seconds, 1),
        "Scheduled": probe.scheduled,
        "Sent": probe.sent,
        "Sent Ratio": _round(probe.sent_ratio, 3),
        "Request Count": probe.requests,
        "Failure Count": probe.failures,
        "Good Count": probe.good,
        "Requests/s": round(probe.per_second(probe.requests), 2),
        "Sequences/s": round(probe.per_second(probe.sequences), 2),
        "Input Tokens/s": round(probe.per_second(probe.input_tokens), 1),
        "Attainment": _round(probe.attainment, 4),
        "E2E 50%": shown_ms(probe.e2e_p50_ms),
        "E2E 99%": shown_ms(probe.e2e_p99_ms),
        "TTFB 99%": shown_ms(probe.ttfb_p99_ms),
        "Peak CPU %": _round(probe.cpu_peak, 0),
        "Server Waiting": _round(probe.server_waiting, 1),
        "Server Running": _round(probe.server_running, 1),
        "Server Latency Mean": shown_ms(probe.server_latency_ms),
        "Passed": "yes" if probe.passed else "no",
        "Limited By": probe.limited_by,
        "Client Limit": probe.client_limit,
        "Users Needed": probe.users_needed,
        "Why": "; ".join(probe.why),
        **probe.energy.csv_cells(),
        **window_cells(probe.consistency),
    }


ANSWER_COLUMNS = ("Identical %", "Cos Min")
"""The console's columns of the answers compared in each probe, shown when any probe compared one."""


def answer_cells(probe: Probe) -> list[str]:
    total = (probe.consistency or {}).get(TOTAL, {})
    identical, cosine = total.get("identical_ratio"), total.get("cosine_min")
    return ["" if identical is None else f"{100 * identical:.1f}", "" if cosine is None else f"{cosine:.6f}"]


def client_lever(bound: Probe) -> str:
    """What the next try changes where the client was the limit: its users, sized by Little's law as the
    open loop's fell-behind warning sizes them; else its processes."""
    if bound.client_limit != USERS:
        return f"Run it again with {bound.workers_needed()} --processes or workers."
    option = bound.users_option
    more = f"more --processes or workers would share the same {option} and change nothing."
    if bound.users_needed is None or bound.held_ms is None:
        return f"Raise {option}; {more}"
    advice = users_advice(bound.rate, bound.held_ms, bound.users_needed, option)
    return f"{advice[0].upper()}{advice[1:]}; {more}"


QUEUE_EMPTY = 0.5
"""A mean of fewer waiting requests than this is an empty queue: the server ran what it held."""


def _both(pair: tuple[float | None, float | None]) -> tuple[float, float] | None:
    """The pair, where neither is None."""
    first, second = pair
    return None if first is None or second is None else (first, second)


def _server_evidence(best: Probe, bound: Probe) -> str:
    """The server's own figures at the answer and at the bound (--server-metrics): its queue; where nothing
    waited, the requests it ran at once; where it reports neither (vLLM's pooling runner left both at 0
    against its CPU build), its own mean latency. Empty without them."""
    waiting, running = (best.server_waiting, bound.server_waiting), (best.server_running, bound.server_running)
    latency = (best.server_latency_ms, bound.server_latency_ms)
    at = f" at {best.rate:,.1f}/s and {{b}} at {bound.rate:,.1f}/s"
    if (held := _both(waiting)) is not None and max(held) >= QUEUE_EMPTY:
        return f"; its own queue held {waiting[0]:,.1f} requests" + at.format(b=f"{waiting[1]:,.1f}")
    if (ran := _both(running)) is not None and max(ran) >= QUEUE_EMPTY:
        return f"; nothing waited in its queue; it ran {running[0]:,.1f} requests at once" + at.format(
            b=f"{running[1]:,.1f}"
        )
    if None not in latency:
        return f"; its own mean latency was {latency[0]:,.0f} ms" + at.format(b=f"{latency[1]:,.0f} ms")
    if None not in waiting:
        return f"; its own queue held {waiting[0]:,.1f} requests" + at.format(b=f"{waiting[1]:,.1f}")
    return ""


@dataclass
class Outcome:
    """The search so far: its probes, in order, and how it ended."""

    slo: str
    target_attainment: float
    precision: float
    probes: list[Probe] = field(default_factory=list)
    ended: str | None = None
    """Why the search ended: 'converged', 'client', 'no rate passed', 'every rate passed', 'cut short' (by -t,
    or the run quit) or 'stopped' (the web UI's Stop)."""
    label: str = ""
    """Whose capacity the answer is, after its "Capacity": empty for the run's host, " of A (URL)" with --ab-host."""

    def best(self) -> Probe | None:
        """The passing probe of the highest rate."""
        return max((p for p in self.probes if p.passed), key=lambda p: p.rate, default=None)

    def bound(self) -> Probe | None:
        """The failing probe of the lowest rate: the one whose verdict is the answer's."""
        return min((p for p in self.probes if not p.passed), key=lambda p: p.rate, default=None)

    @property
    def limited_by(self) -> str | None:
        bound = self.bound()
        return None if bound is None else bound.limited_by

    @property
    def claimed(self) -> bool:
        """A capacity of the server is claimed: some rate passed and the client was not the limit above it."""
        return self.best() is not None and self.limited_by != CLIENT

    def failed(self) -> bool:
        """The run exits with the checks' code: no capacity of the server could be claimed."""
        return bool(self.probes) and not self.claimed

    def answer(self) -> str:
        best, bound = self.best(), self.bound()
        if bound is not None and bound.limited_by == CLIENT:
            return (
                f"Capacity{self.label}: not claimed for the server: the client was the limit at "
                f"{bound.rate:,.1f} requests/s"
                f"{': its users, not its CPU' if bound.client_limit == USERS else ''} "
                f"({'; '.join(bound.why) or 'it fell behind its schedule'}). {client_lever(bound)}"
                + (f" The highest rate that passed was {best.rate:,.1f} requests/s." if best is not None else "")
            )
        if best is None:
            return f"Capacity{self.label}: no rate met {self.target_attainment * 100:.1f} % within {self.slo}" + (
                f" (the lowest probe, {bound.rate:,.3g} requests/s: {'; '.join(bound.why)})." if bound else "."
            )
        text = (
            f"Capacity{self.label}: {best.rate:,.1f} requests/s ({best.per_second(best.sequences):,.0f} inputs/s, "
            f"{best.per_second(best.input_tokens):,.0f} input tokens/s) with "
            f"{100 * (best.attainment or 0):.1f} % of requests within {self.slo}; "
        )
        if bound is None:
            text += "every probe passed: the limit was not reached"
        else:
            text += (
                f"limited by the server: at {bound.rate:,.1f} requests/s {'; '.join(bound.why)} "
                # behind its schedule, the client is cleared only because the server's own answers were slow
                + (
                    "while the client kept its schedule"
                    if not bound.behind
                    else f"with its own time to headers at {shown_ms(bound.ttfb_p99_ms)} ms (p99): it held every user"
                )
            )
            text += _server_evidence(best, bound)
        text += f"; the client sent {100 * (best.sent_ratio or 0):.1f} % of its schedule"
        if self.ended == "cut short":
            text += f" (the search was cut short by the run time: the bracket is wider than {self.precision:.0%})"
        elif self.ended == "stopped":
            text += f" (the search was stopped before it ended: the bracket is wider than {self.precision:.0%})"
        return text + "."

    def console_lines(self, width: int | None = None) -> list[str]:
        """The probe table fitted to `width` (--console-width; 0 or None: whole), then the answer: one line,
        however long (it is read whole, as the log and the JSON result give it)."""
        if not self.probes:
            return []
        columns = CONSOLE_COLUMNS + probe_energy.console_columns(p.energy for p in self.probes)
        compared = any(p.consistency for p in self.probes)
        cells = [list(columns) + (list(ANSWER_COLUMNS) if compared else [])]
        for probe in self.probes:
            values = row(probe)
            cells.append(
                [
                    ""
                    if values[c] is None
                    else f"{values[c]:,}"
                    if isinstance(values[c], int | float)
                    else str(values[c])
                    for c in columns
                ]
                + (answer_cells(probe) if compared else [])
            )
        title = (
            f"Capacity search{self.label} (--find-capacity: {100 * self.target_attainment:g} % within {self.slo}; "
            "E2E in ms; Sent Ratio: of the probe's schedule)"
        )
        return [*texttable.wrapped(title, width), *texttable.fitted_lines(cells, width), "", self.answer()]

    def write_csv(self, path: str) -> None:
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            writer.writerows(row(p) for p in self.probes)

    def as_dict(self) -> dict[str, Any]:
        best, bound = self.best(), self.bound()
        client = bound if bound is not None and bound.limited_by == CLIENT else None
        return {
            "requests_per_s": best.rate if best is not None and self.claimed else None,
            "measured_requests_per_s": best.per_second(best.requests) if best is not None else None,
            "input_tokens_per_s": best.per_second(best.input_tokens) if best is not None else None,
            "sequences_per_s": best.per_second(best.sequences) if best is not None else None,
            "attainment": best.attainment if best is not None else None,
            "sent_ratio": best.sent_ratio if best is not None else None,
            "limited_by": self.limited_by,
            "client_limit": client.client_limit if client is not None else None,
            "users_needed": client.users_needed if client is not None else None,
            "slo": self.slo,
            "target_attainment": self.target_attainment,
            "precision": self.precision,
            "ended": self.ended,
            "answer": self.answer(),
            "probes": [
                {
                    "rate": p.rate,
                    "seconds": p.seconds,
                    "sent_ratio": p.sent_ratio,
                    "requests": p.requests,
                    "failures": p.failures,
                    "requests_per_s": p.per_second(p.requests),
                    "attainment": p.attainment,
                    "e2e_p50_ms": p.e2e_p50_ms,
                    "e2e_p99_ms": p.e2e_p99_ms,
                    "cpu_peak_percent": p.cpu_peak,
                    "server_waiting": p.server_waiting,
                    "server_running": p.server_running,
                    "server_latency_ms": p.server_latency_ms,
                    "passed": p.passed,
                    "limited_by": p.limited_by,
                    "client_limit": p.client_limit,
                    "users_needed": p.users_needed,
                    "held_ms": p.held_ms,
                    "why": list(p.why),
                    **p.energy.json_keys(),
                    "consistency": p.consistency,
                }
                for p in self.probes
            ],
        }


def probe_sheet(outcome: Outcome, e2e_bound_ms: float | None) -> str:
    """PREFIX_capacity.svg: attainment and E2E p99 against each probe's rate, the target and the SLO's bound
    drawn as lines; each point labelled with its probe's number. Empty without probes."""
    title = f"Capacity search: {100 * outcome.target_attainment:g} % within {outcome.slo}"
    return probes_sheet(title, [("", outcome.probes)], outcome.target_attainment, e2e_bound_ms)


def probes_sheet(title: str, groups: list[tuple[str, list[Probe]]], target: float, e2e_bound_ms: float | None) -> str:
    """The probes' chart: a line of each group's probes (a host's, named by `groups`' labels; one unnamed group
    for a run of one host), the target and the SLO's bound; each point labelled with its group and number."""
    probed = [(name, sorted(probes, key=lambda p: p.rate)) for name, probes in groups]
    every = sorted(p.rate for _, probes in probed for p in probes)
    if not every:
        return ""
    rates = (every[0], every[-1])
    attainment, latency = [], []
    for name, probes in probed:
        notes = [f"{name or '#'}{p.number}" for p in probes]
        named = f"{name} " if name else ""
        attainment.append(Series(f"{named}attainment", [(p.rate, 100 * (p.attainment or 0.0)) for p in probes], notes))
        p99 = [(p.rate, p.e2e_p99_ms if p.e2e_p99_ms is not None else math.nan) for p in probes]
        latency.append(Series(f"{named}E2E p99", p99, notes))
    attainment.append(Series(f"target {100 * target:g} %", [(r, 100 * target) for r in rates]))
    if e2e_bound_ms is not None:
        latency.append(Series(f"SLO e2e_ms={e2e_bound_ms:g}", [(r, e2e_bound_ms) for r in rates]))
    x_label = "target requests/s; points: " + ("host and probe #" if len(groups) > 1 else "probe #")
    charts = [
        line_chart(
            "Capacity: attainment", attainment, y_unit="%", x_label=x_label, x_format=number_label, markers=True
        ),
        line_chart("Capacity: E2E p99", latency, y_unit="ms", x_label=x_label, x_format=number_label, markers=True),
    ]
    return sheet(title, charts)
