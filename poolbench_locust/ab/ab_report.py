"""Wiring of --ab-host into Locust: the listener that keeps each request of an A/B run (added only to such a
run: a run without --ab-host pays nothing per request), and every place the comparison is shown: the console
summary, PREFIX_ab.csv, the HTML report's section, the web UI's A/B tab and the JSON result's `ab`."""

from __future__ import annotations

import csv
import html
import io
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner

from poolbench_locust import htmltables, texttable
from poolbench_locust.ab.compare import LEVEL, Comparison, compare
from poolbench_locust.ab.samples import Samples
from poolbench_locust.consistency.between_hosts import ANSWERS_SCHEMA, answers
from poolbench_locust.cost.pricing import of_host, usd
from poolbench_locust.engine.ab import side_of
from poolbench_locust.json_sections import INPUTS_JSON, REPEATS_JSON, JsonSection, ResultEvents
from poolbench_locust.locust_options import locust_options
from poolbench_locust.locust_pages import (
    CAPACITY_SECTION,
    CAPACITY_TAB,
    PageEvents,
    Section,
    Tab,
    add_route,
    csv_download,
)
from poolbench_locust.options import OptionError, Settings, settings_of
from poolbench_locust.store import Slot
from poolbench_locust.urls import shown_url

console = logging.getLogger("locust.stats_logger")
logger = logging.getLogger("poolbench_locust")

AB_SECTION = CAPACITY_SECTION + 5  # after the capacity search
AB_TAB = CAPACITY_TAB + 5
AB_JSON = (INPUTS_JSON + REPEATS_JSON) // 2 + 2  # after cost, before the repeats
TAB_KEY = "ab"
HEADER = ("Figure", "Unit", "A", "B", "B - A", "Difference Unit", "Low", "High", "Beyond Noise", "Verdict")
REFRESH_S = 5.0
"""The web UI's tab recomputes the comparison at most this often (a bootstrap of up to 10,000 times a host)."""


@dataclass
class AbState:
    samples: Samples = field(default_factory=Samples)
    listening: bool = False
    a_host: str = ""
    b_host: str = ""
    on_request: Callable[..., None] | None = None
    hourly: tuple[float, float] | None = None
    """--gpu-hour-cost: A's and B's fleets' USD an hour (the comparison's price rows)."""
    _cached: tuple[float, Comparison] | None = None

    def comparison(self, fresh: bool = True) -> Comparison:
        """The comparison of the blocks so far; `fresh=False` takes one made within REFRESH_S."""
        now = time.monotonic()
        if not fresh and self._cached is not None and now - self._cached[0] < REFRESH_S:
            return self._cached[1]
        found = compare(self.samples.blocks(), self.samples.paired, self.samples.span(), hourly=self.hourly)
        self._cached = (now, found)
        return found


_STATE = Slot("ab.state", AbState)


def state_of(environment: Environment) -> AbState:
    return _STATE.of(environment)


def _settings(environment: Environment) -> Settings | None:
    try:
        return settings_of(environment)
    except OptionError:
        return None


def _fmt(value: float | None, digits: int = 2) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def _value(value: float | None, unit: str) -> float | None:
    """A figure as the table has it: to 3 places, a price (cents and less) to 4 significant figures."""
    if value is None:
        return None
    return float(f"{value:.4g}") if unit == "USD" else round(value, 3)


def rows(comparison: Comparison) -> list[dict[str, Any]]:
    """The comparison's table, as the CSV file, the HTML report and the web UI's tab have it."""
    out = []
    for r in comparison.rows:
        d = r.as_dict()
        out.append(
            {
                "Figure": d["figure"],
                "Unit": d["unit"],
                "A": _value(d["a"], d["unit"]),
                "B": _value(d["b"], d["unit"]),
                "B - A": None if d["difference"] is None else round(d["difference"], 2),
                "Difference Unit": d["difference_unit"],
                "Low": None if d["low"] is None else round(d["low"], 2),
                "High": None if d["high"] is None else round(d["high"], 2),
                "Beyond Noise": d["beyond_noise"],
                "Verdict": d["verdict"],
            }
        )
    return out


