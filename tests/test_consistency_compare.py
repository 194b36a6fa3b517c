"""poolbench-compare's answer consistency tables (results/compare_consistency.py): runs against the bundled
mock, honest and drifting, compared name by name; a worse share judged in points, marked and gated like
the other figures; a hostile `consistency` object ignored, not a crash."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from poolbench_locust.results import compare, compare_consistency
from tests.support.locust_run import CONSISTENCY_ON, ROOT, run_locust

NAME = "/v1/embeddings"


@pytest.fixture(autouse=True)
def _consistency_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite turns the check off (tests/conftest.py); here it is on, as by default."""
    monkeypatch.setenv("LOCUST_NO_CONSISTENCY", "false")


@pytest.fixture(scope="module")
def results(mock_server_factory, tmp_path_factory) -> dict[str, Path]:
    """The same test against the honest mock and against one that drifts above one request in flight."""
    folder = tmp_path_factory.mktemp("consistency")
    out = {}
    for label, args in (("honest", ()), ("drift", ("--drift-above", "1"))):
        mock = mock_server_factory("--ttfb-ms", "20", *args)
        out[label] = folder / f"{label}.json"
        done = run_locust(
            "locustfiles/embeddings.py",
            *("--input-len", "8", "--stop-timeout", "3"),
            *("--consistency-rate", "1"),  # every reference answer compared: a run of 80 requests is short
            host=mock.url,
            users=8,
            requests=80,
            json_result=out[label],
            env=CONSISTENCY_ON,
            timeout=90,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    return out


def compare_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "poolbench_locust.results.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def table(stdout: str, title_start: str) -> dict[str, list[str]]:
    """{figure: its row's cells after the figure} of the section whose title starts so."""
    section = next(s for s in stdout.split("\n== ")[1:] if s.startswith(title_start))
    rows = section.split("\n\n", 1)[0].splitlines()[2:]  # the title, then the header
    return {row[:24].strip(): row[24:].split() for row in rows}


def test_an_honest_run_compared_with_itself_shows_every_answer_identical(results):
    honest = str(results["honest"])
    done = compare_cli(honest, honest, "--max-regression", "0%")
    assert done.returncode == 0, done.stdout + done.stderr
    for title in (f"consistency {NAME}", "consistency total"):
        rows = table(done.stdout, title)
        assert rows["Identical share"][:2] == ["1", "1"], done.stdout  # 100 % in both runs
        assert rows["Cosine min"][:2] == ["1", "1"]
        assert all(cells[-1] != "*" for cells in rows.values()), done.stdout


def test_drift_is_marked_and_fails_the_gate(results):
    done = compare_cli(str(results["honest"]), str(results["drift"]), "--max-regression", "5%")
    assert done.returncode == compare.EXIT_REGRESSION, done.stdout + done.stderr
    rows = table(done.stdout, "consistency total")
    assert rows["Identical share"][-1] == "*" and float(rows["Identical share"][1]) < 0.95, done.stdout
    assert rows["Cosine min"][1] == "0.909" and rows["Cosine min"][-1] == "*"
    lines = [line for line in done.stderr.splitlines() if line.startswith("Regression:")]
    assert any("consistency total" in line and "Identical share" in line for line in lines), done.stderr
    assert any("consistency total" in line and "Cosine min 1 -> 0.909" in line for line in lines), done.stderr
    # the drifting run as the base: answers that came right are better, never a regression (its short run's
    # times may be gated on their change alone: not this test's business)
    back = compare_cli(str(results["drift"]), str(results["honest"]), "--max-regression", "5%")
    assert not [line for line in back.stderr.splitlines() if "consistency" in line], back.stderr


def run_of(consistency: Any) -> compare.Run:
    return compare.Run("r.json", {"requests": [], "total": {"name": "Aggregated"}, "consistency": consistency})


def rerank(compared: int, top1_changed_ratio: float, tau: float) -> dict[str, Any]:
    figures = {"compared": compared, "identical_ratio": 1 - top1_changed_ratio, "abs_diff_max": 0.1}
    return {"compared": compared, "top1_changed_ratio": top1_changed_ratio, "kendall_tau_min": tau} | figures


def test_a_share_that_was_zero_is_judged_in_points():
    """0 % -> 30 % of top documents changed has no relative change: it is 30 points worse."""
    base = run_of({"/rerank": rerank(400, 0.0, 1.0), "total": rerank(400, 0.0, 1.0)})
    new = run_of({"/rerank": rerank(400, 0.3, 0.2), "total": rerank(400, 0.3, 0.2)})
    found = compare.compare([base, new])
    [section] = [s for s in found if s.title.startswith("consistency /rerank")]
    assert "compared 400 vs 400" in section.title
    assert [f.title for f in section.figures] == ["Identical share", "Top-1 changed share", "Kendall tau min"]
    top1 = section.changes[0]["Top-1 changed share"]
    assert top1.significant and top1.worse_by(section.figures[1]) == pytest.approx(0.3)
    failed = compare.failed(found, 0.05)
    assert {(r.section.split(" (")[0], r.figure.title) for r in failed} >= {
        ("consistency total", "Top-1 changed share"),
        ("consistency total", "Kendall tau min"),
    }
    # a share's change within its binomial noise is not marked: 2 of 50 against 3 of 50
    small = compare.compare([run_of({"total": rerank(50, 0.04, 0.9)}), run_of({"total": rerank(50, 0.06, 0.9)})])
    [total] = [s for s in small if s.title.startswith("consistency total")]
    assert not total.changes[0]["Top-1 changed share"].significant


@pytest.mark.parametrize(
    "consistency",
    [None, [], "x", {"total": None}, {"total": {"compared": -1}}, {"total": {"compared": True}}, {1: {"compared": 3}}],
)
def test_a_result_without_figures_shows_no_consistency_table(consistency):
    found = compare.compare([run_of(consistency), run_of(consistency)])
    assert not [s for s in found if s.title.startswith("consistency")]
    assert compare_consistency.figures_of({"consistency": consistency}) == {}


def test_a_hostile_figure_is_shown_as_unknown(tmp_path):
    hostile = {"total": {"compared": 10, "identical_ratio": "NaN", "cosine_min": float("inf")}}
    base = {"total": {"compared": 10, "identical_ratio": 1.0, "cosine_min": 1.0}}
    found = compare.compare([run_of(base), run_of(hostile)])
    [total] = [s for s in found if s.title.startswith("consistency total")]
    assert all(c.new is None and not c.significant for c in total.changes[0].values())
    text = compare.text_tables(found, [run_of(base), run_of(hostile)])
    assert "consistency total (compared 10 vs 10)" in text
    json.dumps([s.title for s in found])  # titles are plain text
