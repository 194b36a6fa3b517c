"""--ab-host with answer consistency: the two hosts' answers compared with each other (docs/consistency.md,
"Between two hosts"). Parity between two servers, two versions of one, or a quantized model and its original.

At each start, after A's reference answers (references.py), each User class's twin aimed at B (engine/ab.py)
takes B's reference answers for the same reference inputs, alone, one at a time, on a client whose events
reach no stats. Then:

- B's reference answers are compared with A's, input by input, by the measure of their kind (comparing.py:
  cosine for vectors, Hamming for binary ones, top-1 and Kendall's tau for rankings, the label for a
  classification...), tallied by request name: the "between hosts" figures.
- B's answers under load are compared with B's own references, as A's are with A's: the consistency table's
  rows marked [B] beside those marked [A] (each host's answers against its own reference).

A worker takes its own and ships its tally once (and the reference requests B counted, for the server
metrics' reconciliation of B); the master merges them (Tally.from_wire trusts nothing). With
--consistency-reference the references come from the file, not from either host: nothing is compared
between hosts."""

from __future__ import annotations

import dataclasses
import html
import logging
from typing import Any

from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner

from poolbench_locust import htmltables, texttable
from poolbench_locust.consistency.comparing import compare_values
from poolbench_locust.consistency.references import _references, taking_of
from poolbench_locust.consistency.state import (
    FIGURES,
    TOTAL,
    Sent,
    cell,
    consistency_of,
    figures_of,
    merge_shipped,
    shipped_sent,
)
from poolbench_locust.consistency.tally import Tally
from poolbench_locust.engine.ab import side_of, twin_class, unmarked
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.engine.user import endpoint_users
from poolbench_locust.options import OptionError, settings_of
from poolbench_locust.store import Slot

logger = logging.getLogger("poolbench_locust")

REPORT_KEY = "poolbench_between_hosts"
"""A worker's tallies of B's references against A's, in its report to the master (once a start)."""
SENT_KEY = "poolbench_between_hosts_sent"
"""A worker's reference requests to B in its report: [requests, sequences, input tokens]."""
TITLE = "Answers between hosts (B's reference answers against A's, the same inputs answered alone)"
CSV_PREFIX = "B against A: "
"""The name of a between-hosts row in PREFIX_consistency.csv, before the request name."""

ANSWERS_SCHEMA: dict[str, Any] = {
    "description": "--ab-host with answer consistency (docs/consistency.md): B's reference answers against A's "
    "for the same inputs, each request name's figures and the total's (between_hosts; null when none was "
    "compared), each host's answers under load against its own references (per_host), and a sentence; null "
    "when answers were not compared",
    "type": ["object", "null"],
    "required": ["between_hosts", "per_host", "summary"],
    "properties": {
        "between_hosts": {"type": ["object", "null"]},
        "per_host": {"type": "object"},
        "summary": {"type": "string"},
    },
}


@dataclasses.dataclass
class Between:
    """One process's comparison of B's references with A's, and B's reference requests."""

    tallies: dict[str, Tally] = dataclasses.field(default_factory=dict)
    """By request name (A's, unmarked; "A's / B's" where the hosts' paths differ)."""
    unshipped: dict[str, Tally] = dataclasses.field(default_factory=dict)
    skipped: int = 0
    """References of one input that could not be compared (another kind, a value the measures refuse)."""
    sent: Sent = dataclasses.field(default_factory=Sent)
    """Reference requests B answered well after the server metrics' baseline (a worker's, the master's merged)."""
    unshipped_sent: Sent = dataclasses.field(default_factory=Sent)

    def restart(self) -> None:
        self.tallies.clear()
        self.unshipped.clear()
        self.skipped = 0
        self.reset()

    def reset(self) -> None:
        """The stats were reset: the reference requests before are before the server metrics' new base too."""
        self.sent = Sent()
        self.unshipped_sent = Sent()

    def figures(self) -> dict[str, dict[str, Any]] | None:
        return figures_of(self.tallies)


