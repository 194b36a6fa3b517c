"""A server whose every answer takes a time it chooses: headers after TTFB_MS, then a /v1/embeddings
body trickled out in pieces until the request's own duration is over; it times each request itself.

Served in a process of its own by `python -m tests.support.hostile tests.support.trickle:handler`. `GET /timings`
answers the server's time of every request so far, in ms (its last request byte read to its last
answer byte sent).
"""

from __future__ import annotations

import itertools
import json
import socket
import time

import gevent

from tests.support.hostile import read_request, response

TTFB_MS = 40.0
PIECES = 12
STEP_MS = 240.0
DURATIONS_MS = tuple(6000.0 + STEP_MS * (k * 7 % 25) for k in range(25))
"""6 s to 11.76 s, 240 ms apart, in a shuffled order: long enough that the client's overhead (a
millisecond on a quiet machine, up to 10 when other processes crowd its two cores) stays under
0.1 %, and far enough apart that a delayed request does not swap places with its neighbour."""
FIRST_MS = 500.0
"""The first answer on a connection, below the band: the client's cost of connecting (gevent's
resolver thread, the handshake: 5 to 10 ms on a crowded machine) is its own, not the server's
time, and the percentiles compared lie in the band."""
SPLIT_MS = 9000.0
"""Between two durations (8,880 and 9,120 ms): an objective there splits the requests as the server
timed them, whatever the client's own overhead."""
BODY = json.dumps(
    {
        "object": "list",
        "model": "trickle",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.25] * 64}],
        "usage": {"prompt_tokens": 7, "total_tokens": 7},
    }
).encode()

timings_ms: list[float] = []
_requests = itertools.count()


def _sleep_until(deadline: float) -> None:
    gevent.sleep(max(0.0, deadline - time.perf_counter()))


def handler(sock: socket.socket, _connection: int) -> None:
    first = True
    while (request := read_request(sock)) is not None:
        arrived = time.perf_counter()
        if request[0].startswith(b"GET /timings"):
            sock.sendall(response(body=json.dumps({"server_ms": timings_ms}).encode()))
            continue
        if not request[0].startswith(b"POST"):  # the start's GET /v1/models (max_model_len): neither timed nor counted
            sock.sendall(response(404, b"{}"))
            continue
        duration = (FIRST_MS if first else DURATIONS_MS[next(_requests) % len(DURATIONS_MS)]) / 1000
        first = False
        _sleep_until(arrived + TTFB_MS / 1000)
        sock.sendall(response(content_length=len(BODY)))
        started = time.perf_counter()
        step = -(-len(BODY) // PIECES)
        for i in range(PIECES):
            _sleep_until(started + (arrived + duration - started) * (i + 1) / PIECES)
            sock.sendall(BODY[i * step : (i + 1) * step])
        timings_ms.append((time.perf_counter() - arrived) * 1000)
