"""The run's history stays bounded however long the run, and evenly spread over it."""

from __future__ import annotations

from itertools import pairwise

from poolbench_locust.metrics.history import MAX_SAMPLES, History


def test_history_keeps_at_most_max_samples_evenly_spread_over_a_long_run():
    history = History()
    seconds = MAX_SAMPLES * 10  # five hours at one sample a second
    for t in range(seconds):
        history.add({"time": float(t), "user_count": 1, "rows": []})
    times = [s["time"] for s in history.samples]
    assert MAX_SAMPLES // 2 <= len(times) <= MAX_SAMPLES
    assert times[0] == 0.0 and times[-1] >= seconds - history.interval
    gaps = {b - a for a, b in pairwise(times)}
    assert gaps == {history.interval}, gaps
    assert history.interval == 16


def test_a_short_run_keeps_every_second():
    history = History()
    for t in range(100):
        assert history.add({"time": float(t), "user_count": 1, "rows": []})
    assert [s["time"] for s in history.samples] == [float(t) for t in range(100)]
    history.clear()
    assert history.samples == [] and history.interval == 1
