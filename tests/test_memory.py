"""Memory stays flat however large the body: 100 MB `bytes` bodies, measured as peak RSS (not time)."""

from __future__ import annotations

from bench.memory import measure


def test_streaming_100_mb_bodies_keeps_rss_growth_under_32_mb():
    r = measure(body_mb=100, users=2, seconds=4)
    assert all(run["requests"] > 0 and run["failures"] == 0 for run in r["runs"].values()), r
    assert r["poolbench_growth_mb"] < 32, r
    # The same measurement sees a buffering client grow by about a body per user: it can fail.
    assert r["buffering_growth_mb"] > 100, r
