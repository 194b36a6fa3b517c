"""No --host given: the bundled mock server starts in this process and the test aims at it."""

from __future__ import annotations

import logging
from typing import Any

from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner

from poolbench_locust.engine.user import endpoint_users
from poolbench_locust.host_probe import probed
from poolbench_locust.options import OptionError
from poolbench_locust.options.settings import settings_of

logger = logging.getLogger("poolbench_locust")

EMBEDDED_MOCK_TTFB_MS = 20.0
EMBEDDED_MOCK_BODY_MS = 5.0
"""The bundled mock, started when no --host is given, answers like a small model on a GPU: 20 ms to
the headers (the inference), 5 ms of body. With no delay at all TTFB equalled E2E and the split
that poolbench-locust exists to show was invisible."""


def start_embedded_mock(environment: Environment) -> None:
    from poolbench_locust.mockserver import MockConfig, MockServer

    flavors = {u.endpoint.server for u in endpoint_users(environment)}
    try:  # a token_embed model's /v1/embeddings answers token rows: the mock's model must be one
        settings = settings_of(environment)
    except OptionError:  # the start checks say so, once
        settings = None
    task = "token_embed" if settings is not None and settings.pooling_task == "token_embed" else None
    # --embedding-type says what an Infinity server was started with: the mock's Infinity is started so
    embedding_type = settings.embedding_type if settings is not None else None
    config = MockConfig(
        task=task,
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
