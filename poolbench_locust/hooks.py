"""Locust event listeners: stop a bad configuration at start, and aim at the bundled mock by default."""

from __future__ import annotations

import logging
import socket
import sys
import time
from typing import Any
from urllib.parse import urlsplit

import gevent
from locust import events
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from poolbench_locust.endpoints.spec import Endpoint
from poolbench_locust.engine.user import EndpointUser, plan_for
from poolbench_locust.metrics import checks
from poolbench_locust.options import OPTIONS, OptionError

logger = logging.getLogger("poolbench_locust")

HOST_CHECK_TIMEOUT_S = 5.0
"""Bound of the name lookup and of the TCP connect that check --host at start."""
SECRET_DESTS = frozenset(opt.dest for opt in OPTIONS if opt.secret)
SECRET_PLACEHOLDER = "(unchanged)"
"""What the web UI's form shows in a secret field that has a value; sent back, it keeps that value."""
WORKERS_CONNECT_S = 3.0
"""How long a --processes master that stops at start waits for its workers, to tell them to quit."""
EMBEDDED_MOCK_TTFB_MS = 20.0
EMBEDDED_MOCK_BODY_MS = 5.0
"""The bundled mock, started when no --host is given, answers like a small model on a GPU: 20 ms to
the headers (the inference), 5 ms of body. With no delay at all TTFB equalled E2E and the split
that poolbench-locust exists to show was invisible."""


def _endpoint_users(environment: Environment) -> list[type[EndpointUser]]:
    return [u for u in environment.user_classes if issubclass(u, EndpointUser)]


def configuration_error(environment: Environment, options: Any = None) -> str | None:
    """The one line that says why the options (the environment's, or `options`) or the User classes
    cannot run, or None."""
    if (error := checks.start_error(options or environment.parsed_options)) is not None:
        return error
    for user_class in _endpoint_users(environment):
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
            plan_for(user_class, checked, getattr(checked, "host", None) or environment.host)
        except OptionError as e:
            return str(e)
    return None


