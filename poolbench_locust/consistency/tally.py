"""The tally of many comparisons (measures.Comparison): counts, minima, maxima and a bounded histogram of
the cosines, mergeable across processes (each worker tallies its own, the master merges what they ship),
so one sweep step, repeat or capacity probe says how right its answers stayed.

The figures (`Tally.figures`), each present only where it applies:

- compared: the comparisons tallied.
- identical_ratio: the share of answers equal to their reference, value for value.
- cosine_min: the worst cosine similarity seen: the one answer that moved most.
- cosine_p01: the 1st percentile of the cosines (nearest rank): how far the worst 1 % moved, which a
  single odd answer does not decide as it decides the minimum.
- abs_diff_max: the largest absolute difference of any one value (component, score, probability).
- top1_changed_ratio: among rerank, score and similarity answers, the share whose best document changed.
- kendall_tau_min: the worst Kendall's tau-b: the answer whose document order was kept least.
- labels_changed_ratio: among classify answers, the share whose most probable label changed.
- hamming_max: the most bits that differed in one binary or ubinary answer.

Why the histogram holds 1 - cosine in log-spaced buckets: cosines of answers that stay right crowd just
below 1 (0.999999 for kernels that round differently under load, 0.999 for a real drift), where linear
buckets of any usable width would lump them together. The distance d = 1 - cosine (0 to 2) is bucketed
log-linearly, as metrics/histogram.py buckets milliseconds: each power of two cut into SUB_BUCKETS = 64
equal steps, so a bucket is never wider than 1/64 of its lower edge, and the percentile, reported as its
bucket's middle, is within 1/128 (0.78 %) of the true sample's distance: |reported - true cosine| <=
(1 - true cosine) / 128 (and a float rounding or two), never below cosine_min. So 0.9999 (d = 1e-4)
and 0.999 (d = 1e-3) are nowhere near one bucket, and neither are 1 - 1e-12 and 1 - 1e-11. A cosine of
exactly 1.0 (d = 0) has a bucket of its own (key 0), negative cosines are distances above 1. The smallest
distance a float cosine below 1 can have is 2**-53 (1 less the float just below 1) and the largest 2
(cosine -1), so there are at most MAX_BUCKETS = 3,458 buckets, however many comparisons; a tally holds
only the buckets seen.
(metrics/histogram.py is not reused: it is built for milliseconds, clamping below 1 µs, where these
distances go down to 1e-16.)

A worker ships `to_wire()` (ints, floats, None, lists: JSON and msgpack alike); the master takes it with
`from_wire`, which trusts nothing: a broken worker's report is refused whole, with a ValueError that says
what was wrong, rather than merged into the run's figures.
"""

from __future__ import annotations

import math
from itertools import accumulate
from typing import Any

from poolbench_locust.consistency.measures import Comparison

SUB_BUCKET_BITS = 6
SUB_BUCKETS = 1 << SUB_BUCKET_BITS
"""Linear steps per power of two of the distance 1 - cosine: 64, a bucket at most 1/64 of its lower edge wide."""
RELATIVE_ERROR = 1 / (2 * SUB_BUCKETS)
"""A percentile's distance (1 - cosine) is within this fraction of the true sample's: 1/128, 0.78 %."""
LOWEST_DISTANCE = 2.0**-53
"""The smallest 1 - cosine of a float cosine below 1: the float just below 1 is 1 - 2**-53."""
HIGHEST_DISTANCE = 2.0
"""1 - (-1): opposite vectors."""
EXACT_KEY = 0
"""The bucket of cosine 1.0 exactly (distance 0)."""
_SCALE = 2 * SUB_BUCKETS


def _raw_key(distance: float) -> int:
    mantissa, exponent = math.frexp(distance)  # distance = mantissa * 2**exponent, 0.5 <= mantissa < 1
    return (exponent << SUB_BUCKET_BITS) + int(mantissa * _SCALE)


_OFFSET = _raw_key(LOWEST_DISTANCE) - 1  # so the lowest positive distance's key is 1


def distance_key(distance: float) -> int:
    """The bucket of a distance 1 - cosine, clamped into [LOWEST_DISTANCE, HIGHEST_DISTANCE]; 0 for 0."""
    if distance <= 0.0:
        return EXACT_KEY
    return _raw_key(min(max(distance, LOWEST_DISTANCE), HIGHEST_DISTANCE)) - _OFFSET


MAX_KEY = distance_key(HIGHEST_DISTANCE)
MAX_BUCKETS = MAX_KEY + 1
"""3,458: every key from 0 (cosine 1.0) to MAX_KEY (cosine -1), the most buckets a tally can hold."""
MAX_COUNT = 2**63 - 1
"""The largest count a shipped tally may hold: msgpack's signed 64-bit integer."""