def _title(state: AbState, comparison: Comparison) -> str:
    how = "each input to both at once (--ab-paired)" if comparison.paired else "A and B in turn, per user"
    over = f"{comparison.blocks:,} {'pairs' if comparison.paired else 'seconds'}"
    return (
        f"A/B: B {state.b_host} against A {state.a_host}, {how}; B - A in % of A (the failure ratio in points), "
        f"with intervals that hold together with {LEVEL:.0%} (a bootstrap over {over}; "
        "times of successful requests, ms)"
    )


def console_lines(state: AbState, comparison: Comparison, width: int | None = None) -> list[str]:
    """The comparison for the console: its title and verdicts wrapped, its table fitted, to `width`
    (--console-width; 0 or None: whole lines)."""
    cells = [["Figure", "A", "B", "B - A", f"{LEVEL:.0%} interval", "Verdict"]]
    for r in comparison.rows:
        unit = "%" if r.figure.relative else " pts"
        interval = "" if r.low is None or r.high is None else f"[{r.low:+,.1f}, {r.high:+,.1f}]{unit}"
        diff = "" if r.difference is None else f"{r.difference:+,.1f}{unit}"
        verdict = r.verdict().split(", ", 1)[1] if r.beyond_noise is not None else r.verdict().split(": ", 2)[-1]
        a, b = (usd(r.a), usd(r.b)) if r.figure.unit == "USD" else (_fmt(r.a), _fmt(r.b))
        cells.append([r.figure.name, a, b, diff, interval, verdict])
    summary = comparison.summary()
    return [
        *texttable.wrapped(_title(state, comparison), width),
        *texttable.fitted_lines(cells, width),
        *(line for part in summary.split("; ") for line in texttable.wrapped(part, width)),
    ]


def csv_text(table: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=HEADER, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: ("" if v is None else v) for k, v in row.items()} for row in table)
    return out.getvalue()


AB_SCHEMA = {
    "description": "--ab-host: B's figures against A's, each difference with its interval (all of them together "
    "95 %) and its verdict, of every process's requests (a distributed run's workers ship theirs to the master);"
    " null without --ab-host and in a capacity search (each host's capacity is in `capacity`'s `ab`)",
    "type": ["object", "null"],
    "required": ["a_host", "b_host", "mode", "block", "blocks", "level", "z", "figures", "summary"],
    "properties": {
        "mode": {"enum": ["alternate", "paired"]},
        "block": {"enum": ["second", "pair"]},
        "blocks": {"type": "integer", "minimum": 0},
        "level": {"type": "number"},
        "z": {"type": "number"},
        "summary": {"type": "string"},
        "requests": {
            "description": "Each host's requests in the blocks compared (every one, by second; the pairs kept,"
            " with --ab-paired), of every process",
            "type": "object",
            "properties": {"A": {"type": "integer", "minimum": 0}, "B": {"type": "integer", "minimum": 0}},
        },
        "answers": ANSWERS_SCHEMA,
        "figures": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["figure", "unit", "a", "b", "difference", "low", "high", "beyond_noise", "verdict"],
                "properties": {"beyond_noise": {"type": ["boolean", "null"]}, "verdict": {"type": "string"}},
            },
        },
    },
}


def ab_fields(environment: Environment) -> dict[str, Any]:
    state = _STATE.peek(environment)
    if state is None or not state.listening:
        return {"ab": None}
    found = state.comparison()
    blocks = state.samples.blocks()
    return {
        "ab": {
            "requests": {side: sum(b.side(side).requests for b in blocks) for side in ("A", "B")},
            "a_host": state.a_host,
            "b_host": state.b_host,
            "mode": "paired" if found.paired else "alternate",
            "block": "pair" if found.paired else "second",
            "blocks": found.blocks,
            "level": LEVEL,
            "z": found.z,
            "figures": [r.as_dict() for r in found.rows],
            "summary": found.summary(),
            "answers": answers(environment),
        }
    }


