"""No --host given: the bundled mock server starts in this process and the test aims at it."""

from __future__ import annotations

import logging
from typing import Any

from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner

from poolbench_locust.engine.user import endpoint_users
from poolbench_locust.host_probe import probed
from poolbench_locust.lifecycle import exit_early
from poolbench_locust.options import OptionError
from poolbench_locust.options.settings import Settings, settings_of

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
        # Wrong answers on purpose, for the consistency check to find (docs/consistency.md)
        drift_above=settings.mock_drift_above if settings is not None else None,
        cache_drift=settings.mock_cache_drift if settings is not None else False,
        flip_above=settings.mock_flip_above if settings is not None else None,
    )
    server = MockServer(config, host="127.0.0.1", port=0)
    server.start()
    environment.host = server.url
    logger.info(
        "No --host given: started the bundled mock server at %s (%g ms to the headers, %g ms of body%s) "
        "and aimed the test at it",
        server.url,
        config.ttfb_ms,
        config.body_ms,
        "".join(f", {flag}" for flag in _mock_flags(settings)),
    )


def _mock_flags(settings: Settings | None) -> list[str]:
    """The bundled mock's faults asked for, as their options read."""
    if settings is None:
        return []
    found = [] if settings.mock_drift_above is None else [f"--mock-drift-above {settings.mock_drift_above}"]
    found += ["--mock-cache-drift"] if settings.mock_cache_drift else []
    return found + ([] if settings.mock_flip_above is None else [f"--mock-flip-above {settings.mock_flip_above}"])


def on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner):
        return  # a worker takes its host from the master
    users = endpoint_users(environment)
    if users and not environment.host and not any(u.host for u in environment.user_classes):
        start_embedded_mock(environment)
        probed(environment).host = environment.host
        return
    try:
        asked = _mock_flags(settings_of(environment))
    except OptionError:  # the start checks say so, once
        return
    if asked:  # a fault of a server that is not started would be silently ignored
        flag = asked[0].split()[0]
        exit_early(environment, f"{flag}: only the bundled mock, started when no --host is given, has this fault")


def setup(events: Events) -> None:
    """After the start checks (a run they stop starts no server)."""
    events.init.add_listener(on_init)
