"""--repeat N: the measured window cut into N consecutive repeats, each repeat's figures what the server
served in it, and the headline figures' mean and 95 % confidence interval (Student's t, without scipy,
checked for correlated repeats: its coverage is test_repeat_coverage.py's)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import jsonschema
import pytest

from poolbench_locust.repeats.batch_means import METHOD
from poolbench_locust.repeats.repeat_table import HEADLINE, RepeatTable
from poolbench_locust.repeats.student_t import mean_ci95, t_975
from poolbench_locust.results.compare import Run, compare
from tests.support.locust_run import csv_rows, result_schema, run_locust


@pytest.mark.parametrize(
    ("df", "expected"),
    [
        (1, 12.706),
        (2, 4.303),
        (4, 2.776),
        (10, 2.228),
        (29, 2.045),
        (30, 2.042),
        (40, 2.021),
        (60, 2.000),
        (120, 1.980),
    ],
)
def test_t_critical_values_match_the_printed_table(df: int, expected: float) -> None:
    assert t_975(df) == pytest.approx(expected, abs=0.0006)


def test_the_interval_of_known_values() -> None:
    mean, low, high = mean_ci95([9.0, 10.0, 11.0, 10.0])  # their sample sd is sqrt(2/3)
    half = 3.1824 * (2 / 3) ** 0.5 / 2
    assert mean == pytest.approx(10.0)
    assert (low, high) == pytest.approx((10.0 - half, 10.0 + half))
    assert low < mean < high


def test_one_value_has_no_interval() -> None:
    assert mean_ci95([5.0]) is None
    assert mean_ci95([]) is None


RUN_S, REPEATS, RATE, USERS = 15, 5, 40, 4
"""5 repeats (the fewest that give an interval: repeats/batch_means.py, CHECK_MIN) of 3 s: long enough
that a client starved of CPU for half a second on a busy machine, then catching up on its schedule,
moves under 20 % of a repeat's requests into the next."""