_BETWEEN = Slot("consistency_between_hosts", Between)


def between_of(environment: Environment) -> Between:
    return _BETWEEN.of(environment)


def _name(a: str, b: str) -> str:
    a, b = unmarked(a), unmarked(b)
    return a if a == b else f"{a} / {b}"


def take(environment: Environment, worker: bool) -> None:
    """B's reference answers, after A's were taken: kept for B's answers under load, and compared with A's."""
    between = between_of(environment)
    between.restart()
    try:
        settings = settings_of(environment)
    except OptionError:
        return  # the start checks stop such a run with the option's own line
    b_host = settings.ab_host
    taking = taking_of(environment)
    if b_host is None or taking.path or settings.no_consistency or not settings.consistency_inputs:
        return
    state = consistency_of(environment)
    sent = Sent()
    for user_class in endpoint_users(environment):
        try:
            a_plan = plan_for(user_class, environment.parsed_options, environment.host, environment)
        except OptionError:
            continue
        if (a := taking.taken.get(a_plan.label)) is None:
            continue  # A's were not taken: not compared (references.py said why)
        twin = twin_class(user_class, b_host)
        try:
            b_plan = plan_for(twin, environment.parsed_options, b_host, environment)
            if b_plan.label in state.references or list(b_plan.reference_inputs) != a.inputs:
                continue  # another class's name, or not the inputs A was asked (a plan B's host changed)
            taken = _references(twin, environment, sent)
        except OptionError:
            continue
        if taken is None:
            continue
        b_name, b_kind, b_found = taken
        state.references[b_name] = b_found
        state.kinds[b_name] = b_kind
        if b_found:
            logger.info("consistency: %s: %d reference answers of --ab-host taken", user_class.__name__, len(b_found))
        _compare(between, _name(a_plan.label, b_name), a.kind, a.values, b_kind, b_found, ship=worker)
    if worker:  # after the master's test_start, where the server metrics' scrape begins: reconciled
        between.sent.add(sent)
        between.unshipped_sent.add(sent)


def _compare(
    between: Between,
    name: str,
    a_kind: str,
    a_values: dict[int, Any],
    b_kind: str,
    b_values: dict[int, Any],
    ship: bool,
) -> None:
    """Each input's B reference against its A reference, where both hosts answered it."""
    for ref_id in sorted(a_values.keys() & b_values.keys()):
        try:
            if a_kind != b_kind:
                raise ValueError(f"B's values are {b_kind}, A's {a_kind}")
            comparison = compare_values(a_kind, a_values[ref_id], b_values[ref_id])
        except ValueError as e:
            between.skipped += 1
            if between.skipped == 1:
                logger.warning("consistency: a reference answer of %s could not be compared between hosts: %s", name, e)
            continue
        between.tallies.setdefault(name, Tally()).add(comparison)
        if ship:
            between.unshipped.setdefault(name, Tally()).add(comparison)


def per_host(environment: Environment) -> dict[str, dict[str, Any]]:
    """Each host's answers under load against its own references: the total of its names' tallies."""
    found: dict[str, Tally] = {}
    for name, tally in consistency_of(environment).tallies.items():
        if (side := side_of(name)) is not None:
            found.setdefault(side, Tally()).merge(tally)
    return {side: found[side].figures() for side in sorted(found)}


def summary(figures: dict[str, dict[str, Any]] | None) -> str:
    """One sentence: identical, or by how much B's reference answers moved from A's."""
    total = (figures or {}).get(TOTAL, {})
    compared = total.get("compared", 0)
    if not compared:
        return "B's reference answers: none compared with A's"
    same = round(total["identical_ratio"] * compared)
    if same == compared:
        return f"B's reference answers are identical to A's ({compared:,} inputs compared)"
    worst = []
    if (cosine := total.get("cosine_min")) is not None:
        worst.append(f"cosine min {cosine:.6f}")
    for key, what in (("top1_changed_ratio", "best document changed"), ("labels_changed_ratio", "label changed")):
        if (share := total.get(key)) is not None:
            worst.append(f"{what} in {share:.0%}")
    if (tau := total.get("kendall_tau_min")) is not None:
        worst.append(f"Kendall's tau min {tau:.3f}")
    if (bits := total.get("hamming_max")) is not None:
        worst.append(f"{bits:,} bits at most")
    if (diff := total.get("abs_diff_max")) is not None:
        worst.append(f"largest difference {diff:.6g}")
    return f"B's reference answers differ from A's: {compared - same:,} of {compared:,} inputs not identical" + (
        f" ({', '.join(worst)})" if worst else ""
    )


