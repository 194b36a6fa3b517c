"""A server of known capacity for --find-capacity: SLOTS_N service slots, each request holding one for
SLOTS_SERVICE_MS, served first come first served (an M/D/N queue under Poisson arrivals: its capacity is
N / service time, and its waiting times are computed by `md_n_attainment_rate`).

Served in a process of its own (`python -m tests.support.hostile tests.support.slots_server:slots`), so
that its clock owes nothing to the client's gevent hub. Each POST gets a valid answer of its endpoint
(tests/support/recording_server.py's), after its slot's service time; GET /metrics answers vLLM's names
for what it counted (the prompt tokens, the requests waiting for a slot and those in one), so that
--server-metrics reads its queue; anything else is a 404."""

from __future__ import annotations

import heapq
import os
import random
import socket

import gevent
import orjson
from gevent.lock import Semaphore

from tests.support.hostile import read_request, response
from tests.support.recording_server import answer_for

SLOTS = int(os.environ.get("SLOTS_N", "4"))
SERVICE_S = float(os.environ.get("SLOTS_SERVICE_MS", "20")) / 1000
_slots = Semaphore(SLOTS)  # gevent's semaphore wakes its waiters in the order they came
counts = {"waiting": 0, "running": 0, "prompt_tokens": 0}


def metrics() -> bytes:
    return (
        f"vllm:prompt_tokens_total {counts['prompt_tokens']}\n"
        f"vllm:num_requests_waiting {counts['waiting']}\n"
        f"vllm:num_requests_running {counts['running']}\n"
    ).encode()


def slots(sock: socket.socket, _conn: int) -> None:
    while (request := read_request(sock)) is not None:
        head, body = request
        if head.startswith(b"GET /metrics"):
            sock.sendall(response(200, metrics(), content_type="text/plain; version=0.0.4"))
            continue
        if not head.startswith(b"POST"):
            sock.sendall(response(404, b"{}"))
            continue
        route = head.split(b" ", 2)[1].decode()
        doc = orjson.loads(body)
        counts["waiting"] += 1
        with _slots:
            counts["waiting"] -= 1
            counts["running"] += 1
            gevent.sleep(SERVICE_S)
            counts["running"] -= 1
        counts["prompt_tokens"] += sum(len(t.split()) for t in doc.get("input", []))
        sock.sendall(response(200, answer_for(route, doc)))


def md_n_attainment(rate: float, slots: int, service_ms: float, bound_ms: float, arrivals: int = 200_000) -> float:
    """The share of requests whose wait plus service is within `bound_ms` in an M/D/N queue at `rate`
    requests/s (simulated first come first served, a fixed seed: the same answer every time)."""
    rng = random.Random(1)
    free = [0.0] * slots  # when each slot is next free, ms
    now, within = 0.0, 0
    for _ in range(arrivals):
        now += rng.expovariate(rate / 1000.0)
        start = max(now, free[0])
        heapq.heapreplace(free, start + service_ms)
        within += start - now + service_ms <= bound_ms
    return within / arrivals


def md_n_attainment_rate(slots: int, service_ms: float, bound_ms: float, attainment: float) -> float:
    """The highest rate (requests/s, to 0.5 %) at which `attainment` of the requests finish within `bound_ms`."""
    low, high = 0.0, slots * 1000.0 / service_ms  # at capacity the queue never settles
    while high - low > 0.005 * high:
        mid = (low + high) / 2
        if md_n_attainment(mid, slots, service_ms, bound_ms) >= attainment:
            low = mid
        else:
            high = mid
    return low
