"""The requests in flight when a run stops are reported, not dropped.

Locust's default `--stop-timeout` is 0: at the end of a run it kills every user at once, and the
requests they had in flight never fire their event (16 answered, 12 counted, in one run). A
poolbench-locust request ends by itself within `--request-timeout`, so for these User classes a
stop timeout of 0 becomes the longest `--request-timeout` of the run: users finish the request in
flight, fire its event, and stop. A positive `--stop-timeout` is kept as given. In distributed
mode the master's value is the one that counts: Locust sends it to the workers with every spawn.

A worker drops its stop timeout to 0 once its users have stopped. Locust's worker, told to stop,
stops its users (waiting up to the stop timeout for them) and then sleeps the stop timeout once more
before it tells the master it is ready again: with a 60 s --request-timeout, a web UI's START less than
a minute after STOP found no ready worker, started nothing (Locust only logs "You can't start a
distributed test before at least one worker processes has connected"), and the page kept the first
run's figures. The users are gone by then, so nothing is cut short; the next spawn brings the
master's value back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner

from poolbench_locust.engine.user import EndpointUser
from poolbench_locust.options import OptionError, settings_of
from poolbench_locust.store import Slot

logger = logging.getLogger("poolbench_locust")


@dataclass
class _Ours:
    """Whether environment.stop_timeout is the one this module set (not the user's): it outlives a run."""

    set: bool = False


_OURS = Slot("stop_timeout", _Ours)


def default_stop_timeout(environment: Environment) -> float | None:
    """The stop timeout these User classes need, or None when the one Locust has is to be kept."""
    # One set here (not the user's) moves with a --request-timeout changed in the web UI.
    if environment.stop_timeout and not _OURS.of(environment).set:
        return None
    if not any(issubclass(u, EndpointUser) for u in environment.user_classes):
        return None
    try:
        return settings_of(environment).request_timeout
    except OptionError:
        return None  # the start checks say why, in one line


def _apply(environment: Environment, **_: Any) -> None:
    if isinstance(environment.runner, WorkerRunner):
        return
    if (seconds := default_stop_timeout(environment)) is not None:
        environment.stop_timeout = seconds
        _OURS.of(environment).set = True
        logger.debug("--stop-timeout 0: waiting up to --request-timeout (%g s) for requests in flight at stop", seconds)


def _ready_at_once(environment: Environment, **_: Any) -> None:
    """test_stop on a worker: its users have stopped (Runner.stop waited for them): no more waiting."""
    environment.stop_timeout = 0.0


def on_init(environment: Environment, **_: Any) -> None:
    if isinstance(environment.runner, WorkerRunner):
        environment.events.test_stop.add_listener(lambda **kw: _ready_at_once(environment))
        return
    _apply(environment)
    # The web UI's form may change --request-timeout before the run starts.
    environment.events.test_start.add_listener(lambda **kw: _apply(environment))


def setup(events: Events) -> None:
    events.init.add_listener(on_init)
