"""The reference answers (docs/consistency.md): each User class's reference inputs answered alone, one at a
time, before its users start, on a client whose events reach no stats."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from locust.env import Environment
from locust.event import EventHook

from poolbench_locust.consistency.state import Sent, consistency_of
from poolbench_locust.engine.comparison_budget import ALWAYS
from poolbench_locust.engine.user import EndpointUser, endpoint_users
from poolbench_locust.options import OptionError
from poolbench_locust.workload.warmup import Warmup

logger = logging.getLogger("poolbench_locust")

NO_VALUES = "its answers' reader gives no scores or vectors to compare yet"


def _references(
    user_class: type[EndpointUser], environment: Environment, sent: Sent
) -> tuple[str, str, dict[int, Any]] | None:
    """(request name, kind, reference id -> values) of the class's reference requests, each measured alone,
    one at a time, on a client whose events reach no stats, those answered well counted in `sent`; None
    when its plan has no reference."""
    if environment.host:
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
            event = seen[-1] if seen else {"exception": "no request event was fired"}
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


def take_references(environment: Environment) -> Sent:
    """Every User class's references, taken anew (a web UI's next run may have other options or host); what
    the server counts of their requests."""
    state = consistency_of(environment)
    sent = Sent()
    state.references.clear()
    state.kinds.clear()
    for user_class in endpoint_users(environment):
        try:
            taken = _references(user_class, environment, sent)
        except OptionError:
            continue  # the start checks stop the run with the option's own line
        if taken is None:
            continue
        name, kind, found = taken
        if name in state.references:
            logger.warning(
                "consistency: %s shares its request name %s with another class: not compared", user_class.__name__, name
            )
            continue
        state.references[name] = found
        state.kinds[name] = kind
        if found:
            logger.info("consistency: %s: %d reference answers taken", user_class.__name__, len(found))
    return sent
