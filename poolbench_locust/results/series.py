"""What each second of the run added, per request name and in total: the blocks that
`poolbench-compare` resamples to tell a real change from run-to-run noise.

The history (metrics/history.py) keeps the pooling table as it stood each second: running totals
and percentiles since the start, good for curves, useless for noise. A block here is the
difference between two snapshots a second apart: requests, failures and the sum of their times
(Locust's own stats), tokens, sequences and bytes (the pooling stats), and the histograms of the
times (Locust's bucketing). The blocks of a run add up exactly to its totals: the last one is taken
when the document is written, after the workers' last reports.

On a master a block holds what the workers' reports brought in that second (each worker reports
every 3 s), not what was sent in it: compare merges seconds into blocks of several seconds before
resampling. Every second is kept for the first hour; memory stays the same however long the run,
not only bounded: past MAX_BLOCKS blocks (an hour), each new second makes two neighbouring blocks of
the narrowest width merge (metrics/history.py's `Tiers`), so exactly MAX_BLOCKS are held per name.
`final` hands out the blocks at one width, the widest kept (`width`, written as `series_seconds` in
the JSON result): 1 s up to an hour, 2 s up to two, 4 s up to four, ..., 32 s for a day. The blocks
are on disk (`spool.SpooledList`), 12 bytes of memory each.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import gevent
from locust.env import Environment
from locust.stats import StatsEntry

from poolbench_locust.metrics.collector import AGGREGATED, Entry, PoolingStats
from poolbench_locust.metrics.histogram import locust_counts
from poolbench_locust.metrics.history import Tiers
from poolbench_locust.spool import SpooledList
from poolbench_locust.store import Slot

MAX_BLOCKS = 3600
"""An hour at one block a second; a longer run holds exactly this many, each covering more seconds. A
block's histograms weigh some kB: held in memory at 1 s for an hour, they would grow a process by
~10 kB a second per name, so they are held on disk."""
SAMPLE_INTERVAL_S = 1.0

Block = dict[str, Any]
"""{"time": epoch seconds at its start, "seconds": its width, "requests", "failures", "e2e_sum_ms",
"input_tokens", "sequences", "bytes", "sent_bytes", "vectors", "timings": {name: {bucketed ms (as text): count}}}."""

COUNTS = ("requests", "failures", "e2e_sum_ms", "input_tokens", "sequences", "bytes", "sent_bytes", "vectors")
LATER_COUNTS = frozenset(("sent_bytes", "vectors"))
"""Counts a result written before them (format_version 1 still) lacks: a merge of blocks that lack one lacks it too,
and the figures read from it are unknown, not 0."""


@dataclass
class _Snapshot:
    requests: int = 0
    failures: int = 0
    e2e_sum_ms: float = 0.0
    input_tokens: int = 0
    sequences: int = 0
    bytes: int = 0
    sent_bytes: int = 0
    vectors: int = 0
    timings: dict[str, dict[int, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, locust_entry: StatsEntry | None, pooling_entry: Entry | None) -> _Snapshot:
        snap = cls()
        if locust_entry is not None:
            snap.requests = locust_entry.num_requests
            snap.failures = locust_entry.num_failures
            snap.e2e_sum_ms = float(locust_entry.total_response_time)
            snap.timings["e2e"] = dict(locust_entry.response_times)
        if pooling_entry is not None:
            snap.input_tokens = pooling_entry.input_tokens
            snap.sequences = pooling_entry.sequences
            snap.bytes = pooling_entry.bytes
            snap.sent_bytes = pooling_entry.sent_bytes
            snap.vectors = pooling_entry.vectors
            for key, histogram in pooling_entry.timings.items():
                if key != "e2e" and histogram.n:  # e2e is Locust's own, of every request of the name
                    snap.timings[key] = locust_counts(
                        histogram
                    )  # {ms: count}, as the schema and Locust's percentiles read it
        return snap

    def minus(self, before: _Snapshot, start: float, seconds: float) -> Block:
        timings: dict[str, dict[int, int]] = {}
        for key, counts in self.timings.items():
            old = before.timings.get(key, {})
            # Int keys while held (Locust's buckets under 256 ms are Python's shared small ints, where a
            # text key would be one more object per bucket per block); text in the document.
            delta = {b: n - old.get(b, 0) for b, n in counts.items() if n - old.get(b, 0) > 0}
            if delta:
                timings[key] = delta
        block: Block = {"time": round(start, 3), "seconds": round(seconds, 3)}
        for name in COUNTS:
            block[name] = getattr(self, name) - getattr(before, name)
        block["e2e_sum_ms"] = round(block["e2e_sum_ms"], 3)
        block["timings"] = timings
        return block


def merge_blocks(blocks: list[Block]) -> Block:
    """One block covering all of `blocks` (consecutive): counts and histograms added up."""
    merged: Block = {"time": blocks[0]["time"], "seconds": round(sum(b["seconds"] for b in blocks), 3)}
    for name in COUNTS:
        if name not in LATER_COUNTS or all(name in b for b in blocks):
            merged[name] = sum(b[name] for b in blocks)
    timings: dict[str, dict[str, int]] = {}
    for block in blocks:
        for key, counts in block["timings"].items():
            into = timings.setdefault(key, {})
            for bucket, n in counts.items():
                into[bucket] = into.get(bucket, 0) + n
    merged["timings"] = timings
    return merged


def _as_text(block: Block) -> Block:
    """The block as the document has it: bucket keys as text (JSON's object keys are text anyway)."""
    timings = {key: {str(b): n for b, n in counts.items()} for key, counts in block["timings"].items()}
    return {**block, "timings": timings}


def _empty(block: Block) -> bool:
    """A block of no time and nothing in it: the last sample, when nothing came after the one before."""
    return not block["seconds"] and not block["timings"] and not any(block.get(name) for name in COUNTS)


Key = tuple[str, str]
"""(method, name) as Locust keys its entries; the total is ("", "Aggregated")."""
TOTAL: Key = ("", AGGREGATED)


class Series:
    """The blocks of each name, one entry per span of `_tiers` (None before the name's first request)."""

    def __init__(self) -> None:
        self._kept: dict[Key, SpooledList] = {}
        self._tiers = Tiers(MAX_BLOCKS)
        self._last: dict[Key, _Snapshot] = {}
        self._last_time: float | None = None

    @property
    def width(self) -> float:
        """Seconds per block handed out: 1 until MAX_BLOCKS seconds, then doubling."""
        return self._tiers.widest * SAMPLE_INTERVAL_S

    def clear(self) -> None:
        for kept in self._kept.values():
            kept.clear()  # its file closed now, not when the collector finds it
        self._kept.clear()
        self._tiers.clear()
        self._last.clear()
        self._last_time = None

    def _snapshots(self, environment: Environment, stats: PoolingStats) -> dict[Key, _Snapshot]:
        locust_stats = environment.stats
        snaps: dict[Key, _Snapshot] = {TOTAL: _Snapshot.of(locust_stats.total, stats.total)}
        for (name, method), entry in list(locust_stats.entries.items()):
            snaps[(method, name)] = _Snapshot.of(entry, stats.entries.get(name))
        return snaps

    def sample(self, environment: Environment, stats: PoolingStats, now: float | None = None) -> None:
        """Add the block since the previous sample (the first one starts at the stats' start time)."""
        now = time.time() if now is None else now
        snaps = self._snapshots(environment, stats)
        start = self._last_time if self._last_time is not None else stats.start_time
        spans = len(self._tiers)
        for key, snap in snaps.items():
            block = snap.minus(self._last.get(key, _Snapshot()), start, max(now - start, 0.0))
            if key not in self._kept:
                self._kept[key] = SpooledList(MAX_BLOCKS + 1)  # room for the hour (one more as two merge)
                for _ in range(spans):
                    self._kept[key].append(None)
            self._kept[key].append(block)
        for key, kept in self._kept.items():
            if key not in snaps:  # every list holds one entry per span
                kept.append(None)
        self._last, self._last_time = snaps, now
        merged = self._tiers.add()
        if merged is not None:
            for kept in self._kept.values():
                first, second = kept[merged], kept[merged + 1]
                kept[merged] = merge_blocks([first, second]) if first and second else first or second
                del kept[merged + 1]

    def final(self, environment: Environment, stats: PoolingStats) -> dict[Key, list[Block]]:
        """Every block, the part since the last sample included, `width` seconds each: they add up to
        the totals. The last one ends at the last request, not now: the seconds of stopping would read
        as an idle server."""
        last = stats.total.last
        end = max(last, self._last_time) if last is not None and self._last_time is not None else None
        self.sample(environment, stats, end)
        groups = self._tiers.groups()
        out: dict[Key, list[Block]] = {}
        for key, kept in self._kept.items():
            blocks = [[b for i in group if (b := kept[i]) is not None and not _empty(b)] for group in groups]
            out[key] = [_as_text(merge_blocks(parts) if len(parts) > 1 else parts[0]) for parts in blocks if parts]
        return out


_SERIES = Slot("series", Series)


def series_of(environment: Environment) -> Series:
    return _SERIES.of(environment)


def sample_blocks_while_running(environment: Environment, stats: PoolingStats) -> None:
    """Run forever in a greenlet on the master (or the only process): a block a second while users run."""
    series = series_of(environment)
    while True:
        gevent.sleep(SAMPLE_INTERVAL_S)
        runner = environment.runner
        if runner is not None and runner.state in ("spawning", "running", "stopping"):
            series.sample(environment, stats)
