"""A log-linear (HDR-style) histogram of milliseconds: 0.05 % resolution, bounded, mergeable.

Each power of two is cut into SUB_BUCKETS equal steps, as HdrHistogram does, so a bucket is never
wider than 1/1024 of its lower edge and a percentile (reported as its bucket's middle) is within
1/2048 (0.049 %) of the true sample. Values are clamped into [LOWEST_MS, HIGHEST_MS]: anything
below 1 µs (0, a negative or a NaN from a confused server) counts as 0, anything above an hour as
an hour. So a histogram holds at most MAX_BUCKETS buckets, however long the run.

The counts live in dense rows, one per power of two a value has landed in (`Histogram`), so the
memory of a histogram is made once and does not grow as new buckets are hit; a worker's report
holds only the buckets hit (msgpack: small ints for key steps and counts), and merging is adding
counts. The mean
and standard deviation (`Moments`, kept for E2E only: it costs a tenth of a µs a value) come from
the values themselves, not from the buckets, with Welford's running mean and sum of squared
deviations, merged with Chan's formula: a sum of squares would cancel out the spread of 175,007 ms
requests that differ by a fraction of a millisecond.

Why not the `hdrhistogram` package: it records integers into one dense array over the whole range
(23,552 counters, 188 kB per histogram at 3 significant digits for 1 µs..1 h, where the rows here
are made only for the powers of two a run's timings span: 8 kB each, a handful per histogram; a
pooling entry keeps six) and its record_value took 1.2 µs a call here against 0.34 µs for this
`add` (the same loop, Python 3.11), on the request hot path.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from itertools import accumulate, compress
from operator import sub
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
HIGHEST_KEY = bucket_key(HIGHEST_MS)
FIRST_ROW = ZERO_KEY >> SUB_BUCKET_BITS
"""The row (power of two) of the bucket of 0: -9, just below the lowest real value's."""
LAST_ROW = HIGHEST_KEY >> SUB_BUCKET_BITS
ROWS = LAST_ROW - FIRST_ROW + 1
"""33: the rows of SUB_BUCKETS counters a histogram can make (264 kB if every one were made)."""
_COLUMN = SUB_BUCKETS - 1
_EMPTY_ROW = bytes(8 * SUB_BUCKETS)
assert (SUB_BUCKET_BITS, _COLUMN) == (10, 1023), "Histogram.add and add_keyed spell these out"


def bucket_value(key: int) -> float:
    """The middle of a bucket: the value a percentile in it is reported as."""
    if key <= ZERO_KEY:
        return 0.0
    # key = exponent * 1024 + step, with step in [1024, 2048): the bucket is [step, step + 1) / 2048 * 2**exponent
    exponent, step = (key >> SUB_BUCKET_BITS) - 1, (key & (SUB_BUCKETS - 1)) + SUB_BUCKETS
    return math.ldexp((step + 0.5) / _SCALE, exponent)


