"""Locust's own state that grows with run time (its chart history, its per-second counts) stays bounded
as the plugin's own does (poolbench_locust/metrics/locust_state.py), and its HTML report keeps its charts."""

from __future__ import annotations

import json
import re
from datetime import datetime
from itertools import pairwise
from pathlib import Path

from locust.stats import HISTORY_STATS_INTERVAL_SEC, RequestStats

from poolbench_locust.metrics import locust_state
from poolbench_locust.metrics.locust_state import SpooledHistory, drop_old_counts, history_kept, spool_history
from tests.support.locust_run import LOAD, ROOT, run_locust

HOUR_OF_POINTS = 3600 // HISTORY_STATS_INTERVAL_SEC
DAY_OF_POINTS = 24 * HOUR_OF_POINTS
LOCUST_KEYS = {
    "response_time_percentile_0.5",
    "response_time_percentile_0.95",
    "current_rps",
    "current_fail_per_sec",
    "total_avg_response_time",
    "user_count",
    "time",
}
"""What each point of Locust's history holds (stats.update_stats_history), which its charts read."""


def _point(i: int) -> dict:
    return {"time": i, "current_rps": [i, 1.0], "user_count": [i, 2]}


def test_locust_history_keeps_every_point_of_the_first_hour():
    assert history_kept() == HOUR_OF_POINTS == 720
    history = SpooledHistory()
    for i in range(HOUR_OF_POINTS):
        history.append(_point(i))
    assert [p["time"] for p in history] == list(range(HOUR_OF_POINTS))
    history.append(_point(HOUR_OF_POINTS))
    assert len(history) == HOUR_OF_POINTS and history[0]["time"] == 0 and history[-1]["time"] == HOUR_OF_POINTS


def test_a_day_of_locust_history_holds_an_hours_worth_of_points_spread_over_the_day():
    history = SpooledHistory()
    held = []
    for i in range(DAY_OF_POINTS):
        history.append(_point(i))
        if i % HOUR_OF_POINTS == HOUR_OF_POINTS - 1:
            held.append(len(history))
    assert held == [HOUR_OF_POINTS] * 24, "the same number held every hour of the day"
    times = [p["time"] for p in history]
    # The newest point may have merged into the span of the one before (as the plugin's own samples do).
    assert times[0] == 0 and times[-1] >= DAY_OF_POINTS - 2, "the whole day is still shown"
    gaps = [b - a for a, b in pairwise(times)]
    assert gaps == sorted(gaps, reverse=True), "never finer towards the past"
    assert gaps[-1] <= 2 and max(gaps) == 32, "the newest near Locust's own interval, the oldest 32 apart"
    assert all(set(p) == {"time", "current_rps", "user_count"} for p in history), "each point as Locust made it"


def test_a_new_list_after_locusts_reset_is_spooled_again_with_its_points():
    stats = RequestStats()
    stats.history.append(_point(0))
    spool_history(stats)
    spooled = stats.history
    assert isinstance(spooled, SpooledHistory) and [p["time"] for p in spooled] == [0]
    spool_history(stats)
    assert stats.history is spooled, "a spooled history stays as it is"
    stats.reset_all()  # Locust gives stats.history a new list
    stats.history.append(_point(7))
    spool_history(stats)
    assert isinstance(stats.history, SpooledHistory) and stats.history is not spooled
    assert [p["time"] for p in stats.history] == [7]


def test_the_spooled_history_reads_as_the_list_locust_made():
    """What Locust does with its history: append, read the last point, iterate, serialize to JSON."""
    history, plain = SpooledHistory(limit=5), []
    assert not history and history == [] and len(history) == 0
    for i in range(5):
        point = {"time": f"2026-12-07T08:00:0{i}Z", "current_rps": [i, 1.5], "user_count": [i, 2]}
        history.append(point)
        plain.append(point)
    assert history and history == plain and len(history) == 5
    assert history[-1] == plain[-1] and history[0] == plain[0] and history[1:4] == plain[1:4]
    assert list(reversed(history)) == plain[::-1]
    assert json.dumps(history) == json.dumps(plain)
    assert json.dumps({"history": history}, indent=1) == json.dumps({"history": plain}, indent=1)
    assert list.__len__(history) == 0, "the points are on disk, not in the list"


def test_old_per_second_counts_go_and_the_current_rate_and_totals_stay():
    stats = RequestStats()
    entry = stats.get("/x", "POST")
    start, seconds = 1_700_000_000, 3 * 3600  # three hours of 5 requests a second, one failure every 10 s
    for second in range(seconds):
        entry.num_reqs_per_sec[start + second] = 5
        if second % 10 == 0:
            entry.num_fail_per_sec[start + second] = 1
    entry.num_requests, entry.num_failures = 5 * seconds, seconds // 10
    entry.start_time = stats.total.start_time = start
    entry.last_request_timestamp = stats.total.last_request_timestamp = start + seconds - 0.5
    before = (entry.current_rps, entry.current_fail_per_sec, entry.num_requests, entry.total_rps)
    assert before[0] == 5 and before[1] > 0
    cut = int(entry.last_request_timestamp) - locust_state.COUNTS_KEPT_S
    drop_old_counts(entry, cut)
    assert len(entry.num_reqs_per_sec) == locust_state.COUNTS_KEPT_S + 1
    assert 0 < len(entry.num_fail_per_sec) <= locust_state.COUNTS_KEPT_S // 10 + 1
    assert min(entry.num_reqs_per_sec) == cut and min(entry.num_fail_per_sec) >= cut
    assert (entry.current_rps, entry.current_fail_per_sec, entry.num_requests, entry.total_rps) == before


def _report_history(html: str) -> list[dict]:
    """The points of Locust's history the HTML report's charts are drawn from (its templateArgs)."""
    args = re.search(r"window\.templateArgs = (\{.*?\})\n", html)
    assert args is not None, "no templateArgs in the report"
    return json.loads(args.group(1))["history"]


def test_the_html_report_keeps_its_charts_after_locusts_history_is_thinned(mock_server, tmp_path: Path):
    # Locust's history every 0.1 s, an "hour" of 8 points: 5 s of run take some 50 points, thinned to 8.
    locustfile = ROOT / "tests" / "support" / "short_history_locustfile.py"
    report = tmp_path / "report.html"
    done = run_locust(locustfile, *LOAD, "--html", str(report), users=2, run_time="5s", host=mock_server.url)
    assert done.returncode == 0, done.stderr[-3000:]
    history = _report_history(report.read_text())
    assert 4 <= len(history) <= 8 + 1, len(history)  # the report adds one last point as it is written
    assert all(set(p) == LOCUST_KEYS for p in history), "each point as Locust makes it"
    times = [datetime.fromisoformat(p["time"]) for p in history]
    assert times == sorted(times)
    assert (times[-1] - times[0]).total_seconds() >= 3, "the points still span the run"
    assert any(p["current_rps"][1] > 0 for p in history) and any(p["user_count"][1] == 2 for p in history)
    gaps = [(b - a).total_seconds() for a, b in pairwise(times[:-1])]
    assert max(gaps) >= 0.35, "older points thinned (Locust took one every 0.1 s)"
