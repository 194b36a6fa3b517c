"""The pooling stats' histogram: percentiles within 0.1 % of the sorted samples, merges equal to one
histogram fed everything, a bounded number of buckets whatever it is fed, memory made per power of two
(not per bucket hit), exact mean and stddev."""

from __future__ import annotations

import math
import statistics
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from locust.stats import bucket_response_time

from poolbench_locust.metrics.collector import PoolingStats
from poolbench_locust.metrics.histogram import (
    HIGHEST_KEY,
    HIGHEST_MS,
    LOWEST_MS,
    MAX_BUCKETS,
    ROWS,
    SUB_BUCKETS,
    ZERO_KEY,
    Histogram,
    Moments,
    difference,
    locust_counts,
)
from poolbench_locust.metrics.table import rows
from tests.support.percentiles import nearest_rank

TOLERANCE = 0.001
FRACTIONS = (0.001, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0)
times_ms = st.floats(min_value=LOWEST_MS, max_value=HIGHEST_MS, allow_nan=False)
samples = st.lists(times_ms, min_size=1, max_size=400)


def fed(values: list[float], kind: type = Histogram) -> Any:
    histogram = kind()
    for value in values:
        histogram.add(value)
    return histogram


def shipped(summary: Histogram | Moments) -> dict:
    """A dump as the master gets it: through msgpack, as Locust packs a worker's report."""
    return msgpack.unpackb(msgpack.packb(summary.dump(), use_bin_type=True), raw=False, strict_map_key=False)


@settings(max_examples=300, deadline=None)
@given(samples, st.floats(min_value=0.0001, max_value=1.0))
def test_every_percentile_is_within_a_tenth_of_a_percent_of_the_sorted_samples(values, fraction):
    histogram = fed(values)
    for p in (*FRACTIONS, fraction):
        true = nearest_rank(values, p)
        assert abs(histogram.percentile(p) - true) <= TOLERANCE * true, (p, true, histogram.percentile(p))


@settings(max_examples=200, deadline=None)
@given(samples, samples, samples)
def test_merged_worker_dumps_equal_one_histogram_fed_everything(first, second, third):
    master, moments = Histogram(), Moments()
    for part in (first, second, third):
        master.merge(shipped(fed(part)))
        moments.merge(shipped(fed(part, Moments)))
    single, single_moments = fed(first + second + third), fed(first + second + third, Moments)
    assert master.counts == single.counts
    assert (master.n, master.max) == (single.n, single.max)
    assert [master.percentile(p) for p in FRACTIONS] == [single.percentile(p) for p in FRACTIONS]
    assert moments.mean() == pytest.approx(single_moments.mean(), rel=1e-12)
    if single.n >= 2:
        assert moments.stddev() == pytest.approx(single_moments.stddev(), rel=1e-6, abs=1e-6)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.01, max_value=600_000.0), min_size=2, max_size=300))
def test_mean_and_stddev_are_those_of_the_samples_not_of_the_buckets(values):
    moments = fed(values, Moments)
    assert moments.mean() == pytest.approx(statistics.fmean(values), rel=1e-9)
    assert moments.stddev() == pytest.approx(statistics.stdev(values), rel=1e-5, abs=1e-5)


def test_the_number_of_buckets_is_bounded_whatever_it_is_fed():
    """Every value from below 1 µs to beyond an hour, 0.02 % apart: every bucket is hit, no more exist."""
    histogram = Histogram()
    value = LOWEST_MS / 4
    while value < HIGHEST_MS * 4:
        histogram.add(value)
        value *= 1.0002
    assert len(histogram.counts) == MAX_BUCKETS
    moments = Moments()
    for hostile in (float("nan"), float("inf"), -float("inf"), -5.0, 0.0, 1e300):
        histogram.add(hostile)
        moments.add(hostile)
    assert len(histogram.counts) <= MAX_BUCKETS
    assert histogram.max == HIGHEST_MS
    assert moments.mean() == pytest.approx(HIGHEST_MS / 3) and math.isfinite(moments.stddev())


def test_values_out_of_range_are_clamped_and_never_poison_the_mean():
    values = [float("nan"), -3.0, 0.0, 0.0004, float("inf"), 1e9, 250.0]
    histogram, moments = fed(values), fed(values, Moments)
    assert histogram.n == moments.n == 7
    assert histogram.percentile(0.5) == 0.0  # four of the seven count as 0
    assert histogram.percentile(1.0) == pytest.approx(HIGHEST_MS, rel=TOLERANCE)
    assert histogram.max == HIGHEST_MS
    assert moments.mean() == pytest.approx((2 * HIGHEST_MS + 250.0004) / 7)
    assert Histogram().percentile(0.5) is None and Moments().mean() is None and fed([3.0], Moments).stddev() is None


