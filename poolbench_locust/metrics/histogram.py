"""A log-linear (HDR-style) histogram of milliseconds: 0.05 % resolution, bounded, mergeable.

Each power of two is cut into SUB_BUCKETS equal steps, as HdrHistogram does, so a bucket is never
wider than 1/1024 of its lower edge and a percentile (reported as its bucket's middle) is within
1/2048 (0.049 %) of the true sample. Values are clamped into [LOWEST_MS, HIGHEST_MS]: anything
below 1 µs (0, a negative or a NaN from a confused server) counts as 0, anything above an hour as
an hour. So a histogram holds at most MAX_BUCKETS buckets, however long the run.

The buckets live in a dict {key: count} that holds only the buckets seen, so a worker's report
(msgpack: small ints for key steps and counts) stays small, and merging is adding counts. The mean
and standard deviation (`Moments`, kept for E2E only: it costs a tenth of a µs a value) come from
the values themselves, not from the buckets, with Welford's running mean and sum of squared
deviations, merged with Chan's formula: a sum of squares would cancel out the spread of 175,007 ms
requests that differ by a fraction of a millisecond.

Why not the `hdrhistogram` package: it records integers into a dense array (23,552 counters,
188 kB per histogram at 3 significant digits for 1 µs..1 h; a pooling entry keeps six) and its
record_value took 1.2 µs a call here against 0.34 µs for this `add` (the same loop, Python 3.11),
on the request hot path.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from itertools import accumulate
from typing import Any

from locust.stats import bucket_response_time

SUB_BUCKET_BITS = 10
SUB_BUCKETS = 1 << SUB_BUCKET_BITS
"""Linear steps per power of two: 1024, a relative bucket width of at most 1/1024 (0.098 %)."""
LOWEST_MS = 0.001
"""1 µs: below it, a value counts as 0 (the clock's own resolution is coarser)."""
HIGHEST_MS = 3_600_000.0
"""One hour: longer values count as one hour (a request deadline is far shorter)."""
_SCALE = 2 * SUB_BUCKETS
_LOWEST_EXPONENT = math.frexp(LOWEST_MS)[1]
ZERO_KEY = (_LOWEST_EXPONENT << SUB_BUCKET_BITS) + SUB_BUCKETS - 1
"""The key of the bucket of 0 (and of everything below LOWEST_MS): just below the lowest real key."""


def bucket_key(ms: float) -> int:
    """The bucket of a value (clamped into [LOWEST_MS, HIGHEST_MS], or 0)."""
    if not ms >= LOWEST_MS:  # also NaN
        return ZERO_KEY
    mantissa, exponent = math.frexp(min(ms, HIGHEST_MS))  # ms = mantissa * 2**exponent, 0.5 <= mantissa < 1
    return (exponent << SUB_BUCKET_BITS) + int(mantissa * _SCALE)


def keyed(ms: float, frexp: Any = math.frexp) -> tuple[int, float]:
    """The bucket of a value and the value as a histogram's max takes it (clamped; 0.0 below LOWEST_MS,
    which no max keeps): what `Histogram.add` computes, once for every histogram a value goes into
    (the pooling stats log a request into its name's entry and into the total). `frexp` is a default
    argument to make it a local: this runs for every timing of every request."""
    if ms >= LOWEST_MS:
        if ms > HIGHEST_MS:
            ms = HIGHEST_MS
        mantissa, exponent = frexp(ms)
        return (exponent << SUB_BUCKET_BITS) + int(mantissa * _SCALE), ms
    return ZERO_KEY, 0.0  # 0, below 1 µs, negative or NaN


MAX_BUCKETS = bucket_key(HIGHEST_MS) - bucket_key(LOWEST_MS) + 2
"""32,455: the most buckets a histogram can hold, whatever it is fed (the keys between the lowest and
the highest are consecutive, and the bucket of 0 is one more)."""


def bucket_value(key: int) -> float:
    """The middle of a bucket: the value a percentile in it is reported as."""
    if key <= ZERO_KEY:
        return 0.0
    # key = exponent * 1024 + step, with step in [1024, 2048): the bucket is [step, step + 1) / 2048 * 2**exponent
    exponent, step = (key >> SUB_BUCKET_BITS) - 1, (key & (SUB_BUCKETS - 1)) + SUB_BUCKETS
    return math.ldexp((step + 0.5) / _SCALE, exponent)


class Histogram:
    """Milliseconds: counts per log-linear bucket, the count and the max."""

    __slots__ = ("_cumulative", "_keys", "counts", "max", "n")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.n = 0
        self.max = 0.0
        self._keys: list[int] = []
        self._cumulative: list[int] = []
        """Sorted keys and running counts, rebuilt when n has moved since: for percentiles, off the hot path."""

    def add(self, ms: float) -> None:
        # bucket_key inlined: this runs for every timing of every request.
        if ms >= LOWEST_MS:
            if ms > HIGHEST_MS:
                ms = HIGHEST_MS
            mantissa, exponent = math.frexp(ms)
            key = (exponent << SUB_BUCKET_BITS) + int(mantissa * _SCALE)
            if ms > self.max:
                self.max = ms
        else:  # 0, below 1 µs, negative or NaN
            key = ZERO_KEY
        counts = self.counts
        counts[key] = counts.get(key, 0) + 1
        self.n += 1

    def add_keyed(self, key: int, ms: float) -> None:
        """`add` of a value already bucketed by `keyed` (its key and its clamped value)."""
        counts = self.counts
        counts[key] = counts.get(key, 0) + 1
        self.n += 1
        if ms > self.max:
            self.max = ms

    def _ranks(self) -> tuple[list[int], list[int]]:
        if not self._cumulative or self._cumulative[-1] != self.n:
            self._keys = sorted(self.counts)
            self._cumulative = list(accumulate(self.counts[k] for k in self._keys))
        return self._keys, self._cumulative

    def percentile(self, fraction: float) -> float | None:
        """The nearest-rank percentile: the ceil(fraction * n)-th smallest value, to 0.05 %; None if empty."""
        if not self.n:
            return None
        keys, cumulative = self._ranks()
        rank = min(self.n, max(1, math.ceil(fraction * self.n - 1e-9)))
        return min(bucket_value(keys[bisect_left(cumulative, rank)]), self.max)

    def merge(self, data: dict[str, Any]) -> None:
        counts = self.counts
        key = 0
        for step, count in zip(data["keys"], data["counts"], strict=True):
            key += step
            counts[key] = counts.get(key, 0) + count
        self.n += data["n"]
        self.max = max(self.max, data["max"])

    def dump(self) -> dict[str, Any]:
        """What a worker ships, for msgpack: the sorted keys as steps from the one before (mostly one
        byte each, where {key: count} took three for the key) and their counts."""
        keys = sorted(self.counts)
        return {"keys": _steps(keys), "counts": [self.counts[k] for k in keys], "n": self.n, "max": self.max}


class Moments:
    """The count, mean and sum of squared deviations (Welford's M2) of milliseconds, clamped into
    [0, HIGHEST_MS] as the histogram clamps them: the exact mean and standard deviation."""

    __slots__ = ("m2", "mean_ms", "n")

    def __init__(self) -> None:
        self.n = 0
        self.mean_ms = 0.0
        self.m2 = 0.0

    def add(self, ms: float) -> None:
        if not ms >= 0.0:  # also NaN
            ms = 0.0
        elif ms > HIGHEST_MS:
            ms = HIGHEST_MS
        n = self.n = self.n + 1
        delta = ms - self.mean_ms
        self.mean_ms += delta / n
        self.m2 += delta * (ms - self.mean_ms)

    def mean(self) -> float | None:
        return self.mean_ms if self.n else None

    def stddev(self) -> float | None:
        """The sample standard deviation (n - 1); None below two samples."""
        return math.sqrt(max(self.m2, 0.0) / (self.n - 1)) if self.n >= 2 else None

    def merge(self, data: dict[str, Any]) -> None:
        """Chan's formula for two sets' mean and M2 together."""
        n_other = data["n"]
        if not n_other:
            return
        n_mine, n = self.n, self.n + n_other
        delta = data["mean"] - self.mean_ms
        self.mean_ms += delta * n_other / n
        self.m2 += data["m2"] + delta * delta * n_mine * n_other / n
        self.n = n

    def dump(self) -> dict[str, Any]:
        return {"n": self.n, "mean": self.mean_ms, "m2": self.m2}


def difference(now: dict[str, Any], before: dict[str, Any] | None) -> dict[str, Any]:
    """The dump of the values added between two dumps of one histogram (`before` None: all of `now`):
    for a window of recent requests. Its max is `now`'s, the largest of the run so far."""
    if before is None:
        return now
    old = dict(zip(_keys_of(before), before["counts"], strict=True))
    keys, counts = [], []
    for key, count in zip(_keys_of(now), now["counts"], strict=True):
        if (added := count - old.get(key, 0)) > 0:
            keys.append(key)
            counts.append(added)
    return {"keys": _steps(keys), "counts": counts, "n": now["n"] - before["n"], "max": now["max"]}


def _steps(keys: list[int]) -> list[int]:
    """Sorted keys as each one less the one before (the first less 0): small numbers for msgpack."""
    return [b - a for a, b in zip([0, *keys], keys, strict=False)]


def _keys_of(dump: dict[str, Any]) -> list[int]:
    return list(accumulate(dump["keys"]))


def locust_counts(histogram: Histogram) -> dict[int, int]:
    """The histogram in Locust's own form, {ms rounded by Locust's bucket_response_time: count}, for
    what speaks that form (Locust's percentile function, files written in its bucketing): two
    significant digits again, so only where that is what the reader expects."""
    counts: dict[int, int] = {}
    for key, count in histogram.counts.items():
        ms = bucket_response_time(bucket_value(key))
        counts[ms] = counts.get(ms, 0) + count
    return counts