def answers(environment: Environment) -> dict[str, Any] | None:
    """The JSON result's `ab.answers`, or None when no answer was compared (consistency off, no reference)."""
    figures = between_of(environment).figures()
    hosts = per_host(environment)
    if figures is None and not hosts:
        return None
    return {"between_hosts": figures, "per_host": hosts, "summary": summary(figures)}


def rows(environment: Environment) -> list[dict[str, Any]]:
    """The between-hosts rows of PREFIX_consistency.csv and the HTML report: the consistency table's columns."""
    figures = between_of(environment).figures() or {}
    return [{"Name": CSV_PREFIX + name, **{f: found.get(f) for f in FIGURES}} for name, found in figures.items()]


def console_lines(environment: Environment, width: int | None = None) -> list[str]:
    """The between-hosts table for the console, fitted to `width` (--console-width; 0 or None: whole)."""
    figures = between_of(environment).figures()
    if figures is None:
        return []
    shown = [f for f in FIGURES if any(found.get(f) is not None for found in figures.values())]
    cells = [["Name", *shown], *([name, *(cell(found.get(f)) for f in shown)] for name, found in figures.items())]
    return [
        *texttable.wrapped(TITLE, width),
        *texttable.fitted_lines(cells, width),
        *texttable.wrapped(summary(figures), width),
    ]


def report_html(environment: Environment) -> str:
    """The between-hosts part of the HTML report's Answer consistency section ("" when none was compared)."""
    figures = between_of(environment).figures()
    if figures is None:
        return ""
    shown = [f for f in FIGURES if any(found.get(f) is not None for found in figures.values())]
    cells = [{"Name": name, **{f: found.get(f) for f in shown}} for name, found in figures.items()]
    table = htmltables.table(["Name", *shown], cells)
    return f"<h3>{html.escape(TITLE)}</h3>{table}<p><b>{html.escape(summary(figures))}</b></p>"


def _merge(between: Between, client_id: str, shipped: Any) -> None:
    def into(name: str, tally: Tally) -> None:
        between.tallies.setdefault(name, Tally()).merge(tally)

    merge_shipped(shipped, into, client_id, "between-hosts tallies")


def on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    between = between_of(environment)
    environment.events.reset_stats.add_listener(lambda **_: between.reset())
    if isinstance(runner, WorkerRunner):

        @environment.events.report_to_master.add_listener
        def report(client_id: str, data: dict[str, Any], **_: Any) -> None:
            if between.unshipped:
                data[REPORT_KEY] = {name: tally.to_wire() for name, tally in between.unshipped.items()}
                between.unshipped.clear()
            if (sent := between.unshipped_sent).requests:
                data[SENT_KEY] = [sent.requests, sent.sequences, sent.input_tokens]
                between.unshipped_sent = Sent()

    elif isinstance(runner, MasterRunner):
        environment.events.test_start.add_listener(lambda **_: between.restart())

        @environment.events.worker_report.add_listener
        def merge(client_id: str, data: dict[str, Any], **_: Any) -> None:
            if REPORT_KEY in data:
                _merge(between, client_id, data[REPORT_KEY])
            if SENT_KEY in data and (sent := shipped_sent(data[SENT_KEY], client_id, "reference requests to B")):
                between.sent.add(sent)


def setup(events: Events) -> None:
    events.init.add_listener(on_init)
