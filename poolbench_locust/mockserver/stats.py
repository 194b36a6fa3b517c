"""Counters of what the mock served, for tests that check a client's sums exactly.

Every update is plain Python with no gevent switch inside, so under gevent (one thread) it is
atomic without a lock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

from poolbench_locust.mockserver.image_inputs import DistinctImages


@dataclass(slots=True)
class Counters:
    requests: int = 0
    ok: int = 0
    prompt_tokens: int = 0
    sequences: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    """Request bodies of every pooling request received, for the client's Sent Bytes."""


@dataclass(slots=True)
class Drift:
    """Answers served wrong on purpose (faults.py's --drift-above, --cache-drift, --flip-above): what a client's
    consistency check should find, counted by the server that made them."""

    answers: int = 0
    """Answers served with at least one wrong value: a drifted vector (either cause) or a flipped ranking."""
    drifted_vectors: int = 0
    """Vectors drifted by --drift-above (every vector of an answer made with more than N in flight)."""
    cache_drifted_vectors: int = 0
    """Vectors drifted by --cache-drift (inputs answered before)."""
    flipped_rankings: int = 0
    """Rankings whose two best scores --flip-above swapped."""


TIMINGS_KEPT = 100_000
"""Server-side times kept for /mock/timings: enough for a benchmark, bounded for a soak."""


class Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._total = Counters()
        self._routes: dict[str, Counters] = {}
        self._faults: dict[str, int] = {}
        self._drift = Drift()
        self._times_ms: deque[float | None] = deque(maxlen=TIMINGS_KEPT)
        self._images = DistinctImages()

    def _route(self, route: str) -> Counters:
        if (counters := self._routes.get(route)) is None:
            counters = self._routes[route] = Counters()
        return counters

    def requested(self, route: str, body: bytes) -> None:
        for counters in (self._total, self._route(route)):
            counters.requests += 1
            counters.bytes_received += len(body)
        self._images.add(body)

    def faulted(self, fault: str) -> None:
        self._faults[fault] = self._faults.get(fault, 0) + 1

    def served(self, route: str, tokens: int, sequences: int, body_bytes: int) -> None:
        """A 2xx answer without a fault whose last byte was written."""
        for counters in (self._total, self._route(route)):
            counters.ok += 1
            counters.prompt_tokens += tokens
            counters.sequences += sequences
            counters.bytes_sent += body_bytes

    def drifted(self, vectors: int, cache_vectors: int, rankings: int) -> None:
        """A served answer (counted by `served`) that held wrong values: so many of each."""
        drift = self._drift
        drift.answers += 1
        drift.drifted_vectors += vectors
        drift.cache_drifted_vectors += cache_vectors
        drift.flipped_rankings += rankings

    def timed(self, arrived: float, done: float | None) -> None:
        """A pooling request's time on the server: from its last byte read to its answer's last byte
        written (None: the answer was not completed)."""
        self._times_ms.append(None if done is None else (done - arrived) * 1000)

    def times_ms(self) -> list[float | None]:
        """The server-side times of the pooling requests answered since the last reset, in order."""
        return list(self._times_ms)

    def snapshot(self) -> dict[str, Any]:
        return {
            **asdict(self._total),
            **self._images.snapshot(),
            "faults": dict(self._faults),
            "drift": asdict(self._drift),
            "routes": {route: asdict(counters) for route, counters in self._routes.items()},
        }
