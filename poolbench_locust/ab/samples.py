"""What an A/B run keeps of each request to compare the two hosts: per second of the run (each host's
requests, failures, input tokens, and its successful requests' E2E and TTFB), or, with --ab-paired, per
pair (one input sent to both at once). Bounded: past MAX_KEPT successes a host's times are thinned
evenly (every second one dropped, then every second of the rest...), which keeps their distribution."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

SIDES = ("A", "B")
MAX_KEPT = 10_000
"""Successful requests' times kept a host (alternating) or pairs kept (paired): the bootstrap sorts this
many values per resample."""
MAX_PENDING = 10_000
"""Pairs with one answer of the two, waiting for the other: the oldest is dropped past this."""


@dataclass
class Side:
    """One host's figures in one block (a second, or a pair)."""

    requests: int = 0
    failures: int = 0
    input_tokens: int = 0
    e2e: list[float] = field(default_factory=list)
    ttfb: list[float] = field(default_factory=list)


@dataclass
class Block:
    a: Side = field(default_factory=Side)
    b: Side = field(default_factory=Side)

    def side(self, name: str) -> Side:
        return self.a if name == "A" else self.b


def _number(value: Any, bound: float) -> float | None:
    """A time or count from an event: a finite number in [0, bound], else None (the engine's own, but checked)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= bound:
        return None
    return float(value)


class Samples:
    """The run's blocks. `add` is called by the request listener; `blocks()` gives what the bootstrap resamples."""

    def __init__(self, paired: bool = False) -> None:
        self.paired = paired
        self.seconds: dict[int, Block] = {}
        self.pairs: list[Block] = []
        self._pending: OrderedDict[int, tuple[str, Side]] = OrderedDict()
        self.stride = 1
        """Every `stride`-th success (pair) is kept: doubled each time the store is full."""
        self._seen = 0
        self._kept = 0
        self.first = self.last = None  # type: float | None
        """The first and last request's start (alternating): the time the run's blocks span."""

    def add(self, side: str, failed: bool, e2e: Any, context: Any, start: Any) -> None:
        ttfb = _number(context.get("ttfb_ms"), 3.6e6) if isinstance(context, dict) else None
        tokens = context.get("input_tokens") if isinstance(context, dict) else None
        one = Side(1, int(failed), int(tokens) if isinstance(tokens, int) and 0 <= tokens < 2**40 else 0)
        took = _number(e2e, 3.6e6)
        if not failed and took is not None:
            one.e2e.append(took)
            if ttfb is not None:
                one.ttfb.append(ttfb)
        if self.paired:
            pair = context.get("ab_pair") if isinstance(context, dict) else None
            if isinstance(pair, int):
                self._pair(pair, side, one)
            return
        when = _number(start, 1e11)
        if when is None:
            return
        self.first = when if self.first is None else min(self.first, when)
        self.last = when if self.last is None else max(self.last, when)
        block = self.seconds.get(int(when))
        if block is None:
            block = self.seconds[int(when)] = Block()
        into = block.side(side)
        into.requests += 1
        into.failures += one.failures
        into.input_tokens += one.input_tokens
        if one.e2e and self._keep():
            into.e2e += one.e2e
            into.ttfb += one.ttfb

    def _keep(self) -> bool:
        self._seen += 1
        if self._seen % self.stride:
            return False
        self._kept += 1
        if self._kept > MAX_KEPT:
            self._thin()
        return True

    def _thin(self) -> None:
        """Drop every second value kept, and keep every second one from now on."""
        self.stride *= 2
        if self.paired:
            self.pairs = self.pairs[::2]
            self._kept = len(self.pairs)
            return
        self._kept = 0
        for block in self.seconds.values():
            for s in (block.a, block.b):
                s.e2e, s.ttfb = s.e2e[::2], s.ttfb[::2]
                self._kept += len(s.e2e)

    def _pair(self, pair: int, side: str, one: Side) -> None:
        other = self._pending.pop(pair, None)
        if other is None or other[0] == side:
            self._pending[pair] = (side, one)
            while len(self._pending) > MAX_PENDING:
                self._pending.popitem(last=False)
            return
        self.merge_pair(Block(one, other[1]) if side == "A" else Block(other[1], one))

    def blocks(self) -> list[Block]:
        """Each second's block in order (a second with no request of either host still counts), or the pairs."""
        if self.paired:
            return list(self.pairs)
        if not self.seconds:
            return []
        first, last = min(self.seconds), max(self.seconds)
        return [self.seconds.get(s) or Block() for s in range(first, last + 1)]

    def span(self) -> float | None:
        """Seconds from the first request's start to the last's (alternating), None for pairs or none yet."""
        if self.paired or self.first is None or self.last is None:
            return None
        return max(self.last - self.first, 1.0)

    def clear(self) -> None:
        self.__init__(self.paired)  # type: ignore[misc]

    def take(self) -> tuple[dict[int, Block], list[Block], float | None, float | None]:
        """What was kept since the last take (a worker's report: its seconds, its pairs and the first and last
        start), and start again from none; a pair still waiting for its other answer stays."""
        taken = self.seconds, self.pairs, self.first, self.last
        pending = self._pending
        self.clear()
        self._pending = pending
        return taken

    def merge_second(self, second: int, block: Block, first: float, last: float) -> None:
        """A worker's second (checked by ab_workers.py), added to this one's: its counts whole, its times
        through the same thinning as this process's own."""
        self.first = first if self.first is None else min(self.first, first)
        self.last = last if self.last is None else max(self.last, last)
        mine = self.seconds.get(second)
        if mine is None:
            mine = self.seconds[second] = Block()
        for name in SIDES:
            into, given = mine.side(name), block.side(name)
            into.requests += given.requests
            into.failures += given.failures
            into.input_tokens += given.input_tokens
            # a request's TTFB is kept where its E2E is (a request without headers has none: the lists are
            # in step but for those)
            kept = [self._keep() for _ in given.e2e]
            into.e2e += [v for v, k in zip(given.e2e, kept, strict=True) if k]
            into.ttfb += [v for v, k in zip(given.ttfb, kept, strict=False) if k]

    def merge_pair(self, block: Block) -> None:
        """A worker's pair (checked by ab_workers.py), kept as this process's own are."""
        self._seen += 1
        if self._seen % self.stride:
            return
        self.pairs.append(block)
        self._kept += 1
        if self._kept > MAX_KEPT:
            self._thin()
