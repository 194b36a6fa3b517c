"""The gates on the answers (docs/consistency.md, Gates and load windows): --check-min-cosine and
--check-max-top1-changed fail the run with the checks' exit code (metrics/checks.py) and a line that names
what drifted, for which request name, at what load; and the start check that refuses a gate, or an answers'
term of --slo, that nothing could judge.

What a gate judges: every load window closed so far (a sweep step, a capacity probe, a repeat: state.py),
the one still open, and the run's own tallies (since the stats' last reset); a name fails where any of them
has a figure past the bound, and its line names the first such window's load ("sweep step 3 (users 8)"),
or the run when no window has it (a run without windows; an answer of a probe's settle period).

Nothing compared at all fails a gate too, with a line that says so: a gate asked to vouch for the answers
that saw none cannot (the references were not taken, or no request carrying one was answered). A name of
which nothing was compared beside names that were is not judged (a master does not know every worker's
names before they report)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from locust.env import Environment
from locust.event import Events

from poolbench_locust.consistency.state import Consistency, consistency_of
from poolbench_locust.consistency.tally import Tally
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.engine.user import endpoint_users
from poolbench_locust.lifecycle import StartCheck
from poolbench_locust.locust_options import LocustOptions
from poolbench_locust.metrics.checks import check_events
from poolbench_locust.options import OptionError, Settings, settings_of

VECTORS, SCORES = "vectors", "scores"
JUDGED_AS: dict[str, frozenset[str]] = {
    VECTORS: frozenset({"vectors", "sparse", "rows"}),  # a cosine is taken of each (consistency/measures.py)
    SCORES: frozenset({"scores"}),  # a best document that may change
}
"""What a term needs (VECTORS, SCORES) -> the kinds of values (Endpoint.values_kind) it judges."""


def cosine_below(bound: float) -> Callable[[dict[str, Any]], float | None]:
    """The cosine of a name's figures that fails `bound`, or None."""
    return lambda found: c if (c := found.get("cosine_min")) is not None and c < bound else None


def top1_above(bound: float) -> Callable[[dict[str, Any]], float | None]:
    return lambda found: r if (r := found.get("top1_changed_ratio")) is not None and r > bound else None


def _judged(state: Consistency) -> Iterator[tuple[str | None, dict[str, Tally]]]:
    """What a gate judges, in the order the load came: each closed window (its label, its tallies), the open
    one, then the run's tallies (label None)."""
    for window in state.windows:
        yield window.label, window.tallies
    if state.window_label is not None:
        yield state.window_label, state.window
    yield None, state.tallies


def drifted(state: Consistency, failing: Callable[[dict[str, Any]], float | None]) -> dict[str, tuple[str, float, int]]:
    """Each name with a figure that fails: (where first: "at <a window's label>" or "over the run", the figure
    there, the answers compared there)."""
    found: dict[str, tuple[str, float, int]] = {}
    for label, tallies in _judged(state):
        for name in sorted(tallies):
            if name in found:
                continue
            figures = tallies[name].figures()
            if (value := failing(figures)) is not None:
                found[name] = (f"at {label}" if label else "over the run", value, figures["compared"])
    return found


def _compared(state: Consistency) -> int:
    return sum(tally.compared for _, tallies in _judged(state) for tally in tallies.values())


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)


def gate_lines(state: Consistency, settings: Settings) -> list[str]:
    """The gates given that failed, a line each (a name, its figure, the load where it first failed)."""
    gates = []
    if (floor := settings.check_min_cosine) is not None:
        gates.append((f"--check-min-cosine {_number(floor)}", cosine_below(floor), "cosine {:.6f} < " + str(floor)))
    if (ceiling := settings.check_max_top1_changed) is not None:
        text = "top-1 changed in {:.1f} % of answers > " + f"{100 * ceiling:g} %"
        gates.append((f"--check-max-top1-changed {_number(ceiling)}", top1_above(ceiling), text))
    if not gates:
        return []
    if not _compared(state):
        return [
            f"{gate}: no answer was compared with its reference: nothing to vouch for (docs/consistency.md)"
            for gate, _, _ in gates
        ]
    lines = []
    for gate, failing, said in gates:
        for name, (where, value, compared) in drifted(state, failing).items():
            shown = said.format(100 * value if "%" in said else value)
            lines.append(f"{gate}: the answers of {name} drifted {where}: {shown} ({compared:,} compared)")
    return lines


def _evaluate(environment: Environment, failed: list[str], **_: Any) -> None:
    try:
        settings = settings_of(environment)
    except OptionError:
        return  # the start checks stopped the run with the option's line
    failed.extend(gate_lines(consistency_of(environment), settings))


def _terms(settings: Settings) -> list[tuple[str, str]]:
    """The options given that judge the answers: (the option as said, what it needs: VECTORS or SCORES)."""
    slo = settings.slo
    terms = [
        (flag, kind)
        for flag, kind, bound in (
            ("--check-min-cosine", VECTORS, settings.check_min_cosine),
            ("--check-max-top1-changed", SCORES, settings.check_max_top1_changed),
            ("--slo cosine=", VECTORS, slo.cosine if slo else None),
            ("--slo top1_changed=", SCORES, slo.top1_changed if slo else None),
        )
        if bound is not None
    ]
    return terms


def _said(flag: str) -> tuple[str, str]:
    """(the option, what its message calls the term): ("--slo", "cosine="), ("--check-min-cosine", "the gate")."""
    option, _, term = flag.partition(" ")
    return option, term or "the gate"


def start_error(environment: Environment) -> str | None:
    """Why a gate or an answers' term of --slo cannot judge this run, or None: the check is off, the term is
    --slo's without --find-capacity, or a User class's answers hold nothing it judges (named)."""
    options = environment.parsed_options
    try:
        settings = settings_of(environment)
    except OptionError:
        return None  # the start checks stop the run with the option's own line
    if not (terms := _terms(settings)):
        return None
    option, subject = _said(terms[0][0])
    if settings.no_consistency or not settings.consistency_inputs:
        off = "--no-consistency" if settings.no_consistency else "--consistency-inputs 0"
        return str(OptionError(option, f"{subject} judges answers compared with their reference: {off} turns that off"))
    on_slo = [_said(flag)[1] for flag, _ in terms if flag.startswith("--slo")]
    if on_slo and not settings.find_capacity:
        return str(
            OptionError(
                "--slo",
                f"{on_slo[0]} judges each probe of --find-capacity (a figure of many answers, not of one request); "
                "for the whole run give --check-min-cosine or --check-max-top1-changed",
            )
        )
    host = LocustOptions(options).host or environment.host
    for user_class in endpoint_users(environment):
        try:
            plan = plan_for(user_class, options, host, environment)
        except OptionError:
            return None  # the start checks stop the run with the option's own line
        why = plan.form.not_compared
        kind = plan.endpoint.values_kind(plan.settings, plan.token_rows is not None) if why is None else None
        for flag, needs in terms:
            if kind not in JUDGED_AS[needs]:
                said = f"its answers hold no {needs} to compare" + (f" ({why})" if why else "")
                option, subject = _said(flag)
                return str(OptionError(option, f"{subject} cannot judge {user_class.__name__} ({plan.route}): {said}"))
    return None


START_CHECK = StartCheck(start_error)


def setup(events: Events) -> None:
    START_CHECK.setup(events)
    check_events.checks.add_listener(_evaluate)