class Histogram:
    """Milliseconds: counts per log-linear bucket, the count and the max.

    The counts are dense: one array of SUB_BUCKETS 8-byte counters (8 kB) for each power of two a
    value has landed in (a row), made the first time one does, at most ROWS of them. So a histogram's
    memory is set by the span of its values, not by how many distinct buckets they have hit: it
    stops growing once its powers of two are seen (within seconds), where a dict of the buckets seen
    grew for as long as new timings turned up (most of what a soak still grew by after ten minutes).
    A bucket's key is `row << SUB_BUCKET_BITS | column`, and `_rows[row]` is its row: the rows of
    values below 1 ms are negative, and a list's negative indexes reach them from its end (ROWS slots
    hold rows FIRST_ROW..LAST_ROW without overlap), so the hot path indexes with the key's row itself.
    """

    __slots__ = ("_rows", "_totals", "max", "n")

    def __init__(self) -> None:
        self._rows: list[array[int] | None] = [None] * ROWS
        self.n = 0
        self.max = 0.0
        self._totals: tuple[int, list[tuple[int, array[int], int]]] = (0, [])
        """(n, [(row, its counts, the running count up to and including it), ...] in key order), rebuilt
        when n has moved since: for percentiles, off the hot path."""

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
        row = self._rows[key >> 10]
        if row is None:
            row = self._new_row(key)
        row[key & 1023] += 1
        self.n += 1

    def add_keyed(self, key: int, ms: float) -> None:
        """`add` of a value already bucketed by `keyed` (its key and its clamped value)."""
        row = self._rows[key >> 10]  # SUB_BUCKET_BITS and _COLUMN as literals: no global lookup per value
        if row is None:
            row = self._new_row(key)
        row[key & 1023] += 1
        self.n += 1
        if ms > self.max:
            self.max = ms

    def _new_row(self, key: int) -> array[int]:
        row = self._rows[key >> SUB_BUCKET_BITS] = array("q", _EMPTY_ROW)
        return row

    def rows(self) -> list[tuple[int, array[int]]]:
        """(row, its SUB_BUCKETS counts) of each row made, in key order (a count's key: row << SUB_BUCKET_BITS
        plus its index): for readers that walk the buckets (the Prometheus exporter). Not to be changed."""
        rows = self._rows
        return [(r, row) for r in range(FIRST_ROW, LAST_ROW + 1) if (row := rows[r]) is not None]

    def totals(self) -> list[tuple[int, array[int], int]]:
        """Each row made, its counts and the running count up to and including it, in key order;
        remembered until n moves."""
        if self._totals[0] != self.n:
            running = 0
            out = []
            for r, row in self.rows():
                running += sum(row)
                out.append((r, row, running))
            self._totals = (self.n, out)
        return self._totals[1]

    def items(self) -> list[tuple[int, int]]:
        """(key, count) of every bucket hit, in key order."""
        keys, counts = self._nonzero()
        return list(zip(keys, counts, strict=True))

    @property
    def counts(self) -> dict[int, int]:
        """{key: count} of every bucket hit, made on each call (off the hot path: tests, small readers)."""
        return dict(self.items())

    def buckets(self) -> int:
        """How many buckets have been hit."""
        return sum(len(row) - row.count(0) for _, row in self.rows())

    def _nonzero(self) -> tuple[list[int], list[int]]:
        """The keys hit, in order, and their counts: C-level passes over each row (compress keeps the
        keys whose count is not 0, filter(None) the counts that are not)."""
        keys: list[int] = []
        counts: list[int] = []
        for r, row in self.rows():
            base = r << SUB_BUCKET_BITS
            keys.extend(compress(range(base, base + SUB_BUCKETS), row))
            counts.extend(filter(None, row))
        return keys, counts

    def percentile(self, fraction: float) -> float | None:
        """The nearest-rank percentile: the ceil(fraction * n)-th smallest value, to 0.05 %; None if empty."""
        if not self.n:
            return None
        rank = min(self.n, max(1, math.ceil(fraction * self.n - 1e-9)))
        before = 0
        for r, row, running in self.totals():
            if running >= rank:
                column = bisect_left(list(accumulate(row)), rank - before)
                return min(bucket_value((r << SUB_BUCKET_BITS) + column), self.max)
            before = running
        return self.max  # counts short of n: only from a worker's report that lied about its n

    def merge(self, data: dict[str, Any]) -> None:
        """Add a dump's counts (a worker's report: keys outside the histogram's range are refused, with
        nothing added)."""
        keys = list(accumulate(data["keys"]))
        counts = data["counts"]
        if len(keys) != len(counts):
            raise ValueError("a histogram's keys and counts differ in length")
        if keys and (min(keys) < ZERO_KEY or max(keys) > HIGHEST_KEY):
            raise ValueError("a histogram's key is out of range")
        rows = self._rows
        for key, count in zip(keys, counts, strict=True):
            row = rows[key >> SUB_BUCKET_BITS]
            if row is None:
                row = self._new_row(key)
            row[key & _COLUMN] += count
        self.n += data["n"]
        self.max = max(self.max, data["max"])

    def dump(self) -> dict[str, Any]:
        """What a worker ships, for msgpack: the keys hit, sorted, as steps from the one before (mostly
        one byte each, where {key: count} took three for the key) and their counts."""
        keys, counts = self._nonzero()
        return {"keys": _steps(keys), "counts": counts, "n": self.n, "max": self.max}

    def copy(self) -> Histogram:
        """Another histogram with the same counts (each row copied whole: a memcpy)."""
        other = Histogram()
        other._rows = [None if row is None else row[:] for row in self._rows]
        other.n, other.max = self.n, self.max
        return other

    def since(self, before: Histogram | None) -> dict[str, Any]:
        """The dump of the values added since `before`, a copy of this histogram (None: all of it): for
        a window of recent requests. Its max is this one's, the largest so far."""
        if before is None:
            return self.dump()
        keys: list[int] = []
        counts: list[int] = []
        old_rows = before._rows
        for r, row in self.rows():
            base = r << SUB_BUCKET_BITS
            old = old_rows[r]
            added = row if old is None else list(map(sub, row, old))
            keys.extend(compress(range(base, base + SUB_BUCKETS), added))
            counts.extend(filter(None, added))
        return {"keys": _steps(keys), "counts": counts, "n": self.n - before.n, "max": self.max}


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
    significant digits again, so only where that is what the reader expects. A bucket goes where its
    middle rounds to; the JSON result's series asks this of every histogram every second, so each row
    is summed over its runs of columns that round alike (a few dozen C-level sums, not a Python step
    per bucket)."""
    counts: dict[int, int] = {}
    for r, row in histogram.rows():
        for ms, start, end in _locust_spans(r):
            if count := sum(row[start:end]):
                counts[ms] = counts.get(ms, 0) + count
    return counts


_LOCUST_SPANS: dict[int, list[tuple[int, int, int]]] = {}
"""Row -> (Locust's bucket, first column, the column past the last) of each run of its columns whose
middles Locust rounds to the same bucket: made once per row (at most ROWS, a few dozen runs each)."""


def _locust_spans(row: int) -> list[tuple[int, int, int]]:
    spans = _LOCUST_SPANS.get(row)
    if spans is None:
        spans = []
        base = row << SUB_BUCKET_BITS
        for column in range(SUB_BUCKETS):
            ms = bucket_response_time(bucket_value(base + column))
            if spans and spans[-1][0] == ms:  # Locust's rounding only ever goes up with the value
                spans[-1] = (ms, spans[-1][1], column + 1)
            else:
                spans.append((ms, column, column + 1))
        _LOCUST_SPANS[row] = spans
    return spans
