"""Drive User classes in-process, one request at a time, and capture every request event Locust fires."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
from locust.argument_parser import get_parser
from locust.env import Environment

import poolbench_locust.plugin  # noqa: F401  (registers the options with Locust's parser)
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.engine.user import EndpointUser
from poolbench_locust.start_checks import configuration_error


def options(*args: str) -> Any:
    return get_parser().parse_args(list(args))


def start_error(user_class: type, *args: str, host: str = "http://127.0.0.1:9") -> str | None:
    """The one line that stops a run of `user_class` with these options at start against `host` (by default a
    port nothing listens on), or None."""
    subclass = type(user_class.__name__, (user_class,), {})  # its own plan cache entry
    env = Environment(user_classes=[subclass], host=host, parsed_options=options(*args))
    return configuration_error(env)


def first_body(user_class: type, *args: str) -> dict[str, Any]:
    """The first prepared request body of `user_class` with these options."""
    plan = plan_for(type(user_class.__name__, (user_class,), {}), options(*args))
    return orjson.loads(plan.requests[0].body)


class Run:
    """One User instance against `host`, with its request events collected in `events`."""

    def __init__(self, user_class: type, host: str, *args: str, mock_headers: dict[str, str] | None = None) -> None:
        self.events: list[dict[str, Any]] = []
        # A subclass per run keeps the shared User classes (and their cached plans) untouched.
        user_class = type(user_class.__name__, (user_class,), {"host": host})
        self.env = Environment(user_classes=[user_class], host=host, parsed_options=options(*args))
        self.env.events.request.add_listener(lambda **event: self.events.append(event))
        self.user = user_class(self.env)
        if mock_headers and isinstance(self.user, EndpointUser):
            # The bundled mock takes per-request controls as headers; give this user its own copy.
            plan = self.user.plan
            self.user.plan = dataclasses.replace(plan, headers={**plan.headers, **mock_headers})

    def one(self) -> dict[str, Any]:
        """Send one request; return its event, asserting that exactly one was fired."""
        before = len(self.events)
        self.user.send()
        assert len(self.events) == before + 1, f"{len(self.events) - before} events for one request"
        return self.events[-1]


def failure_text(event: dict[str, Any]) -> str:
    return "" if event["exception"] is None else str(event["exception"])