def test_pooling_rows_merged_from_two_workers_equal_one_process():
    """The whole collector, not only the histogram: every column of every row, through msgpack."""
    one, workers, master = PoolingStats(), [PoolingStats(), PoolingStats()], PoolingStats()
    for stats in (one, master, *workers):
        stats.start_time = 1000.0
    for worker in workers:
        worker.keeps_total = False  # as metrics/pooling_reports.py sets it on a worker: the master adds the entries up
    for i in range(3000):
        e2e = 20.0 + (i * 7919 % 3001) / 10.0
        context = {"sequences": 2, "input_tokens": 5 + i % 3, "ttfb_ms": e2e / 3, "queue_ms": float(i % 4)}
        failure = None if i % 17 else "HTTP 503"
        name = "/rerank" if i % 5 else "/v1/embeddings"
        one.on_request(name, e2e, 100, failure, context)
        workers[i % 2].on_request(name, e2e, 100, failure, context)
        if i % 400 == 399:  # report intervals
            for worker in workers:
                packed = msgpack.packb(worker.take_report(), use_bin_type=True)
                master.merge_report(msgpack.unpackb(packed, raw=False, strict_map_key=False))
    for worker in workers:
        master.merge_report(worker.take_report())
    # Rates divide by the wall clock of each process: the same last request time makes them comparable.
    for stats in (one, master):
        for entry in (*stats.entries.values(), stats.total):
            entry.last = 1010.0
    merged, single = rows(master), rows(one)
    for row_m, row_s in zip(merged, single, strict=True):
        for column, value in row_s.items():
            if isinstance(value, float) and column in ("E2E Mean", "E2E Stddev"):
                assert row_m[column] == pytest.approx(value, rel=1e-9), column
            else:
                assert row_m[column] == value, (row_s["Name"], column)


@settings(max_examples=100, deadline=None)
@given(samples, samples)
def test_the_difference_of_two_dumps_is_the_histogram_of_the_values_in_between(first, then):
    histogram = fed(first)
    before = shipped(histogram)
    for value in then:
        histogram.add(value)
    window = Histogram()
    window.merge(difference(shipped(histogram), before))
    assert window.counts == fed(then).counts and window.n == len(then)
    assert difference(before, None) == before


@settings(max_examples=100, deadline=None)
@given(samples)
def test_locust_counts_are_what_locusts_own_bucketing_gives_within_its_rounding(values):
    counts = locust_counts(fed(values))
    assert sum(counts.values()) == len(values)
    locust_own: dict[int, int] = {}
    for value in values:
        locust_own[bucket_response_time(value)] = locust_own.get(bucket_response_time(value), 0) + 1
    # The same buckets, but for values within 0.05 % of one of Locust's rounding edges.
    moved = sum(abs(counts.get(k, 0) - locust_own.get(k, 0)) for k in {*counts, *locust_own}) // 2
    edges = sum(1 for v in values if bucket_response_time(v * 1.0005) != bucket_response_time(v * 0.9995))
    assert moved <= edges


def test_memory_is_made_once_per_power_of_two_not_per_bucket_hit():
    """The rows are made as the values' powers of two first appear; new buckets inside them cost nothing."""
    histogram = Histogram()
    histogram.add(5.0)  # 4..8 ms: one row
    rows = [row for _, row in histogram.rows()]
    assert len(rows) == 1
    value = 4.0
    while value < 8.0:  # every bucket of that power of two
        histogram.add(value)
        value *= 1.0002
    assert [row for _, row in histogram.rows()] == rows and histogram.rows()[0][1] is rows[0]
    assert histogram.buckets() == SUB_BUCKETS
    for value in (0.0, 0.0015, 7.0, 3_000.0, 1e12):
        histogram.add(value)
    assert len(histogram.rows()) == 5  # the bucket of 0, 1-2 µs, 4-8 ms, 2-4 s, the hour
    assert len(histogram.rows()) <= ROWS


@settings(max_examples=100, deadline=None)
@given(samples, samples)
def test_what_was_added_since_a_copy_is_the_histogram_of_the_values_in_between(first, then):
    histogram = fed(first)
    copy = histogram.copy()
    for value in then:
        histogram.add(value)
    assert copy.counts == fed(first).counts and copy.n == len(first)
    since = msgpack.unpackb(msgpack.packb(histogram.since(copy)), raw=False, strict_map_key=False)
    assert since == difference(shipped(histogram), shipped(fed(first)))
    window = Histogram()
    window.merge(since)
    assert window.counts == fed(then).counts and window.n == len(then)
    assert histogram.since(None) == histogram.dump()


@pytest.mark.parametrize(
    "dump",
    [
        {"keys": [ZERO_KEY - 1], "counts": [1], "n": 1, "max": 1.0},
        {"keys": [HIGHEST_KEY + 1], "counts": [1], "n": 1, "max": 1.0},
        {"keys": [HIGHEST_KEY, -(HIGHEST_KEY - ZERO_KEY) - 1], "counts": [1, 1], "n": 2, "max": 1.0},
        {"keys": [5000, 1], "counts": [1], "n": 1, "max": 1.0},
    ],
)
def test_a_dump_with_a_key_out_of_range_is_refused_and_adds_nothing(dump):
    """A worker's report is untrusted: a key outside the histogram's range would land in another row."""
    histogram = fed([3.0])
    with pytest.raises(ValueError):
        histogram.merge(dump)
    assert histogram.counts == fed([3.0]).counts and histogram.n == 1
