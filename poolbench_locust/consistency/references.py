"""The reference answers (docs/consistency.md): each User class's reference inputs answered alone, one at a
time, before its users start, on a client whose events reach no stats; or, with --consistency-reference, read
from a file (reference_file.py), whose vectors' dimension is checked against the first answer compared. With
--consistency-save, the references taken are written to a file."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

import gevent
from locust.env import Environment
from locust.event import EventHook
from locust.runners import WorkerRunner

from poolbench_locust.consistency import reference_file
from poolbench_locust.consistency.state import Consistency, Sent, consistency_of
from poolbench_locust.engine.comparison_budget import ALWAYS
from poolbench_locust.engine.plan import Plan, plan_for
from poolbench_locust.engine.user import EndpointUser, endpoint_users
from poolbench_locust.lifecycle import StartCheck
from poolbench_locust.locust_options import locust_options
from poolbench_locust.options import OptionError, settings_of
from poolbench_locust.store import Slot
from poolbench_locust.workload.warmup import Warmup

logger = logging.getLogger("poolbench_locust")

SAID_AFTER_S = 2.0
"""Reference answers that took this long are said: they come out of the run's -t."""

NO_VALUES = "its answers' reader gives no scores or vectors to compare yet"


def _references(
    user_class: type[EndpointUser], environment: Environment, sent: Sent
) -> tuple[str, str, dict[int, Any]] | None:
    """(request name, kind, reference id -> values) of the class's reference requests, each measured alone,
    one at a time, on a client whose events reach no stats, those answered well counted in `sent`; None
    when its plan has no reference. The twin of an --ab-host run (engine/ab.py) keeps its host, B."""
    if environment.host and user_class.ab_side is None:
        user_class.host = environment.host  # what Locust's runner does to every User class at start
    user = user_class(environment)
    plan = user.plan
    if plan is None or not plan.references:
        user.client.client.close()
        return None
    seen: list[dict[str, Any]] = []
    captured = EventHook()
    captured.add_listener(lambda **event: seen.append(event))
    user.client.request_event = captured
    user._warmup = Warmup()  # counting: its events go to the captured hook, not to warm-up's
    # Without warm-up, and every reference answer read, whatever the budget of the answers under load.
    user.plan = dataclasses.replace(plan, settings=dataclasses.replace(plan.settings, warmup=0.0), comparisons=ALWAYS)
    found: dict[int, Any] = {}
    kind = "scores" if plan.endpoint.shape == "pairs" else "vectors"  # what the answers say overrides it
    failed: list[str] = []
    try:
        for ref_id, request in enumerate(plan.references):
            seen.clear()
            user.measure(dataclasses.replace(request, refs=((-1 if plan.endpoint.shape == "pairs" else 0, ref_id),)))
            event: dict[str, Any] = seen[-1] if seen else {"exception": "no request event was fired"}
            context = event.get("context") or {}
            answered = event.get("exception") is None
            if answered:
                sent.add(Sent(1, request.sequences, int(context.get("input_tokens", 0))))
            if answered and (answers := context.get("answers")):
                kind, found[ref_id] = answers[0][1]  # engine/answer_values.Values: (kind, data)
            elif answered:  # a good answer its reader gives no values of
                logger.info("consistency: %s (%s): not compared: %s", user_class.__name__, plan.route, NO_VALUES)
                return None
            else:
                failed.append(f"{ref_id}: {event.get('exception') or 'no values'}")
                if not getattr(event.get("response"), "status_code", 0):
                    break  # no answer at all (a timeout, a refused connection): the next would wait as long
    finally:
        user.client.client.close()
    if failed:
        logger.warning(
            "consistency: %s: %d of %d reference answers not taken: not compared (the first failure: %s)",
            user_class.__name__,
            len(plan.references) - len(found),
            len(plan.references),
            str(failed[0])[:300],
        )
    return plan.label, kind, found


@dataclasses.dataclass
class Taken:
    """One request name's references as this process took them: what --consistency-save writes and what a
    worker ships to the master (reference_agreement.py)."""

    kind: str
    """"vectors" or "scores"."""
    inputs: list[Any]
    """Each reference's input, by reference id (Plan.reference_inputs)."""
    values: dict[int, Sequence[float]]
    """The values of those taken, by reference id."""
    from_file: bool = False


@dataclasses.dataclass
class Pending:
    """A reference file's vectors of one request name, compared only once the server's first answer showed
    their dimension is its own."""

    found: dict[int, Sequence[float]]
    dimension: int
    line: int


