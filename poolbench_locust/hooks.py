"""Locust event listeners: stop a bad configuration at start, and aim at the bundled mock by default."""

from __future__ import annotations

import logging
import sys
from typing import Any

import gevent
from locust import events
from locust.env import Environment
from locust.runners import WorkerRunner

from poolbench_locust.engine.user import EndpointUser, plan_for
from poolbench_locust.options import OptionError

logger = logging.getLogger("poolbench_locust")


def _endpoint_users(environment: Environment) -> list[type[EndpointUser]]:
    return [u for u in environment.user_classes if issubclass(u, EndpointUser)]


def configuration_error(environment: Environment) -> OptionError | None:
    for user_class in _endpoint_users(environment):
        try:
            plan_for(user_class, environment.parsed_options)
        except OptionError as e:
            return e
    return None


def _start_embedded_mock(environment: Environment) -> None:
    from poolbench_locust.mockserver import MockConfig, MockServer

    flavors = {u.endpoint.server for u in _endpoint_users(environment)}
    server = MockServer(MockConfig(flavor=flavors.pop() if len(flavors) == 1 else "vllm"), host="127.0.0.1", port=0)
    server.start()
    environment.host = server.url
    logger.info("No --host given: started the bundled mock server at %s and aimed the test at it", server.url)


@events.init.add_listener
def on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner):
        return  # a worker takes its options and host from the master
    if (error := configuration_error(environment)) is not None:
        logger.error("%s", error)
        sys.exit(1)
    users = _endpoint_users(environment)
    if users and not environment.host and not any(u.host for u in environment.user_classes):
        _start_embedded_mock(environment)


@events.test_start.add_listener
def on_test_start(environment: Environment, **_: Any) -> None:
    # The web UI's form can change options after start: check them again before users spawn.
    if isinstance(environment.runner, WorkerRunner):
        return
    if (error := configuration_error(environment)) is not None and environment.runner is not None:
        logger.error("%s", error)
        gevent.spawn(environment.runner.stop)