def bucket_distance(key: int) -> float:
    """The middle of a bucket's distances: what a percentile in it is reported as."""
    if key == EXACT_KEY:
        return 0.0
    raw = key + _OFFSET
    # raw = exponent * 64 + step, frexp's exponent and step in [64, 128): the bucket is
    # [step, step + 1) / 128 * 2**exponent.
    exponent, step = (raw >> SUB_BUCKET_BITS) - 1, (raw & (SUB_BUCKETS - 1)) + SUB_BUCKETS
    return math.ldexp((step + 0.5) / _SCALE, exponent)


_COUNTS = ("compared", "identical", "top1_compared", "top1_changed", "labels_compared", "labels_changed")
_EXTREMES = ("cosine_min", "kendall_tau_min", "abs_diff_max", "hamming_max")
_PARTS = (
    ("identical", "compared"),
    ("top1_changed", "top1_compared"),
    ("top1_compared", "compared"),
    ("labels_changed", "labels_compared"),
    ("labels_compared", "compared"),
)
"""Counts that are part of another: a shipped tally whose part exceeds its whole is broken."""
_WIRE_KEYS = frozenset({*_COUNTS, *_EXTREMES, "cosine_keys", "cosine_counts"})


class Tally:
    """Counts, minima, maxima and the cosines' histogram of many comparisons."""

    __slots__ = (*_COUNTS, *_EXTREMES, "cosine_buckets")

    def __init__(self) -> None:
        self.compared = 0
        self.identical = 0
        """Of the comparisons, the answers equal to their reference."""
        self.top1_compared = 0
        """Comparisons that had a best document (rerank, score, similarity)."""
        self.top1_changed = 0
        self.labels_compared = 0
        """Comparisons that had a most probable label (classify)."""
        self.labels_changed = 0
        self.cosine_min: float | None = None
        """None until a comparison had a cosine; so for each minimum and maximum."""
        self.kendall_tau_min: float | None = None
        self.abs_diff_max: float | None = None
        self.hamming_max: int | None = None
        self.cosine_buckets: dict[int, int] = {}
        """{distance_key(1 - cosine): count}, only the buckets seen."""

    def add(self, c: Comparison) -> None:
        self.compared += 1
        self.identical += c.identical
        if c.cosine is not None:
            key = distance_key(1.0 - c.cosine)
            self.cosine_buckets[key] = self.cosine_buckets.get(key, 0) + 1
            self.cosine_min = _lower(self.cosine_min, c.cosine)
        if c.kendall_tau is not None:
            self.kendall_tau_min = _lower(self.kendall_tau_min, c.kendall_tau)
        if c.abs_diff is not None:
            self.abs_diff_max = _higher(self.abs_diff_max, c.abs_diff)
        if c.hamming is not None:
            self.hamming_max = _higher(self.hamming_max, c.hamming)
        if c.top1_changed is not None:
            self.top1_compared += 1
            self.top1_changed += c.top1_changed
        if c.label_changed is not None:
            self.labels_compared += 1
            self.labels_changed += c.label_changed

    def merge(self, other: Tally) -> None:
        """Adds another tally's comparisons to this one: the same figures as one tally of them all."""
        for name in _COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.cosine_min = _lower(self.cosine_min, other.cosine_min)
        self.kendall_tau_min = _lower(self.kendall_tau_min, other.kendall_tau_min)
        self.abs_diff_max = _higher(self.abs_diff_max, other.abs_diff_max)
        self.hamming_max = _higher(self.hamming_max, other.hamming_max)
        for key, count in other.cosine_buckets.items():
            self.cosine_buckets[key] = self.cosine_buckets.get(key, 0) + count

    def cosine_percentile(self, fraction: float) -> float | None:
        """The nearest-rank percentile of the cosines (the ceil(fraction * n)-th smallest), its distance
        1 - cosine within RELATIVE_ERROR of the true one's, never below cosine_min; None if no cosine."""
        n = sum(self.cosine_buckets.values())
        if not n or self.cosine_min is None:
            return None
        rank = min(n, max(1, math.ceil(fraction * n - 1e-9)))
        seen = 0
        for key in sorted(self.cosine_buckets, reverse=True):  # the largest distances, the smallest cosines, first
            seen += self.cosine_buckets[key]
            if seen >= rank:
                break
        distance = bucket_distance(key)
        # The worst bucket's middle may lie beyond the worst cosine itself, which is known exactly.
        return self.cosine_min if distance >= 1.0 - self.cosine_min else 1.0 - distance

    def figures(self) -> dict[str, Any]:
        """The issue's figures, each present only where it applies (the module's docstring says what each means)."""
        found: dict[str, Any] = {"compared": self.compared}
        if self.compared:
            found["identical_ratio"] = self.identical / self.compared
        if self.cosine_min is not None:
            found["cosine_min"] = self.cosine_min
            found["cosine_p01"] = self.cosine_percentile(0.01)
        if self.abs_diff_max is not None:
            found["abs_diff_max"] = self.abs_diff_max
        if self.top1_compared:
            found["top1_changed_ratio"] = self.top1_changed / self.top1_compared
        if self.kendall_tau_min is not None:
            found["kendall_tau_min"] = self.kendall_tau_min
        if self.labels_compared:
            found["labels_changed_ratio"] = self.labels_changed / self.labels_compared
        if self.hamming_max is not None:
            found["hamming_max"] = self.hamming_max
        return found

    def to_wire(self) -> dict[str, Any]:
        """What a worker ships: plain ints, floats, None and lists. The buckets' sorted keys go as steps
        from the one before (small numbers: a byte each in msgpack) beside their counts."""
        keys = sorted(self.cosine_buckets)
        wire: dict[str, Any] = {name: getattr(self, name) for name in (*_COUNTS, *_EXTREMES)}
        wire["cosine_keys"] = [b - a for a, b in zip([0, *keys], keys, strict=False)]
        wire["cosine_counts"] = [self.cosine_buckets[k] for k in keys]
        return wire

    @classmethod
    def from_wire(cls, data: Any) -> Tally:
        """A tally from what a worker shipped, every type and range checked; ValueError on anything wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"a shipped tally must be a mapping, not {type(data).__name__}")
        if (keys := set(data)) != _WIRE_KEYS:
            missing, unknown = sorted(_WIRE_KEYS - keys), sorted(map(repr, keys - _WIRE_KEYS))
            raise ValueError(f"a shipped tally's keys are wrong (missing {missing}, unknown {unknown})")
        tally = cls()
        for name in _COUNTS:
            setattr(tally, name, _count(data[name], name))
        for part, whole in _PARTS:
            if getattr(tally, part) > getattr(tally, whole):
                raise ValueError(f"{part} ({getattr(tally, part)}) exceeds {whole} ({getattr(tally, whole)})")
        tally.cosine_min = _number_or_none(data["cosine_min"], "cosine_min", -1.0, 1.0)
        tally.kendall_tau_min = _number_or_none(data["kendall_tau_min"], "kendall_tau_min", -1.0, 1.0)
        tally.abs_diff_max = _number_or_none(data["abs_diff_max"], "abs_diff_max", 0.0, math.inf)
        if data["hamming_max"] is not None:
            tally.hamming_max = _count(data["hamming_max"], "hamming_max")
        if not tally.compared and any(getattr(tally, name) is not None for name in _EXTREMES):
            raise ValueError("a shipped tally of no comparison holds a minimum or maximum")
        tally.cosine_buckets = _buckets(data["cosine_keys"], data["cosine_counts"])
        if sum(tally.cosine_buckets.values()) > tally.compared:
            raise ValueError("a shipped tally holds more cosines than comparisons")
        if (tally.cosine_min is None) != (not tally.cosine_buckets):
            raise ValueError("a shipped tally's cosine_min and its cosine buckets disagree on whether it has cosines")
        if tally.cosine_min is not None and distance_key(1.0 - tally.cosine_min) != max(tally.cosine_buckets):
            raise ValueError("a shipped tally's cosine_min is not in its highest cosine bucket")
        return tally


def _lower(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)


def _higher(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def _count(value: Any, name: str) -> int:
    if type(value) is not int:  # bool is an int subclass: not a count
        raise ValueError(f"{name} must be a whole number, not {type(value).__name__}")
    if not 0 <= value <= MAX_COUNT:
        raise ValueError(f"{name} must be within 0..{MAX_COUNT}, not {value}")
    return value


def _number_or_none(value: Any, name: str, low: float, high: float) -> float | None:
    if value is None:
        return None
    if type(value) not in (int, float):
        raise ValueError(f"{name} must be a number or None, not {type(value).__name__}")
    if not (math.isfinite(value) and low <= value <= high):  # NaN and infinities fail
        raise ValueError(f"{name} must be a finite number within [{low}, {high}], not {value!r}")
    return float(value)


def _buckets(steps: Any, counts: Any) -> dict[int, int]:
    """The cosine buckets from their shipped key steps and counts: at most MAX_BUCKETS, keys strictly
    increasing within 0..MAX_KEY, every count at least 1."""
    if not isinstance(steps, list | tuple) or not isinstance(counts, list | tuple):
        raise ValueError("cosine_keys and cosine_counts must be lists")
    if len(steps) != len(counts):
        raise ValueError(f"cosine_keys ({len(steps)}) and cosine_counts ({len(counts)}) differ in length")
    if len(steps) > MAX_BUCKETS:
        raise ValueError(f"a shipped tally holds {len(steps)} cosine buckets, more than the {MAX_BUCKETS} there are")
    for index, step in enumerate(steps):
        if _count(step, "a cosine key step") == 0 and index:
            raise ValueError("cosine_keys must be strictly increasing")
    keys = list(accumulate(steps))
    if keys and keys[-1] > MAX_KEY:
        raise ValueError(f"a cosine key ({keys[-1]}) is beyond the last bucket ({MAX_KEY})")
    buckets = {}
    for key, count in zip(keys, counts, strict=True):
        if _count(count, "a cosine bucket's count") == 0:
            raise ValueError("a cosine bucket's count must be at least 1")
        buckets[key] = count
    return buckets
