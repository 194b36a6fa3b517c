"""Each prepared input's token count, as the client counted it while preparing the pool, kept for the start
check that compares them with the server's own length limit (serverlimits/limits_check.py): vLLM refuses
(400) a whole request holding one input above the model's `max_model_len` unless asked to truncate, TEI one
above its `max_input_length` when it does not truncate.

Kept only for a class whose server says such a limit and whose run does not ask it to truncate
(`lengths_for`); every other pool keeps nothing more. What is kept is two tallies by length (how many inputs
have each length, how many requests have each longest input), so its size is bounded by the distinct
lengths, not by the pool: a pool of 10,000 requests of 32 inputs each keeps no more than one of 32.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from poolbench_locust.endpoints.spec import Endpoint
from poolbench_locust.options import Settings

LENGTH_LIMITED = frozenset({"vllm", "tei"})
"""The servers that refuse an input above a length they say before the run (serverlimits/ reads it)."""
CUTS = ("end", "start")
"""The --truncate values that have the server cut a long input instead of refusing it."""


class Above(NamedTuple):
    """What of the pool is above a limit: its inputs, the requests that hold one, and the longest input."""

    inputs: int
    requests: int
    longest: int


@dataclass
class InputLengths:
    """The pool's inputs by their token count, and its requests by their longest input's."""

    inputs: Counter[int] = field(default_factory=Counter)
    requests: Counter[int] = field(default_factory=Counter)

    def add(self, counts: Iterable[int]) -> None:
        """One request's inputs, each one's count (a pair: its query's and its document's added)."""
        counts = tuple(counts)
        if counts:  # a request of images alone has no text to count
            self.inputs.update(counts)
            self.requests[max(counts)] += 1

    @property
    def input_count(self) -> int:
        return self.inputs.total()

    @property
    def request_count(self) -> int:
        return self.requests.total()

    @property
    def longest(self) -> int:
        return max(self.inputs, default=0)

    def above(self, limit: int) -> Above:
        """The inputs longer than `limit` tokens, and the requests that hold at least one."""
        return Above(
            sum(n for length, n in self.inputs.items() if length > limit),
            sum(n for length, n in self.requests.items() if length > limit),
            self.longest,
        )


def lengths_for(endpoint: Endpoint, settings: Settings) -> InputLengths | None:
    """An empty tally for a pool whose inputs' lengths the start check compares with the server's limit,
    or None: the server says no limit, or the run has it cut long inputs (--truncate end/start)."""
    if endpoint.server in LENGTH_LIMITED and settings.truncate not in CUTS:
        return InputLengths()
    return None
