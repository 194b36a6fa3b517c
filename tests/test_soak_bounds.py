"""State bounded in time, not only in size (issue 29.9): each structure that a run adds to every
second is driven here with hours of simulated seconds, fed directly (no sleeping), and must hold the
same amount once full, while its totals stay exact."""

from __future__ import annotations

from itertools import pairwise
from types import SimpleNamespace

from locust.stats import RequestStats

from poolbench_locust.engine.failure_messages import DISTINCT_GROUPS, DISTINCT_MESSAGES, FailureRows
from poolbench_locust.metrics.collector import PoolingStats
from poolbench_locust.metrics.histogram import MAX_BUCKETS, Histogram
from poolbench_locust.metrics.history import MAX_SAMPLES, History, Tiers
from poolbench_locust.results import series
from poolbench_locust.results.compare import blocks_of
from poolbench_locust.results.noise import MAX_CHUNKS, chunks

HOUR = 3600
DAY = 24 * HOUR


def test_tiers_hold_exactly_their_limit_over_a_day_and_cover_every_second():
    tiers = Tiers(600)
    for tick in range(DAY):
        tiers.add()
        assert len(tiers.widths) == min(tick + 1, 600)
    assert sum(tiers.widths) == DAY  # no second lost or counted twice
    assert all(w & (w - 1) == 0 for w in tiers.widths), "widths are powers of two"
    assert tiers.widths == sorted(tiers.widths, reverse=True), "never finer towards the past"
    assert tiers.widest == 256  # 86,400 s: more than 600 blocks of 128 s, at most 600 of 256 s
    groups = tiers.groups()
    assert len(groups) == -(-DAY // 256)
    starts = [sum(tiers.widths[: group[0]]) for group in groups]
    assert starts == [256 * i for i in range(len(groups))], "the groups are evenly spread"


def test_tiers_keep_every_tick_up_to_their_limit_then_merge_the_oldest_narrow_pair():
    tiers = Tiers(HOUR)
    assert [tiers.add() for _ in range(HOUR)] == [None] * HOUR and tiers.widest == 1
    assert tiers.add() == 0 and tiers.widths[:2] == [2, 1] and len(tiers) == HOUR
    assert tiers.add() == 1 and tiers.widths[:3] == [2, 2, 1]


def test_history_keeps_every_second_of_the_first_hour():
    assert MAX_SAMPLES == HOUR
    history = History()
    for t in range(HOUR):
        history.add({"time": float(t), "user_count": 1, "rows": []})
    assert history.interval == 1 and [s["time"] for s in history.samples] == [float(t) for t in range(HOUR)]
    history.add({"time": float(HOUR), "user_count": 1, "rows": []})
    assert history.interval == 2 and len(history._kept) == MAX_SAMPLES, "past the hour: thinned, as many held"


def test_history_holds_max_samples_from_the_first_hour_on_and_shows_them_evenly_spread():
    history = History()
    held = []
    for t in range(DAY):
        history.add({"time": float(t), "user_count": t % 7, "rows": []})
        if t % HOUR == HOUR - 1:
            held.append(len(history._kept))
    assert held == [MAX_SAMPLES] * 24, "the same number held every hour of the day"
    shown = [s["time"] for s in history.samples]
    assert len(shown) <= MAX_SAMPLES and history.interval == 32  # more than 3600 samples of 16 s, at most of 32
    assert shown[0] == 0.0 and shown[-1] >= DAY - history.interval
    assert {b - a for a, b in pairwise(shown)} == {history.interval}


def _drive(kept: series.Series, seconds: int) -> tuple[SimpleNamespace, PoolingStats]:
    stats, pooling = RequestStats(), PoolingStats()
    environment = SimpleNamespace(stats=stats)
    for t in range(seconds):
        stats.log_request("POST", "/x", 10 + t % 7, 100)
        pooling.on_request("/x", 10 + t % 7, 100, None, {"sequences": 2, "input_tokens": 5})
        if t >= seconds // 2:  # a second name, from half-way: its blocks line up with the others'
            stats.log_request("POST", "/y", 30, 10)
            pooling.on_request("/y", 30, 10, None, {"sequences": 1, "input_tokens": 3})
        kept.sample(environment, pooling, now=pooling.start_time + t + 1)
    return environment, pooling


def test_series_holds_max_blocks_per_name_over_hours_and_its_blocks_add_up_exactly():
    kept = series.Series()
    seconds = 6 * HOUR
    environment, pooling = _drive(kept, seconds)
    held = {key: len(blocks) for key, blocks in kept._kept.items()}
    assert held == dict.fromkeys([series.TOTAL, ("POST", "/x"), ("POST", "/y")], series.MAX_BLOCKS)
    out = kept.final(environment, pooling)
    assert kept.width == 8  # 21,600 s: more than 3600 blocks of 4 s, at most 3600 of 8 s
    total, x, y = out[series.TOTAL], out[("POST", "/x")], out[("POST", "/y")]
    assert len(total) <= series.MAX_BLOCKS
    assert all(b["seconds"] == kept.width for b in total[:-1]), "one width, stated as series_seconds"
    assert sum(b["requests"] for b in total) == seconds + seconds // 2
    assert sum(b["requests"] for b in x) == seconds and sum(b["requests"] for b in y) == seconds // 2
    assert sum(b["input_tokens"] for b in total) == 5 * seconds + 3 * (seconds // 2)
    assert sum(b["sequences"] for b in y) == seconds // 2
    assert sum(sum(b["timings"]["e2e"].values()) for b in x) == seconds
    assert sum(b["e2e_sum_ms"] for b in x) == sum(10 + t % 7 for t in range(seconds))
    assert y[0]["time"] >= x[0]["time"] + seconds // 2 - kept.width, "the late name starts where it started"


def test_compare_resamples_the_merged_blocks_of_a_long_run():
    kept = series.Series()
    seconds = 3 * HOUR // 2
    environment, pooling = _drive(kept, seconds)
    blocks = blocks_of({"series": kept.final(environment, pooling)[series.TOTAL]})
    assert kept.width == 2 and len(blocks) == seconds // 2 + (1 if blocks[-1]["seconds"] < 2 else 0)
    pieces = chunks(blocks)
    assert 10 <= len(pieces) <= MAX_CHUNKS
    assert sum(p["requests"] for p in pieces) == seconds + seconds // 2


def test_failure_rows_stay_bounded_over_a_day_of_distinct_messages():
    rows = FailureRows()
    shown = set()
    for t in range(DAY):
        shown.add(rows.row(f"HTTP {500 + t % 40}: request {t} failed at {t} s"))
    assert len(rows._seen) == DISTINCT_MESSAGES and len(rows._grouped) == DISTINCT_GROUPS
    assert len(shown) == DISTINCT_MESSAGES + DISTINCT_GROUPS + 1  # the rest in one row


def test_a_histogram_fed_a_day_of_every_timing_keeps_at_most_max_buckets():
    histogram = Histogram()
    for t in range(DAY * 4):
        histogram.add(0.001 * 1.0003**t)  # every bucket from 1 µs up, past the hour at the top
    histogram.add(float("nan"))
    assert histogram.n == DAY * 4 + 1
    assert len(histogram.counts) <= MAX_BUCKETS
