"""How many of the answers that carry a reference input are compared with their reference
(docs/consistency.md): at most --consistency-rate of the inputs sent, and at least one a second.

A comparison reads an answer's values as Python floats and walks them (about 0.1 ms for a 384-dimension
vector); made for every request of a small pool that carries a reference, it added 42 % to the client's
CPU per request (bench/client_cost.py, issue 41). Sampled, its cost is the share's: 1 % of inputs by
default. The budget is a token bucket kept only by the requests that carry a reference, so that every other
request costs nothing more: each such request adds the share of the inputs it stands for (the pool's
inputs per reference-carrying request), and the time since the last one adds one a second; a request is
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

    def __init__(self, share: float, inputs_per_request: float) -> None:
        """`share`: --consistency-rate, in (0, 1]. `inputs_per_request`: the inputs sent for each request that
        carries a reference (the pool's inputs over its reference-carrying requests), >= 1."""
        self._per_request = share * inputs_per_request
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


def budget_for(share: float, pool_inputs: int, carrying: float) -> ComparisonBudget:
    """The budget of a pool of `pool_inputs` inputs of which `carrying` requests carry a reference (per turn of
    the pool: a fraction where some are sent with one only now and then, workload/pool.py's FreshImages)."""
    return ComparisonBudget(share, max(1.0, pool_inputs / max(1, carrying)))
