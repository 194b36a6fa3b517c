"""A response as the routes build it and the HTTP writer sends it."""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from poolbench_locust.wire import JSON


@dataclass(slots=True)
class Reply:
    status: int
    body: bytes
    content_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)
    """Extra response headers, lower-case names (framing headers are the writer's business)."""
    chunked: bool = False
    tokens: int = 0
    """The token figure the answer reports (or, where it reports none, the word-rule count)."""
    sequences: int = 0
    prompts: tuple[tuple[object, int], ...] = ()
    """The prompts run and their tokens (calls.AnswerDraft.prompts), for the prefix cache's counters."""
    drift: tuple[int, int, int] = (0, 0, 0)
    """The answer's wrong values (calls.Call's): vectors drifted by load, by a repeat, rankings flipped."""


def error_reply(status: int, message: str, kind: str) -> Reply:
    """vLLM's error JSON, which clients are expected to read and show."""
    return Reply(status, orjson.dumps({"error": {"message": message, "type": kind, "code": status}}))
