"""How many of the answers that carry a reference input are compared with their reference
(docs/consistency.md): at most --consistency-rate of the requests sent, and at least one a second.

A comparison reads one input's values as Python floats and walks them: about 0.1 ms for a 384-dimension
vector, 0.3 ms for 1,024, 0.4 ms for a rerank of 64 documents (its scores read and their order compared). A
request of a batch costs the client far less per input (a 64 x 1,024 answer about 1.5 ms in all), so the
budget counts requests, not inputs: each compared request compares one input (or one whole rerank), and 1 %
of the requests is also at most 1 % of the inputs. Made for every request of a small pool that carries a
reference, the check added 42 % to the client's CPU per request (bench/client_cost.py, issue 41); counted
by inputs, 12 to 29 % on batches and reranks.

The budget is a token bucket kept only by the requests that carry a reference, so that every other request
costs nothing more: each such request adds the share of the requests it stands for (the pool's requests
per reference-carrying request), and the time since the last one adds one a second; a request is
compared while a whole token is there. The bucket keeps one token at most, so that a pause (between two
runs of the web UI, a quiet trace) saves up one comparison, not a burst.
"""

from __future__ import annotations

from time import monotonic

CAPACITY = 1.0
"""The most tokens kept after a request: one comparison saved up."""
PER_SECOND = 1.0
"""Comparisons a second the budget allows whatever the share: a slow run is compared too."""


class ComparisonBudget:
    """One plan's budget, shared by the users of its class in one process (gevent: no lock needed)."""

    __slots__ = ("_last", "_per_request", "_tokens")

    def __init__(self, share: float, requests_per_carrying: float) -> None:
        """`share`: --consistency-rate, in (0, 1]. `requests_per_carrying`: the requests sent for each one that
        carries a reference (the pool's requests over its reference-carrying ones), >= 1."""
        self._per_request = share * requests_per_carrying
        self._tokens = CAPACITY  # the first one is compared at once
        self._last: float | None = None

    def take(self) -> bool:
        """Called by each request that carries a reference, once it was answered well: whether to compare it."""
        now = monotonic()
        earned = self._per_request
        if self._last is not None:
            earned = max(earned, (now - self._last) * PER_SECOND)
        self._last = now
        tokens = self._tokens + earned
        taken = tokens >= 1.0
        self._tokens = min(CAPACITY, tokens - 1.0 if taken else tokens)
        return taken


class Always:
    """The budget of the reference requests themselves: each is answered to be kept."""

    __slots__ = ()

    def take(self) -> bool:
        return True


ALWAYS = Always()


def budget_for(share: float, pool_requests: int, carrying: float) -> ComparisonBudget:
    """The budget of a pool of `pool_requests` requests of which `carrying` carry a reference (per turn of the
    pool: a fraction where some are sent with one only now and then, workload/pool.py's FreshImages)."""
    return ComparisonBudget(share, max(1.0, pool_requests / max(1, carrying)))
