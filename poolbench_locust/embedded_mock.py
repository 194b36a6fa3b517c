"""No --host given: the bundled mock server starts in this process and the test aims at it."""

from __future__ import annotations

import logging
from typing import Any

from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner

from poolbench_locust.engine.user import endpoint_users
from poolbench_locust.host_probe import probed

logger = logging.getLogger("poolbench_locust")

EMBEDDED_MOCK_TTFB_MS = 20.0
EMBEDDED_MOCK_BODY_MS = 5.0
"""The bundled mock, started when no --host is given, answers like a small model on a GPU: 20 ms to
the headers (the inference), 5 ms of body. With no delay at all TTFB equalled E2E and the split
that poolbench-locust exists to show was invisible."""


def start_embedded_mock(environment: Environment) -> None:
    from poolbench_locust.mockserver import MockConfig, MockServer

    flavors = {u.endpoint.server for u in endpoint_users(environment)}
    # --embedding-type says what an Infinity server was started with: the mock's Infinity is started so
    embedding_type = getattr(environment.parsed_options, "embedding_type", None)
    config = MockConfig(
        flavor=flavors.pop() if len(flavors) == 1 else "vllm",
        ttfb_ms=EMBEDDED_MOCK_TTFB_MS,
        body_ms=EMBEDDED_MOCK_BODY_MS,
        infinity_dtype="float32" if embedding_type in (None, "float", "base64") else embedding_type,
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


def on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner):
        return  # a worker takes its host from the master
    users = endpoint_users(environment)
    if users and not environment.host and not any(u.host for u in environment.user_classes):
        start_embedded_mock(environment)
        probed(environment).host = environment.host


def setup(events: Events) -> None:
    """After the start checks (a run they stop starts no server)."""
    events.init.add_listener(on_init)
