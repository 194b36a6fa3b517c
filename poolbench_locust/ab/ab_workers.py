"""--ab-host in a distributed run: each worker keeps its own requests by second (or pair) and ships what it kept
since its last report with Locust's report_to_master; the master adds every worker's into its own samples, which
its comparison reads, so that B against A is judged on every process's requests.

A worker's report is untrusted: every count, time and length is checked and bounded (no more seconds, pairs or
times than a report can hold, no failures beyond the requests, no more times than successful requests, times
within an hour), and a report that fails a check is refused whole, logged, never merged in part."""

from __future__ import annotations

import logging
import math
from typing import Any

from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner

from poolbench_locust.ab.ab_report import state_of
from poolbench_locust.ab.samples import MAX_KEPT, SIDES, Block, Samples, Side

logger = logging.getLogger("poolbench_locust")

REPORT_KEY = "poolbench_ab"
MAX_SECONDS = 3_600
"""Seconds a report may hold: a worker reports every few seconds, so an hour is far beyond any real one."""
MAX_TIMES = 4 * MAX_KEPT
"""Times (E2E and TTFB, both hosts) a report may hold: a worker keeps at most MAX_KEPT of its successes' E2E
(and as many TTFB) between two reports, for each of the two hosts' blocks."""
MAX_COUNT = 2**40
MAX_MS = 3.6e6
LATEST_SECOND = 1e11
"""A request's start, in seconds since the epoch: far beyond any clock's."""
_WIRE_KEYS = {"paired", "first", "last", "seconds", "pairs"}


def _side(side: Side) -> list[Any]:
    return [side.requests, side.failures, side.input_tokens, side.e2e, side.ttfb]


def to_wire(samples: Samples) -> dict[str, Any] | None:
    """What the worker kept since its last report, for msgpack; None when nothing."""
    seconds, pairs, first, last = samples.take()
    if not seconds and not pairs:
        return None
    return {
        "paired": samples.paired,
        "first": first,
        "last": last,
        "seconds": [[second, _side(block.a), _side(block.b)] for second, block in seconds.items()],
        "pairs": [[_side(block.a), _side(block.b)] for block in pairs],
    }


def _count(value: Any, what: str) -> int:
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise ValueError(f"{what} is not a count: {value!r:.60}")
    return value


def _time(value: Any, low: float, high: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ValueError(f"{what} is not a number in [{low:g}, {high:g}]: {value!r:.60}")
    return float(value)


def _times(value: Any, most: int, what: str) -> list[float]:
    if not isinstance(value, list) or len(value) > most:
        raise ValueError(f"{what} is not a list of at most {most} times")
    return [_time(v, 0.0, MAX_MS, what) for v in value]


def _side_of(data: Any, what: str) -> Side:
    if not isinstance(data, list) or len(data) != 5:
        raise ValueError(f"{what} is not [requests, failures, input tokens, E2E times, TTFB times]")
    requests, failures, tokens = (
        _count(data[i], f"{what}'s {n}") for i, n in enumerate(("requests", "failures", "tokens"))
    )
    if failures > requests:
        raise ValueError(f"{what} has more failures ({failures}) than requests ({requests})")
    e2e = _times(data[3], requests - failures, f"{what}'s E2E times")
    ttfb = _times(data[4], len(e2e), f"{what}'s TTFB times")
    return Side(requests, failures, tokens, e2e, ttfb)


def from_wire(data: Any, paired: bool) -> tuple[list[tuple[int, Block]], list[Block], float, float]:
    """A worker's report, every type and range checked: its seconds and pairs, the first and last start.
    ValueError, saying what was wrong, on anything amiss."""
    if not isinstance(data, dict) or set(data) != _WIRE_KEYS:
        raise ValueError(f"an A/B report is a mapping of {sorted(_WIRE_KEYS)}")
    if data["paired"] is not paired:
        raise ValueError("an A/B report of another mode than the master's (--ab-paired)")
    seconds, pairs = data["seconds"], data["pairs"]
    if not isinstance(seconds, list) or not isinstance(pairs, list):
        raise ValueError("an A/B report's seconds and pairs are lists")
    if len(seconds) > MAX_SECONDS or len(pairs) > MAX_KEPT or (paired and seconds) or (not paired and pairs):
        raise ValueError(f"an A/B report holds {len(seconds)} seconds and {len(pairs)} pairs")
    first = last = math.nan
    if seconds:
        first = _time(data["first"], 0.0, LATEST_SECOND, "the first start")
        last = _time(data["last"], first, LATEST_SECOND, "the last start")
    blocks: list[tuple[int, Block]] = []
    for entry in seconds:
        if not isinstance(entry, list) or len(entry) != 3:
            raise ValueError("an A/B report's second is [second, A, B]")
        second = _count(entry[0], "a second")
        if not int(first) <= second <= int(last):
            raise ValueError(f"the second {second} is outside the report's starts")
        blocks.append((second, Block(_side_of(entry[1], "A"), _side_of(entry[2], "B"))))
    matched = []
    for entry in pairs:
        if not isinstance(entry, list) or len(entry) != 2:
            raise ValueError("an A/B report's pair is [A, B]")
        pair = Block(_side_of(entry[0], "A"), _side_of(entry[1], "B"))
        if pair.a.requests != 1 or pair.b.requests != 1:
            raise ValueError("a pair is one request of each host")
        matched.append(pair)
    held = sum(len(b.side(s).e2e) + len(b.side(s).ttfb) for _, b in blocks for s in SIDES)
    held += sum(len(b.side(s).e2e) + len(b.side(s).ttfb) for b in matched for s in SIDES)
    if held > MAX_TIMES:
        raise ValueError(f"an A/B report holds {held:,} times (at most {MAX_TIMES:,})")
    return blocks, matched, first, last


def merge(samples: Samples, client_id: str, data: Any) -> bool:
    """A worker's report added into the master's samples, whole, or refused whole (logged): whether it was."""
    try:
        blocks, pairs, first, last = from_wire(data, samples.paired)
    except ValueError as e:
        logger.error("A/B: worker %.60s's report refused: %s", client_id, e)
        return False
    for second, block in blocks:
        samples.merge_second(second, block, first, last)
    for pair in pairs:
        samples.merge_pair(pair)
    return True


def _on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner):

        @environment.events.report_to_master.add_listener
        def report(client_id: str, data: dict[str, Any], **_: Any) -> None:
            state = state_of(environment)
            if state.listening and (wire := to_wire(state.samples)) is not None:
                data[REPORT_KEY] = wire

    elif isinstance(runner, MasterRunner):

        @environment.events.worker_report.add_listener
        def merge_report(client_id: str, data: dict[str, Any], **_: Any) -> None:
            state = state_of(environment)
            if REPORT_KEY in data and state.listening:
                merge(state.samples, client_id, data[REPORT_KEY])


def setup(events: Events) -> None:
    events.init.add_listener(_on_init)
