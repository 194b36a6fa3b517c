"""--ab-host checked at start, as --host is: not --host itself, a host that listens, each User class's plan
for it (its options, its access), and, unless --no-preflight, one request of each User class to B judged
as the preflight judges A's: a route only one host serves stops the run naming the host that refused it."""

from __future__ import annotations

import logging
from typing import Any

from locust.env import Environment

from poolbench_locust.engine.ab import same_host, twin_class
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.engine.user import endpoint_users
from poolbench_locust.host_probe import host_error
from poolbench_locust.lifecycle import StartCheck
from poolbench_locust.options import OptionError, Settings, settings_of
from poolbench_locust.preflight import send_one
from poolbench_locust.store import Slot
from poolbench_locust.urls import shown_url

logger = logging.getLogger("poolbench_locust")

_PASSED: Slot[set[tuple[Any, ...]]] = Slot("ab_preflighted", set)
"""The User classes, B hosts and options whose B preflight passed: not asked again (it outlives a run)."""


def _settings(environment: Environment) -> Settings | None:
    try:
        return settings_of(environment)
    except OptionError:  # the start checks stop such a run with their own line
        return None


def _preflight(user_class: type[Any], host: str, environment: Environment) -> tuple[str, int, str | None] | None:
    """One request of the class's twin to B: (the path, HTTP status or 0, failure message or None)."""
    return send_one(twin_class(user_class, host)(environment), environment, alone=False)


def ab_error(environment: Environment, check_host: bool = True) -> str | None:
    """The line that stops an --ab-host run at start, or None."""
    settings = _settings(environment)
    if settings is None or (b := settings.ab_host) is None:
        return None
    shown = shown_url(b)
    if same_host(environment.host, b):
        return f"--ab-host {shown}: the same server as --host: B must be another server (or another port)"
    users = endpoint_users(environment)
    for user_class in users:
        try:
            plan_for(twin_class(user_class, b), environment.parsed_options, b, environment)
        except OptionError as e:
            return f"{e} (for --ab-host {shown})"
    if not check_host or not users:
        return None
    if (error := host_error(b, "--ab-host")) is not None:
        return error
    if settings.no_preflight:
        return None
    done = _PASSED.of(environment)
    for user_class in users:
        key = (user_class, b, repr(sorted(vars(environment.parsed_options).items())))
        if key in done:
            continue
        answer = _preflight(user_class, b, environment)
        if answer is None:
            continue
        path, status, failure = answer
        route = f"{user_class.__name__} (POST {path}) on --ab-host {shown}"
        if failure is None:
            done.add(key)
            logger.info("preflight: %s answered; it is one request the server counts and the stats do not", route)
            continue
        if 400 <= status < 500:
            return f"preflight: {route} failed: {failure} (the run stops; --no-preflight skips this check)"
        done.add(key)
        logger.warning("preflight: %s failed: %s; the run goes on", route, failure)
    return None


# As the preflight: a web UI's run gets its options and host from the form, checked at test_start.
START_CHECK = StartCheck(ab_error, before_the_form=lambda environment: ab_error(environment, check_host=False))
setup = START_CHECK.setup