def _without_credentials(url: str) -> str:
    """The URL as it may be shown: user:password@ in --host is a secret like --api-key."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl()


def host_error(host: str) -> str | None:
    """Why nothing can be sent to `host`, or None.

    Checked once at start, so that a typo in --host stops the run with one line instead of
    becoming thousands of failed requests. A TCP connect is enough: it proves a name that
    resolves and a port that listens, without sending the server a request it would count.
    """
    shown = _without_credentials(host)
    parts = urlsplit(host)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"--host {shown}: not an http:// or https:// URL with a host (e.g. http://127.0.0.1:8000)"
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        return f"--host {shown}: the port must be a number in 1..65535"
    name = parts.hostname
    try:
        with gevent.Timeout(HOST_CHECK_TIMEOUT_S):
            addresses = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except gevent.Timeout:
        return f"--host {shown}: no answer from DNS for {name} within {HOST_CHECK_TIMEOUT_S:g} s"
    except socket.gaierror as e:
        return f"--host {shown}: cannot resolve {name}: {e.strerror}"
    reason = "no address"
    for family, kind, proto, _, address in addresses:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.settimeout(HOST_CHECK_TIMEOUT_S)
                probe.connect(address)
            return None
        except ConnectionRefusedError:
            reason = "connection refused (nothing listens there)"
        except TimeoutError:
            reason = f"no answer within {HOST_CHECK_TIMEOUT_S:g} s"
        except OSError as e:
            reason = e.strerror or str(e)
    return f"--host {shown}: cannot connect to {name}:{port}: {reason}"


def _start_embedded_mock(environment: Environment) -> None:
    from poolbench_locust.mockserver import MockConfig, MockServer

    flavors = {u.endpoint.server for u in _endpoint_users(environment)}
    config = MockConfig(
        flavor=flavors.pop() if len(flavors) == 1 else "vllm",
        ttfb_ms=EMBEDDED_MOCK_TTFB_MS,
        body_ms=EMBEDDED_MOCK_BODY_MS,
    )
    server = MockServer(config, host="127.0.0.1", port=0)
    server.start()
    environment.host = server.url
    logger.info(
        "No --host given: started the bundled mock server at %s (%g ms to the headers, %g ms of body) "
        "and aimed the test at it",
        server.url,
        config.ttfb_ms,
        config.body_ms,
    )


def _start_error(environment: Environment, check_host: bool = True) -> str | None:
    if (error := configuration_error(environment)) is not None:
        return error
    host = environment.host
    if not check_host or not host or not _endpoint_users(environment):
        return None
    if getattr(environment, "poolbench_checked_host", None) == host:
        return None
    if (error := host_error(host)) is None:
        environment.poolbench_checked_host = host  # type: ignore[attr-defined]
    return error


def _quit_workers(environment: Environment, runner: MasterRunner) -> None:
    # With --processes, Locust forked the workers before this check, and its exit clean-up takes a
    # running child for an exited one (locust.main's kill_workers): they would wait a minute for
    # a master that is gone. A master's quit message ends them now.
    if getattr(environment.parsed_options, "processes", None):
        expected = getattr(environment.parsed_options, "expect_workers", 1)
        deadline = time.monotonic() + WORKERS_CONNECT_S
        while len(runner.clients.ready) < expected and time.monotonic() < deadline:
            gevent.sleep(0.05)
    runner.quit()


def _keep_secrets_out_of_the_page(environment: Environment, web_ui: Any) -> None:
    """Locust puts the value of every web-UI option in its page, as the form's default, secret ones
    too (locust.argument_parser.ui_extra_args_dict: only the input box is masked). The page gets a
    placeholder instead; a form sent back with it keeps the value the run started with."""
    options = environment.parsed_options
    environment.poolbench_secrets = {  # type: ignore[attr-defined]
        dest: value for dest in SECRET_DESTS if (value := getattr(options, dest, None))
    }
    update = web_ui.update_template_args

    def update_without_secrets() -> None:
        update()
        for dest, option in (web_ui.template_args.get("extra_options") or {}).items():
            if dest in SECRET_DESTS and option.get("default_value"):
                option["default_value"] = SECRET_PLACEHOLDER

    web_ui.update_template_args = update_without_secrets
    update_without_secrets()  # the page args Locust already built hold the values too


def _restore_secrets(environment: Environment) -> None:
    """The web UI's form sent its fields into parsed_options: a placeholder means "unchanged"."""
    secrets: dict[str, str] = getattr(environment, "poolbench_secrets", {})
    for dest in SECRET_DESTS:
        value = getattr(environment.parsed_options, dest, None)
        if value == SECRET_PLACEHOLDER and dest in secrets:
            setattr(environment.parsed_options, dest, secrets[dest])
        elif value:
            secrets[dest] = value  # a new value typed into the form is the one to keep from now on


@events.init.add_listener
def on_init(environment: Environment, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner):
        return  # a worker takes its options and host from the master
    if web_ui is not None:
        _keep_secrets_out_of_the_page(environment, web_ui)
    # A web UI's run starts when its form is sent, maybe with another host, and the target may come
    # up only by then (a pod started beside its server): its host is checked at test_start.
    waits_for_the_form = web_ui is not None and not getattr(environment.parsed_options, "autostart", False)
    if (error := _start_error(environment, check_host=not waits_for_the_form)) is not None:
        logger.error("%s", error)
        if isinstance(runner, MasterRunner):
            _quit_workers(environment, runner)
        sys.exit(1)
    users = _endpoint_users(environment)
    if users and not environment.host and not any(u.host for u in environment.user_classes):
        _start_embedded_mock(environment)
        environment.poolbench_checked_host = environment.host  # type: ignore[attr-defined]


@events.test_start.add_listener
def on_test_start(environment: Environment, **_: Any) -> None:
    # The web UI's form can change the options and the host after start: check them again
    # before users spawn (a host already checked is not probed again).
    if isinstance(environment.runner, WorkerRunner):
        return
    _restore_secrets(environment)
    if (error := _start_error(environment)) is not None and environment.runner is not None:
        logger.error("%s", error)
        gevent.spawn(environment.runner.stop)
