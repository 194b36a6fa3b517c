"""Stop a bad configuration at start: the options, the User classes and the host, checked once when
Locust starts and again when the web UI's form starts a run."""

from __future__ import annotations

import logging
from typing import Any

from locust.env import Environment

from poolbench_locust.endpoints.spec import Endpoint
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.engine.user import endpoint_users
from poolbench_locust.host_probe import host_error, probed
from poolbench_locust.lifecycle import StartCheck
from poolbench_locust.locust_options import LocustOptions
from poolbench_locust.options import OptionError, options_error

logger = logging.getLogger("poolbench_locust")


def configuration_error(environment: Environment, options: Any = None) -> str | None:
    """The one line that says why the options (the environment's, or `options`) or the User classes
    cannot run, or None."""
    if (error := options_error(options or environment.parsed_options)) is not None:
        return error
    for user_class in endpoint_users(environment):
        # Checked before plan_for, which would fail on it with an AttributeError and a traceback.
        if not isinstance(getattr(user_class, "endpoint", None), Endpoint):
            return (
                f"{user_class.__name__}: declares no endpoint; set `endpoint = Endpoint(...)` "
                "(poolbench_locust.endpoints.spec), or `abstract = True` on a base class"
            )
        checked = options if options is not None else environment.parsed_options
        try:
            # The host to check is the options' (the form's, in the web UI): a User class keeps the host
            # of the run before, which Locust set on it, until the next spawn.
            plan_for(user_class, checked, LocustOptions(checked).host or environment.host, environment)
        except OptionError as e:
            return str(e)
    return None


def start_error(environment: Environment, check_host: bool = True) -> str | None:
    if (error := configuration_error(environment)) is not None:
        return error
    host = environment.host
    if not check_host or not host or not endpoint_users(environment):
        return None
    found = probed(environment)
    if found.host == host:
        return None
    if (error := host_error(host)) is None:
        found.host = host
    return error


# A web UI's run starts when its form is sent, maybe with another host, and the target may come up only by
# then (a pod started beside its server): its host is checked at test_start, its options at init too. The
# form can change the options and the host after start: checked again before users spawn (a host already
# checked is not probed again).
START_CHECK = StartCheck(start_error, before_the_form=lambda environment: start_error(environment, check_host=False))
on_init, on_test_start, setup = START_CHECK.on_init, START_CHECK.on_test_start, START_CHECK.setup