@dataclasses.dataclass
class Taking:
    """This process's references taken at its last test_start, by request name."""

    taken: dict[str, Taken] = dataclasses.field(default_factory=dict)
    pending: dict[str, Pending] = dataclasses.field(default_factory=dict)
    path: str = ""
    """The reference file read, if any."""
    listening: bool = False
    generation: int = 0
    """Counts the test_starts whose references are all taken: what a worker shipped is known by it, and a
    report sent while they are being taken ships none of them half-taken."""


_TAKING = Slot("consistency_taking", Taking)


def taking_of(environment: Environment) -> Taking:
    """The references this process took at its last test_start."""
    return _TAKING.of(environment)


def _plan(user_class: type[EndpointUser], environment: Environment) -> Plan:
    if environment.host:
        user_class.host = environment.host  # what Locust's runner does to every User class at start
    return plan_for(user_class, environment.parsed_options, environment.host, environment)


def _kind(plan: Plan) -> str:
    return "scores" if plan.endpoint.shape == "pairs" else "vectors"


def _from_file(
    file: reference_file.ReferenceFile, user_class: type[EndpointUser], environment: Environment
) -> tuple[str, str, dict[int, reference_file.FileReference]] | None:
    """(request name, kind, reference id -> the file's reference) of the class's references found in the file;
    None when its plan has none. Nothing is sent."""
    plan = _plan(user_class, environment)
    if not plan.references:
        return None
    kind = _kind(plan)
    found = file.matched(plan.label, kind, plan.reference_inputs)
    if missing := len(plan.references) - len(found):
        logger.info(
            "consistency: %s: %d of its %d reference inputs are not in %s: not compared",
            user_class.__name__,
            missing,
            len(plan.references),
            file.path,
        )
    dimensions = plan.settings.dimensions
    if kind == "vectors" and found and dimensions and len((first := next(iter(found.values()))).values) != dimensions:
        raise file.error(first.line, f"its vector has {len(first.values)} values; --dimensions asks {dimensions}")
    return plan.label, kind, found


def file_error(environment: Environment) -> str | None:
    """The line that stops a run whose --consistency-reference cannot be used, or None: the file is read and
    checked, and at least one of its inputs must be a reference input of the workload."""
    if environment.parsed_options is None:
        return None
    settings = settings_of(environment)
    if not (path := settings.consistency_reference) or settings.no_consistency or not settings.consistency_inputs:
        return None
    try:
        file = reference_file.read(path)
        matched = 0
        for user_class in endpoint_users(environment):
            if (found := _from_file(file, user_class, environment)) is not None:
                matched += len(found[2])
    except OptionError as e:
        return str(e)
    if not matched:
        first = min(r.line for r in file.references.values())
        return str(
            file.error(
                first,
                f"none of its {len(file.references)} references is one of the run's reference inputs (the first "
                "text of the pool's first distinct requests, or a rerank's whole request, as --consistency-save "
                "writes them for the same options and --seed; or no User class's answers are compared)",
            )
        )
    return None


# Checked with the other start checks: a bad file stops a headless run at init, a web UI's run at its start.
START_CHECK = StartCheck(file_error)


def take_references(environment: Environment) -> Sent:
    """Every User class's references, taken anew (a web UI's next run may have other options or host), from the
    server or from --consistency-reference's file; written to --consistency-save's; what the server counts of
    their requests."""
    state = consistency_of(environment)
    taking = _TAKING.of(environment)
    sent = Sent()
    state.references.clear()
    state.kinds.clear()
    taking.taken.clear()
    taking.pending.clear()
    taking.path = ""
    settings = settings_of(environment)
    if path := settings.consistency_reference:
        _read_references(environment, path, state, taking)
    else:
        began = time.monotonic()
        _take_references(environment, state, taking, sent)
        if (took := time.monotonic() - began) >= SAID_AFTER_S:
            # Taken at test_start, before the users spawn: Locust's -t counts from before, so they shorten the
            # measured run (a rerank of long documents alone may take half a second: 8 of them, 4 s).
            logger.warning(
                "consistency: the reference answers took %.1f s of the run's time before the users started "
                "(--consistency-inputs %d; a longer -t, fewer inputs or --consistency-reference spare it)",
                took,
                settings.consistency_inputs,
            )
    if taking.pending and not taking.listening:
        # Never removed (removing a listener while Locust fires the event would skip the next one): once
        # nothing is pending it returns at its first test.
        environment.events.request.add_listener(_dimension_check(environment, state, taking))
        taking.listening = True
    _save(environment, settings.consistency_save, taking.taken)
    taking.generation += 1
    return sent


def _shared(user_class: type[EndpointUser], name: str, state: Consistency, taking: Taking) -> bool:
    if name in state.references or name in taking.taken:
        logger.warning(
            "consistency: %s shares its request name %s with another class: not compared", user_class.__name__, name
        )
        return True
    return False


