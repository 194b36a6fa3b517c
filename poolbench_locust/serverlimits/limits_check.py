"""TEI refuses a batch above its `max_client_batch_size` (32 by default) with 422 on every request; its
`GET /info` says so before the run. A run whose largest prepared batch is larger stops at start (or
its web UI run does not start), naming both numbers and what to change."""

from __future__ import annotations

import logging
from typing import Any

from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner

from poolbench_locust.engine.plan import plan_for
from poolbench_locust.engine.user import endpoint_users
from poolbench_locust.lifecycle import exit_early, stop_run
from poolbench_locust.options import OptionError
from poolbench_locust.serverlimits.tei_info import TeiLimits, tei_limits
from poolbench_locust.urls import shown_url

logger = logging.getLogger("poolbench_locust")


def batch_error(environment: Environment) -> str | None:
    """Why the server cannot take this run's batches, or None (also when it does not say its limits)."""
    tei = [u for u in endpoint_users(environment) if u.endpoint.server == "tei"]
    host = environment.host
    if not tei or not host:
        return None
    limits = tei_limits(host)
    if not isinstance(limits, TeiLimits):
        logger.warning(
            "TEI's limits unknown: %s/info gave %s; batches are not checked before the run", shown_url(host), limits
        )
        return None
    cap = limits.max_client_batch_size
    for user_class in tei:
        try:
            plan = plan_for(user_class, environment.parsed_options, host, environment)
        except OptionError:
            return None  # the start checks said why, in their one line
        largest = max((r.sequences for r in plan.requests), default=0)
        if largest > cap:
            option = "--documents" if user_class.endpoint.shape == "pairs" else "--batch-size"
            return (
                f"{option}: {user_class.__name__} sends up to {largest} inputs a request, and TEI at "
                f"{shown_url(host)} takes at most {cap} (GET /info max_client_batch_size; it answers 422 to "
                f"larger batches): give {option} {cap} or less, or start TEI with --max-client-batch-size {largest}"
            )
    return None


def on_init(environment: Environment, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
    waits_for_the_form = web_ui is not None and not getattr(environment.parsed_options, "autostart", False)
    if isinstance(runner, WorkerRunner) or waits_for_the_form:
        return
    if (error := batch_error(environment)) is not None:
        exit_early(environment, error)


def on_test_start(environment: Environment, **_: Any) -> None:
    # The web UI's form may change the host or the batch after start: asked again before users spawn.
    runner = environment.runner
    if isinstance(runner, WorkerRunner) or runner is None:
        return
    if (error := batch_error(environment)) is not None:
        stop_run(environment, error)


def setup(events: Events) -> None:
    """After the start checks and the bundled mock (the host is known), before preflight's one request."""
    events.init.add_listener(on_init)
    events.test_start.add_listener(on_test_start)
