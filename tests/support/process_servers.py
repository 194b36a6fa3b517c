"""Servers for whole Locust runs, each served in a process of its own by `served(NAME)`.

A Locust run started by a test is another process, and so is its server here: a handler named by its
module for `python -m tests.support.hostile MODULE:HANDLER`. They live in this module, not in the test
module that uses them, so that no process (and no test) loads a test module by its name: a test module
is pytest's to import, once (tests/test_tests_layout.py).
"""

from __future__ import annotations

import itertools
import socket
from contextlib import AbstractContextManager

import gevent
import orjson

from tests.support.hostile import read_request, response, serve_requests, server_process


def served(name: str) -> AbstractContextManager[str]:
    """This module's server `name` in a process of its own; yields its URL, stops it at the end."""
    return server_process(f"{__name__}:{name}")


# tests/test_preflight.py: a server whose refusal stops the run at its preflight.


def _fastapi_422(head: bytes, body: bytes, n: int) -> bytes:
    detail = [{"type": "literal_error", "loc": ["body", "encoding_format"], "msg": "Input should be 'float'"}]
    return response(422, orjson.dumps({"detail": detail}), reason="Unprocessable Entity")


answer_422 = serve_requests(_fastapi_422)
answer_huge_400 = serve_requests(lambda h, b, n: response(400, orjson.dumps({"error": {"message": "x" * 5_000}})))


# tests/test_results.py: a server that fails every request with a huge status line's worth of text and
# a body of terminal escapes: its words reach the failures table, and must reach the document bounded
# and as text.
huge_failures = serve_requests(
    lambda head, body, n: response(
        500, b"\x1b[2J" + b"\x00boom " * 40_000, content_type="text/plain", reason="E" * 4000
    )
)


# tests/test_console.py: Infinity counting characters, not tokens, in its usage.


def _characters(head: bytes, body: bytes, n: int) -> bytes:
    texts = orjson.loads(body)["input"]
    doc = {
        "object": "list",
        "data": [{"object": "embedding", "embedding": [0.5] * 8, "index": i} for i in range(len(texts))],
        "usage": {"prompt_tokens": sum(map(len, texts)), "total_tokens": sum(map(len, texts))},
    }
    return response(body=orjson.dumps(doc))


infinity_counting_characters = serve_requests(_characters)


# tests/test_consistency_reference.py


def by_connection(sock: socket.socket, conn: int) -> None:
    """An embeddings server whose vector depends on the connection it is asked on: each worker's references,
    asked on a connection of its own, differ from the others'."""
    while (request := read_request(sock)) is not None:
        if not request[0].startswith(b"POST /v1/embeddings"):
            sock.sendall(response(404, b"{}"))
            continue
        inputs = orjson.loads(request[1])["input"]
        data = [{"index": i, "object": "embedding", "embedding": [1.0, float(conn + 1)]} for i in range(len(inputs))]
        usage = {"prompt_tokens": 8 * len(inputs), "total_tokens": 8 * len(inputs)}
        sock.sendall(response(200, orjson.dumps({"object": "list", "data": data, "usage": usage})))


# tests/test_distributed_hostile.py: servers that count the pooling requests they received and answer
# `GET /count` with that number.

FIRST_HOSTILE = 100
EVERY = 500
"""The server's answer number FIRST_HOSTILE, and every EVERY-th after it, carries prompt_tokens = 2**63."""
SLOW_ANSWER_S = 0.3

_received = itertools.count(1)
_count = 0


def _counting(slow_s: float, hostile: bool) -> object:
    def handler(sock: socket.socket, _conn: int) -> None:
        global _count
        while (request := read_request(sock)) is not None:
            head, body = request
            if head.startswith(b"GET /count"):
                sock.sendall(response(200, str(_count).encode(), content_type="text/plain"))
                continue
            if not head.startswith(b"POST"):  # the start's GET /v1/models (max_model_len): not a request of the load
                sock.sendall(response(404, b"{}"))
                continue
            n = next(_received)
            _count = n
            inputs = orjson.loads(body)["input"]
            tokens = 2**63 if hostile and n >= FIRST_HOSTILE and (n - FIRST_HOSTILE) % EVERY == 0 else 8
            data = [{"index": i, "object": "embedding", "embedding": [0.5, 0.25]} for i in range(len(inputs))]
            if slow_s:
                gevent.sleep(slow_s)
            answer = {"object": "list", "data": data, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
            sock.sendall(response(200, orjson.dumps(answer)))

    return handler


implausible_usage = _counting(0.0, hostile=True)
slow = _counting(SLOW_ANSWER_S, hostile=False)