def _take_references(environment: Environment, state: Consistency, taking: Taking, sent: Sent) -> None:
    """Each class's references asked of the server alone."""
    for user_class in endpoint_users(environment):
        try:
            taken = _references(user_class, environment, sent)
        except OptionError:
            continue  # the start checks stop the run with the option's own line
        if taken is None:
            continue
        name, kind, found = taken
        if _shared(user_class, name, state, taking):
            continue
        taking.taken[name] = Taken(kind, list(_plan(user_class, environment).reference_inputs), found)
        state.references[name] = found
        state.kinds[name] = kind
        if found:
            logger.info("consistency: %s: %d reference answers taken", user_class.__name__, len(found))


def _read_references(environment: Environment, path: str, state: Consistency, taking: Taking) -> None:
    """Each class's references read from the file: nothing is sent. Scores are compared at once (their count,
    one a document, was checked when the file was read), vectors once the server's first answer showed their
    dimension."""
    try:
        file = reference_file.read(path)
    except OptionError as e:  # checked at start on the master: here, a worker's own copy of the file
        logger.error("consistency: %s: nothing compared", e)
        return
    taking.path = path
    for user_class in endpoint_users(environment):
        try:
            read = _from_file(file, user_class, environment)
        except OptionError as e:
            if e.option == reference_file.OPTION:
                logger.error("consistency: %s: not compared", e)
            continue  # otherwise the start checks stop the run with the option's own line
        if read is None:
            continue
        name, kind, found = read
        if _shared(user_class, name, state, taking):
            continue
        values: dict[int, Sequence[float]] = {ref_id: reference.values for ref_id, reference in found.items()}
        taking.taken[name] = Taken(kind, list(_plan(user_class, environment).reference_inputs), values, True)
        state.kinds[name] = kind
        if kind == "vectors" and values:
            first = min(found.values(), key=lambda r: r.line)
            taking.pending[name] = Pending(values, len(first.values), first.line)
        else:
            state.references[name] = values
        if found:
            logger.info("consistency: %s: %d reference answers read from %s", user_class.__name__, len(found), path)


def _dimension_check(environment: Environment, state: Consistency, taking: Taking) -> Any:
    """A request listener: the first answer of a name whose reference vectors came from a file shows the
    server's dimension; the file's are compared from then on if they are of it, else never, and the run stops
    (a local run's: a worker says so in its log)."""

    def check(name: str = "", exception: Any = None, context: Any = None, **_: Any) -> None:
        if not taking.pending or exception is not None or not context or not (answers := context.get("answers")):
            return
        if (pending := taking.pending.pop(name, None)) is None:
            return
        values = answers[0][1]  # Values(kind, data): the answer's values with their kind (endpoints/spec.py)
        got = f"{len(values.data)} values" if values.kind == "vectors" else f"{values.kind}, not a vector"
        if got == f"{pending.dimension} values":
            state.references[name] = pending.found
            return
        logger.error(
            "%s: %s line %d: %s's reference vectors have %d values; the server answers %s: not compared%s",
            reference_file.OPTION,
            taking.path,
            pending.line,
            name,
            pending.dimension,
            got,
            "" if isinstance(environment.runner, WorkerRunner) else " (the run stops)",
        )
        if (runner := environment.runner) is not None and not isinstance(runner, WorkerRunner):
            if environment.process_exit_code in (None, 0):
                environment.process_exit_code = 1
            headless = locust_options(environment).headless or not getattr(environment, "web_ui", None)
            gevent.spawn(runner.quit if headless else runner.stop)

    return check


def _save(environment: Environment, path: str | None, taken: dict[str, Taken]) -> None:
    """--consistency-save: every reference taken, written by a local run, or by a distributed run's first
    worker (index 0: the file is on its machine); a file that cannot be written is said, and the run goes on."""
    if not path or (isinstance(runner := environment.runner, WorkerRunner) and runner.worker_index != 0):
        return
    if not any(one.values for one in taken.values()):
        logger.warning("--consistency-save: no reference answer was taken: %s not written", path)
        return
    rows = (
        (name, one.kind, one.inputs[ref_id], values)
        for name, one in taken.items()
        for ref_id, values in sorted(one.values.items())
        # A file holds texts' vectors and pairs' scores: not packed, sparse, token-level or label answers, nor
        # conversations or images (their input None).
        if one.kind in reference_file.KINDS and one.inputs[ref_id] is not None
    )
    try:
        count = reference_file.write(path, rows)
    except OSError as e:
        logger.error("--consistency-save: %s: cannot be written: %s", path, e.strerror or e)
        return
    logger.info("consistency: %d reference answers written to %s (--consistency-save)", count, path)
