"""A server that records when each request arrived and what it carried, for the trace tests.

Served in a process of its own (`python -m tests.support.hostile tests.support.recording_server:recording`), so
that its clock and its answers owe nothing to the client's gevent hub. Each POST is answered with
a valid answer of its endpoint (embeddings or rerank, vLLM's or TEI's), after RECORDING_DELAY_MS; `GET /arrivals`
answers every request seen so far: its arrival time (time.time() once its body was read), route
and JSON body.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import gevent
import orjson

from tests.support.hostile import read_request, response

DELAY_S = float(os.environ.get("RECORDING_DELAY_MS", "5")) / 1000
arrivals: list[dict[str, Any]] = []


def answer_for(route: str, doc: Any) -> bytes:
    """A valid answer of the route to this request (TEI's bare lists to a TEI body: `inputs`, `texts`)."""
    if "texts" in doc:  # TEI's /rerank
        return orjson.dumps([{"index": i, "score": 0.5} for i in range(len(doc["texts"]))])
    if "inputs" in doc:  # TEI's /embed
        return orjson.dumps([[0.5, 0.25]] * len(doc["inputs"]))
    if "rerank" in route:
        documents = doc.get("documents", [])
        results = [{"index": i, "relevance_score": 0.5} for i in range(len(documents))]
        return orjson.dumps({"results": results, "usage": {"prompt_tokens": 1, "total_tokens": 1}})
    texts = doc.get("input", [])
    data = [{"index": i, "object": "embedding", "embedding": [0.5, 0.25]} for i in range(len(texts))]
    tokens = sum(len(t.split()) for t in texts)
    return orjson.dumps({"object": "list", "data": data, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


def recording(sock: socket.socket, _conn: int) -> None:
    while (request := read_request(sock)) is not None:
        arrived = time.time()
        head, body = request
        route = head.split(b" ", 2)[1].decode()
        if head.startswith(b"GET /arrivals"):
            sock.sendall(response(200, orjson.dumps(arrivals)))
            continue
        if not head.startswith(b"POST"):  # --server-metrics' GET /metrics: not a request of the trace
            sock.sendall(response(404, b"{}"))
            continue
        doc = orjson.loads(body)
        arrivals.append({"at": arrived, "route": route, "body": doc})
        if DELAY_S:
            gevent.sleep(DELAY_S)
        sock.sendall(response(200, answer_for(route, doc)))
