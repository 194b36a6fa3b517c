"""Fail fast: one request per User class before the users start, as vLLM's own benchmark does.

A wrong route (404), an encoding the server rejects (422) or a model without a chat template (400)
otherwise makes every request of the run fail at full speed: 27,437 failures in 10 s against
vLLM. The preflight request is the first of the class's prepared requests, sent and judged by
the measuring engine itself (so its message is the one the run would show), on a client whose
events reach no stats. A 4xx answer stops the run with the server's message and exit code 1; any
other failure (a 503 while the server warms up, a timeout) is logged and the run goes on.
In distributed mode the master sends it, once; workers send none.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from locust.env import Environment
from locust.event import EventHook

from poolbench_locust.engine.user import EndpointUser, endpoint_users
from poolbench_locust.lifecycle import StartCheck
from poolbench_locust.metrics.pace_causes import alone_ms, note_alone
from poolbench_locust.options import OptionError, settings_of
from poolbench_locust.store import Slot
from poolbench_locust.urls import shown_url

logger = logging.getLogger("poolbench_locust")

MESSAGE_LIMIT = 500
"""Characters of the server's message shown: enough for any error text, bounded for a hostile one."""


def _one_request(user_class: type[EndpointUser], environment: Environment) -> tuple[str, int, str | None] | None:
    """Send the class's first prepared request: (the path requested, HTTP status or 0, failure message or None).

    None when the options are bad: the start checks stop the run with its own line for that.
    """
    if environment.host:
        user_class.host = environment.host  # what Locust's runner does to every User class at start
    return send_one(user_class(environment), environment)


def send_one(user: EndpointUser, environment: Environment, alone: bool = True) -> tuple[str, int, str | None] | None:
    """Send `user`'s first prepared request outside the stats: (the path, HTTP status or 0, failure message or
    None); None without a plan. `alone`: its time is the reference a saturated server's latency is compared
    with (the run's own host only)."""
    if user.plan is None:
        return None
    seen: list[dict[str, Any]] = []
    captured = EventHook()
    captured.add_listener(lambda **event: seen.append(event))
    user.client.request_event = captured
    # Without warm-up: the engine would send a warm-up request to a hook no one listens to.
    user.plan = dataclasses.replace(user.plan, settings=dataclasses.replace(user.plan.settings, warmup=0.0))
    try:
        user.measure(user.plan.requests[0])
    finally:
        user.client.client.close()
    if not seen:  # the engine fires one event per request; should it ever not, the run shows why
        return user.plan.path, 0, "no request event was fired"
    event = seen[-1]
    status = getattr(event.get("response"), "status_code", 0)
    error = event.get("exception")
    if alone and error is None and isinstance(took := event.get("response_time"), int | float) and took > 0:
        note_alone(environment, float(took))
    message = None if error is None else str(error)[:MESSAGE_LIMIT]
    return user.plan.path, (status if isinstance(status, int) else 0), message


_PASSED: Slot[set[tuple[Any, ...]]] = Slot("preflighted", set)
"""The User classes, hosts and options whose preflight request passed: not asked again (it outlives a run)."""


def preflight_error(environment: Environment) -> str | None:
    """The line that stops the run, or None. Each User class and set of options is asked once per host."""
    done = _PASSED.of(environment)
    for user_class in endpoint_users(environment):
        host = environment.host or user_class.host
        key = (user_class, host, repr(sorted(vars(environment.parsed_options).items())))
        if key in done:
            continue
        try:
            answer = _one_request(user_class, environment)
        except OptionError as e:  # building the plan asked /tokenize, and it failed
            return str(e)
        if answer is None:
            continue
        path, status, failure = answer
        route = f"{user_class.__name__} (POST {path})"
        if settings_of(environment).ab_host:  # two hosts: say which one this was
            route += f" on --host {shown_url(host or '')}"
        if failure is None:
            done.add(key)
            # The server counts this request and the stats do not: say so, for whoever reconciles the two.
            logger.info(
                "preflight: %s answered%s; it is one request the server counts and the stats do not",
                route,
                f" in {took:,.0f} ms" if (took := alone_ms(environment)) is not None else "",
            )
            continue
        if 400 <= status < 500:
            return f"preflight: {route} failed: {failure} (the run stops; --no-preflight skips this check)"
        done.add(key)  # not the client's fault, maybe passing: the run shows it if it lasts
        logger.warning("preflight: %s failed: %s; the run goes on", route, failure)
    return None


def _enabled(environment: Environment) -> bool:
    if environment.parsed_options is None or settings_of(environment).no_preflight:
        return False
    return bool(environment.host) or any(u.host for u in endpoint_users(environment))


def _check(environment: Environment) -> str | None:
    return preflight_error(environment) if _enabled(environment) else None


# A web UI's run gets its host and options from the form: it is checked at test_start instead of init.
# Set up after the start checks: a request is sent only with options that passed them.
START_CHECK = StartCheck(_check)
setup = START_CHECK.setup