@pytest.mark.timing
@pytest.mark.parametrize("processes", [[], ["--processes", "2"]], ids=["one process", "master and 2 workers"])
def test_each_repeat_counts_what_the_server_served_in_it(mock_server, tmp_path, processes):
    prefix = tmp_path / "rep"
    result = run_locust(
        "locustfiles/embeddings.py",
        *("--stop-timeout", "5", "--repeat", str(REPEATS), "--request-rate", str(RATE)),
        *processes,
        host=mock_server.url,
        users=USERS,
        run_time=f"{RUN_S}s",
        csv=prefix,
        json_result=tmp_path / "rep.json",
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    doc = json.loads((tmp_path / "rep.json").read_text())
    jsonschema.Draft202012Validator(result_schema()).validate(doc)  # repeats_interval included
    repeats = doc["repeats"]
    assert [r["repeat"] for r in repeats] == list(range(1, REPEATS + 1))
    served = mock_server.stats()
    # Every request the server answered counted in exactly one repeat, or left out with the users' start
    # (a worker builds its pools and spawns its users after the master's start: the repeats begin once
    # every user runs); a request in flight at the end of -t is answered but never counted: at most one
    # per user.
    found = re.search(r"Repeats begin with every user running: (\d+) requests", result.stderr)
    left_out = int(found.group(1)) if found else 0
    counted = sum(r["requests"] for r in repeats)
    assert served["ok"] - USERS <= counted + left_out <= served["ok"]
    tokens = sum(r["input_tokens_per_s"] * r["seconds"] for r in repeats)
    per_request = served["prompt_tokens"] / served["ok"]  # every request the same length here
    assert tokens + left_out * per_request == pytest.approx(served["prompt_tokens"], rel=0.05)
    # The repeats share -t from their start: equal lengths, the last one ending with -t.
    assert sum(r["seconds"] for r in repeats) == pytest.approx(RUN_S, abs=3.0)
    for r in repeats:  # each repeat its own fifth, at the rate that was sent
        assert r["seconds"] == pytest.approx(repeats[0]["seconds"], abs=0.5)
        assert r["requests_per_s"] == pytest.approx(RATE, rel=0.25), [(r["seconds"], r["requests"]) for r in repeats]
    # The stats were reset at each repeat's start: Locust's own CSV holds the last repeat alone.
    locust_row = csv_rows(Path(f"{prefix}_stats.csv"))["Aggregated"]
    assert int(locust_row["Request Count"]) == repeats[-1]["requests"]
    # The interval's check is recorded, and the CSV and the console say what the JSON result says:
    # an interval about the mean, or (consecutive repeats that happen to look correlated) none and why.
    check = doc["repeats_interval"]["figures"]["requests_per_s"]
    assert doc["repeats_interval"]["method"] == METHOD and check["windows"] == REPEATS
    assert isinstance(check["lag1_autocorrelation"], float)
    with open(f"{prefix}_repeats.csv") as f:
        rows = list(csv.DictReader(f))
    assert [row["Repeat"] for row in rows] == [*map(str, range(1, REPEATS + 1)), "mean", "ci95_low", "ci95_high"]
    mean = sum(r["requests_per_s"] for r in repeats) / REPEATS
    assert float(rows[REPEATS]["Requests/s"]) == pytest.approx(mean, abs=0.001)
    line = next(x for x in result.stderr.splitlines() if "Requests/s: " in x)
    if check["verdict"].startswith("refused"):
        assert doc["requests_per_s_ci95"] is None and rows[REPEATS + 1]["Requests/s"] == ""
        assert "no interval: consecutive repeats are correlated" in line
    else:
        low, high = doc["requests_per_s_ci95"]
        assert low < mean < high
        assert float(rows[REPEATS + 1]["Requests/s"]) == pytest.approx(low, abs=0.001)
        assert "95 % CI" in line and "lag-1 autocorrelation" in line


def test_fewer_than_five_repeats_give_the_mean_and_say_why_there_is_no_interval(tmp_path):
    table = RepeatTable(None, 3)  # type: ignore[arg-type]  # the figures are the rows alone
    table.repeats = [
        {"repeat": i, "seconds": 2.0, "requests": 20, "failures": 0, "consistency": None}
        | {key: 10.0 + i for key, _ in HEADLINE}
        for i in (1, 2, 3)
    ]
    found = table.to_json()
    assert found["requests_per_s_ci95"] is None
    assert found["repeats_interval"]["figures"]["requests_per_s"]["verdict"] == "refused: too few"
    assert "Requests/s: 12.000 (mean of 3 repeats; no interval: 3 repeats are too few" in table.console()


def test_repeat_without_run_time_is_refused(mock_server):
    result = run_locust("locustfiles/embeddings.py", "--repeat", "2", host=mock_server.url, users=1, timeout=60)
    assert result.returncode == 1
    assert "--repeat" in result.stderr and "needs -t" in result.stderr


def test_repeat_with_a_sweep_is_refused(mock_server):
    result = run_locust(
        "locustfiles/embeddings.py",
        *("--repeat", "2", "--sweep-users", "1,2"),
        host=mock_server.url,
        users=1,
        run_time="4s",
        timeout=60,
    )
    assert result.returncode == 1
    assert "--repeat" in result.stderr


def _run_with_repeats(rates: list[float]) -> Run:
    repeats = [
        {"repeat": i + 1, "requests_per_s": r, "input_tokens_per_s": 100 * r, "e2e_p50_ms": 10.0, "e2e_p99_ms": 20.0}
        for i, r in enumerate(rates)
    ]
    return Run("run.json", {"requests": [], "total": {"pooling": {}, "locust": {}}, "repeats": repeats})


def test_compare_judges_the_means_by_the_repeats_spread():
    section = compare([_run_with_repeats([100, 101, 99]), _run_with_repeats([90, 91, 89])])[-1]
    assert section.title == "repeats (mean of 3 vs 3)"
    change = section.changes[0]["Requests/s"]
    assert (change.base, change.new) == (100, 90)
    assert change.significant  # 10 requests/s apart, each mean known to about 0.6
    noisy = compare([_run_with_repeats([100, 130, 70]), _run_with_repeats([90, 120, 60])])[-1]
    assert not noisy.changes[0]["Requests/s"].significant  # the same 10 apart, within the repeats' spread


def test_compare_needs_repeats_on_both_sides():
    found = compare([_run_with_repeats([100, 101, 99]), _run_with_repeats([90])])
    assert not any(s.title.startswith("repeats") for s in found)