def _start(environment: Environment) -> None:
    """Each run: listen to its requests if it is an A/B run (the web form may have made it one, or not)."""
    state = state_of(environment)
    settings = _settings(environment)
    # A capacity search probes each host alone at rates of its own (capacity/lanes.py compares their capacities):
    # its seconds hold one host's requests each, nothing to compare second by second.
    wanted = settings is not None and settings.ab_host is not None and not settings.find_capacity
    request = environment.events.request
    if state.listening and not wanted and state.on_request is not None:
        request.remove_listener(state.on_request)
        state.listening = False
    state.samples = Samples(paired=bool(settings and settings.ab_paired))
    state._cached = None
    if not wanted or settings is None or settings.ab_host is None:
        return
    state.a_host, state.b_host = shown_url(environment.host or ""), shown_url(settings.ab_host)
    if (prices := settings.gpu_hour_cost) is not None:  # each host's fleet: its price times its GPUs
        a, b = (of_host(prices, side) * of_host(settings.gpus, side) for side in ("A", "B"))
        state.hourly = (a, b)
    else:
        state.hourly = None
    if not state.listening:

        def on_request(
            name: str, response_time: Any, exception: Any, context: Any, start_time: Any = 0.0, **_: Any
        ) -> None:
            if (side := side_of(name)) is not None:
                state.samples.add(  # the state's: its samples are replaced at each run's start
                    side, exception is not None, response_time, context, start_time
                )

        state.on_request = on_request
        request.add_listener(on_request)
        state.listening = True


def _on_init(environment: Environment, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
    if runner is None:
        return
    events = environment.events
    # A worker keeps its requests too, and ships them to the master (ab_workers.py), which compares them all.
    events.test_start.add_listener(lambda **_: _start(environment))
    events.reset_stats.add_listener(lambda **_: state_of(environment).samples.clear())
    if isinstance(runner, WorkerRunner):
        return
    if web_ui is not None:

        def ab_csv() -> Any:
            state = state_of(environment)
            return csv_download(csv_text(rows(state.comparison(fresh=False))) if state.listening else "", "ab")

        add_route(environment, "/ab/csv", ab_csv)
    prefix = locust_options(environment).csv_prefix

    @events.quitting.add_listener
    def files(**_: Any) -> None:
        state = state_of(environment)
        if prefix and state.listening:
            with open(f"{prefix}_ab.csv", "w", newline="") as f:
                f.write(csv_text(rows(state.comparison())))

    @events.quit.add_listener
    def summary(**_: Any) -> None:
        state = state_of(environment)
        if state.listening:
            console.info("")
            for text in console_lines(state, state.comparison(), settings_of(environment).console_width):
                console.info(text)


def report_section(environment: Environment, sections: list[Section], **_: Any) -> None:
    state = _STATE.peek(environment)
    if state is None or not state.listening:
        return
    found = state.comparison(fresh=False)
    body = f"<p>{html.escape(_title(state, found))}</p>" + htmltables.table(list(HEADER), rows(found))
    body += f"<p><b>{html.escape(found.summary())}</b></p>"
    sections.append(Section(AB_SECTION, htmltables.section("poolbench-ab", "A/B", body)))


def web_ui_tab(environment: Environment, tabs: list[Tab], **_: Any) -> None:
    def tab_rows() -> list[dict[str, Any]]:
        state = _STATE.peek(environment)
        return rows(state.comparison(fresh=False)) if state is not None and state.listening else []

    tabs.append(Tab(AB_TAB, "A/B", TAB_KEY, HEADER, tab_rows, "Figure", ("./ab/csv", "Download A/B CSV")))


def json_section(sections: list[JsonSection], **_: Any) -> None:
    sections.append(JsonSection(AB_JSON, ab_fields, {"ab": AB_SCHEMA}, ("ab",)))


def setup(events: Events, pages: PageEvents, results: ResultEvents) -> None:
    events.init.add_listener(_on_init)
    pages.report_sections.add_listener(report_section)
    pages.web_ui_tabs.add_listener(web_ui_tab)
    results.json_sections.add_listener(json_section)
