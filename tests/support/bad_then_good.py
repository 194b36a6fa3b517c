"""One in-process user's request answered badly by a hostile server, then its next one answered well."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.support.harness import Run, failure_text
from tests.support.hostile import HostileServer, serve_requests

BATCH = ["--batch-size", "2", "--input-len", "4"]
Responder = Callable[[bytes, bytes, int], bytes | None]
"""What a hostile server answers to a request: its head, its body, and how many came before it."""


def first_bad_then(bad: bytes, good: bytes) -> Responder:
    """Answers the first request with `bad`, every later one with `good`."""
    return lambda _head, _body, n: bad if n == 0 else good


def bad_then_good(user: type, bad: bytes, good: bytes, *args: str) -> tuple[dict[str, Any], dict[str, Any], Run]:
    """The events of one request answered `bad` and the next answered `good`, on the same user."""
    server = HostileServer(serve_requests(first_bad_then(bad, good)))
    try:
        run = Run(user, server.url, *BATCH, "--request-timeout", "3", *args)
        run.env.create_local_runner()  # Locust's own stats listen from here: its failures table
        return run.one(), run.one(), run
    finally:
        server.close()


def assert_failed_then_ok(user: type, bad: bytes, good: bytes, expected: str, *args: str) -> str:
    failed, ok, _ = bad_then_good(user, bad, good, *args)
    message = failure_text(failed)
    assert expected in message, message
    assert "input_tokens" not in failed["context"], "a failed request adds no tokens"
    assert ok["exception"] is None, failure_text(ok)
    return message
