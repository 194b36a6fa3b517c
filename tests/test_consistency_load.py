"""Answers by load (docs/consistency.md, Gates and load windows): each sweep step, capacity probe and repeat
carries the answers compared in it, so the load where they begin to drift shows; --check-min-cosine and
--check-max-top1-changed fail the run naming the name and that load; --slo's cosine= makes --find-capacity
answer below it; a gate nothing could judge is refused at start. Against the bundled mock's faults:
--drift-above N (more than N in flight: a vector turned away, cosine 1891/2080) and --flip-above N (a
rerank's two best documents swapped)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from devsupport.ports import free_port
from poolbench_locust.capacity.probes import Probe, judge
from poolbench_locust.consistency.gates import gate_lines
from poolbench_locust.consistency.measures import compare_scores, compare_vectors
from poolbench_locust.consistency.state import TOTAL, Consistency
from poolbench_locust.options import Settings, Slo
from poolbench_locust.options.parsers import slo
from tests.support.harness import options
from tests.support.locust_run import CONSISTENCY_ON, run_locust, valid_result

DRIFTED_COSINE = 1891 / 2080
"""The mock's drifted vector against the honest one (docs/mock-server.md)."""
LOAD = ("--input-len", "8", "--batch-size", "2", "--documents", "4", "--stop-timeout", "3", "--consistency-rate", "1")
CHECKS_EXIT_CODE = 3


@pytest.fixture(autouse=True)
def _consistency_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite turns the check off (tests/conftest.py); here it is on, as by default."""
    monkeypatch.setenv("LOCUST_NO_CONSISTENCY", "false")


def _run(url: str, tmp_path: Path, locustfile: str, users: int, *args: str, run_time: str, code: int = 0) -> Any:
    result = run_locust(
        locustfile,
        *LOAD,
        *args,
        host=url,
        users=users,
        spawn_rate=users,
        run_time=run_time,
        csv=tmp_path / "run",
        json_result=tmp_path / "result.json",
        env=CONSISTENCY_ON,
        timeout=120,
    )
    assert result.returncode == code, result.stderr[-3000:]
    return result, valid_result(tmp_path / "result.json")


def failed_checks(stderr: str) -> list[str]:
    return [line.partition("Check failed: ")[2] for line in stderr.splitlines() if "Check failed: " in line]


# ---- whole runs against the mock ---------------------------------------------------------------------------


def test_a_users_sweep_shows_the_step_where_answers_drift_and_the_gate_names_it(mock_server_factory, tmp_path):
    server = mock_server_factory("--ttfb-ms", "20", "--drift-above", "4")
    sweep = ("--sweep-users", "1,2,8", "--sweep-step-time", "3", "--check-min-cosine", "0.99")
    result, document = _run(server.url, tmp_path, "locustfiles/embeddings.py", 8, *sweep, run_time="30s", code=3)
    steps = document["sweep"]["steps"]
    assert [s["Target"] for s in steps] == [1, 2, 8]
    for step in steps[:2]:  # at most 2 in flight: every answer is its reference's, bit for bit
        total = step["consistency"][TOTAL]
        assert total["compared"] > 0 and total["identical_ratio"] == 1.0 and total["cosine_min"] == 1.0, step
    drifted = steps[2]["consistency"]
    assert drifted["/v1/embeddings"]["cosine_min"] == pytest.approx(DRIFTED_COSINE, abs=1e-6)
    assert drifted[TOTAL]["identical_ratio"] < 1.0
    assert sum(s["consistency"][TOTAL]["compared"] for s in steps) <= document["consistency"][TOTAL]["compared"]
    # the gate: the checks' exit code, one line naming the name and the step's load
    [line] = failed_checks(result.stderr)
    assert line.startswith("--check-min-cosine 0.99: the answers of /v1/embeddings drifted at sweep step 3 (8 users): ")
    assert f"cosine {DRIFTED_COSINE:.6f} < 0.99" in line
    # PREFIX_sweep.csv: the step's own columns
    with open(tmp_path / "run_sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["Identical Ratio"] for r in rows[:2]] == ["1.0", "1.0"]
    assert (
        float(rows[2]["Cosine Min"]) == pytest.approx(DRIFTED_COSINE, abs=1e-6) and rows[2]["Top-1 Changed Ratio"] == ""
    )


def test_drift_from_the_first_step_is_named_at_the_first_step(mock_server_factory, tmp_path):
    # A repeated input answered otherwise (--cache-drift) drifts at one user already: the sweep's first step
    # opens its window before Locust's test_start, and that start must not close it.
    server = mock_server_factory("--ttfb-ms", "20", "--cache-drift")
    sweep = ("--sweep-users", "1,4", "--sweep-step-time", "3", "--check-min-cosine", "0.99", "--repeat-ratio", "0.5")
    result, document = _run(server.url, tmp_path, "locustfiles/embeddings.py", 4, *sweep, run_time="30s", code=3)
    first = document["sweep"]["steps"][0]["consistency"]
    assert first is not None and first[TOTAL]["identical_ratio"] < 1.0, document["sweep"]["steps"][0]
    [line] = failed_checks(result.stderr)
    assert "drifted at sweep step 1 (1 users): " in line, line


def test_with_two_workers_the_master_s_steps_hold_their_workers_comparisons(mock_server_factory, tmp_path):
    server = mock_server_factory("--ttfb-ms", "20", "--drift-above", "4")
    port = str(free_port())  # not Locust's default 5557, where another run's workers may be calling
    dist = ("--processes", "2", "--master-bind-port", port, "--master-port", port)
    # Each worker's references are taken before its users start, within the first step: on a busy CI machine
    # they once took most of a 4 s step, whose few requests then carried none. Fewer references, a longer step.
    sweep = ("--sweep-users", "2,8", "--sweep-step-time", "6", "--check-min-cosine", "0.99")
    sweep += ("--consistency-inputs", "4")
    result, document = _run(server.url, tmp_path, "locustfiles/embeddings.py", 8, *sweep, *dist, run_time="30s", code=3)
    assert document["run"]["runner"] == "master"
    low, high = (s["consistency"][TOTAL] for s in document["sweep"]["steps"])
    assert low["compared"] > 0 and low["identical_ratio"] == 1.0
    assert high["cosine_min"] == pytest.approx(DRIFTED_COSINE, abs=1e-6)
    assert low["compared"] + high["compared"] <= document["consistency"][TOTAL]["compared"]
    [line] = failed_checks(result.stderr)
    assert "the answers of /v1/embeddings drifted at sweep step 2 (8 users): " in line


def test_at_one_user_the_same_server_passes_the_gate(mock_server_factory, tmp_path):
    server = mock_server_factory("--ttfb-ms", "5", "--drift-above", "4")
    result, document = _run(
        server.url, tmp_path, "locustfiles/embeddings.py", 1, "--check-min-cosine", "0.99", run_time="3s"
    )
    total = document["consistency"][TOTAL]
    assert total["compared"] > 0 and total["identical_ratio"] == 1.0
    assert not failed_checks(result.stderr)


def test_each_repeat_carries_its_own_answers_and_the_gate_names_the_first_that_drifted(mock_server_factory, tmp_path):
    server = mock_server_factory("--ttfb-ms", "20", "--drift-above", "4")
    result, document = _run(
        server.url, tmp_path, "locustfiles/embeddings.py", 8, "--repeat", "2", "--check-min-cosine", "0.99",
        run_time="6s", code=CHECKS_EXIT_CODE,
    )  # fmt: skip
    repeats = document["repeats"]
    assert [r["repeat"] for r in repeats] == [1, 2]
    for repeat in repeats:
        assert repeat["consistency"]["/v1/embeddings"]["cosine_min"] == pytest.approx(DRIFTED_COSINE, abs=1e-6)
    [line] = failed_checks(result.stderr)
    assert "the answers of /v1/embeddings drifted at repeat 1: " in line
    assert "Identical %" in result.stderr and "Cos Min" in result.stderr  # the repeats' console table


def test_a_rerank_whose_order_flips_under_load_fails_the_top1_gate_at_that_load(mock_server_factory, tmp_path):
    server = mock_server_factory("--ttfb-ms", "20", "--flip-above", "2")
    sweep = ("--sweep-users", "1,8", "--sweep-step-time", "3", "--check-max-top1-changed", "0.1")
    result, document = _run(server.url, tmp_path, "locustfiles/rerank.py", 8, *sweep, run_time="30s", code=3)
    low, high = (s["consistency"] for s in document["sweep"]["steps"])
    [name] = set(low) - {TOTAL}
    assert low[name]["top1_changed_ratio"] == 0.0 and low[name]["kendall_tau_min"] == 1.0
    assert high[name]["top1_changed_ratio"] > 0.1 and "cosine_min" not in high[name]
    [line] = failed_checks(result.stderr)
    assert line.startswith(f"--check-max-top1-changed 0.1: the answers of {name} drifted at sweep step 2 (8 users): ")


@pytest.mark.timing
@pytest.mark.searches(seconds=22)
def test_find_capacity_with_a_cosine_term_answers_below_the_load_where_drift_begins(mock_server_factory, tmp_path):
    """50 ms an answer, drift above 4 in flight: 10 requests/s hold one in flight at a time, about; the
    search doubles from there until a probe's answers drift, then bisects below it."""
    server = mock_server_factory("--ttfb-ms", "50", "--drift-above", "4")
    search = ("--find-capacity", "--slo", "e2e_ms=1000,cosine=0.99", "--capacity-start-rate", "10")
    # every answer compared: ~20 a probe at least; 2 s probes, as a 1 s one judged the client by a few arrivals
    # (80/s beside the other searches: 94.8 % sent by the window's end, 95 % needed)
    search += ("--capacity-precision", "0.25", "--sweep-step-time", "2")
    result, document = _run(server.url, tmp_path, "locustfiles/embeddings.py", 32, *search, run_time="60s")
    capacity = document["capacity"]
    probes = capacity["probes"]
    assert probes[0]["rate"] == 10 and probes[0]["passed"], probes[0]
    for probe in probes:  # a probe passes exactly when its answers stayed right (the time term is loose)
        cosine = probe["consistency"][TOTAL]["cosine_min"]
        assert probe["passed"] == (cosine >= 0.99), probe
        if not probe["passed"]:
            assert f"cosine {DRIFTED_COSINE:.6g} < 0.99 for /v1/embeddings" in probe["why"], probe
    drift_began = min(p["rate"] for p in probes if not p["passed"])
    assert capacity["limited_by"] == "server" and 10 <= capacity["requests_per_s"] < drift_began
    assert (
        f"at {drift_began:,.1f} requests/s cosine {DRIFTED_COSINE:.6g} < 0.99 for /v1/embeddings" in capacity["answer"]
    )
    assert "Cos Min" in result.stderr  # the probe table's columns


@pytest.mark.parametrize(
    ("locustfile", "args", "message"),
    [
        (
            "embeddings.py",
            ("--check-min-cosine", "0.99", "--no-consistency"),
            "--check-min-cosine: the gate judges answers compared with their reference: --no-consistency turns that "
            "off",
        ),
        (
            "embeddings.py",
            ("--find-capacity", "--slo", "e2e_ms=500,cosine=0.99", "--consistency-inputs", "0"),
            "--slo: cosine= judges answers compared with their reference: --consistency-inputs 0 turns that off",
        ),
        (
            "rerank.py",
            ("--find-capacity", "--slo", "e2e_ms=500,cosine=0.99"),
            "--slo: cosine= cannot judge RerankUser (/rerank): its answers hold no vectors to compare",
        ),
        (
            "embeddings.py",
            ("--check-max-top1-changed", "0.1"),
            "--check-max-top1-changed: the gate cannot judge EmbeddingsUser (/v1/embeddings): its answers hold no "
            "scores to compare",
        ),
        (
            "classify.py",
            ("--check-min-cosine", "0.99"),
            "--check-min-cosine: the gate cannot judge ClassifyUser (/classify): its answers hold no vectors to "
            "compare",
        ),
        (
            "embeddings.py",
            ("--check-min-cosine", "0.99", "--slo", "e2e_ms=500,top1_changed=0.1"),
            "--slo: top1_changed= judges each probe of --find-capacity",
        ),
    ],
)
def test_a_gate_nothing_could_judge_stops_the_run_at_start(mock_server, locustfile, args, message):
    result = run_locust(
        f"locustfiles/{locustfile}", *args, host=mock_server.url, users=1, run_time="3s", env=CONSISTENCY_ON
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert message in result.stderr, result.stderr[-2000:]
    assert mock_server.stats()["requests"] == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cosine=1.5", "cosine must be a cosine in (-1, 1], got '1.5'"),
        ("cosine=-1", "cosine must be a cosine in (-1, 1], got '-1'"),
        ("e2e_ms=300,top1_changed=2", "top1_changed must be a ratio from 0 to 1"),
        ("cosine=0.9,cosine=0.8", "cosine is given twice"),
    ],
)
def test_a_bad_answers_term_of_slo_is_refused_naming_it(text, message):
    with pytest.raises(Exception, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        slo(text)


# ---- the figures and verdicts alone ------------------------------------------------------------------------


def test_the_slo_keeps_its_answers_terms_and_no_request_is_judged_by_them():
    objective = slo("e2e_ms=300,cosine=0.99,top1_changed=0.05")
    assert objective == Slo(e2e_ms=300.0, cosine=0.99, top1_changed=0.05)
    assert str(objective) == "e2e_ms=300,cosine=0.99,top1_changed=0.05"
    assert objective.met(200.0, {}) and not objective.met(400.0, {})
    assert Slo(cosine=0.99).met(10_000.0, {})  # no time bound: every successful request meets it


def _state() -> Consistency:
    """Two windows of /e: honest at 1 user, drifted at 8; the run's tallies hold both."""
    state = Consistency()
    right, wrong = [1.0, 0.0, 0.0], [0.9, 0.1, 0.0]
    state.open_window("sweep step 1 (1 users)")
    state.add("/e", compare_vectors(right, right), ship=False)
    state.close_window()
    state.open_window("sweep step 2 (8 users)")
    state.add("/e", compare_vectors(right, wrong), ship=False)
    state.add("/e", compare_vectors(right, right), ship=False)
    return state


def test_a_gate_names_the_first_window_past_its_bound_open_or_closed():
    state = _state()
    gate = Settings.from_options(options("--check-min-cosine", "0.999"))
    [line] = gate_lines(state, gate)  # the step still open (the gate runs before the sweep's last step closes)
    assert line.startswith("--check-min-cosine 0.999: the answers of /e drifted at sweep step 2 (8 users): cosine 0.99")
    assert line.endswith("(2 compared)")
    closed = state.close_window()
    assert closed is not None and closed["/e"]["compared"] == 2 and closed[TOTAL]["identical_ratio"] == 0.5
    assert gate_lines(state, gate) == [line]
    assert gate_lines(state, Settings.from_options(options("--check-min-cosine", "0.99"))) == []


def test_a_gate_without_windows_judges_the_run_and_one_with_nothing_compared_fails_saying_so():
    state = Consistency()
    state.add("/r", compare_scores([0.9, 0.1, 0.5], [0.1, 0.9, 0.5]), ship=False)
    [line] = gate_lines(state, Settings.from_options(options("--check-max-top1-changed", "0")))
    assert line == (
        "--check-max-top1-changed 0: the answers of /r drifted over the run: top-1 changed in 100.0 % of answers "
        "> 0 % (1 compared)"
    )
    state.restart()
    [line] = gate_lines(state, Settings.from_options(options("--check-min-cosine", "0.5")))
    assert line == (
        "--check-min-cosine 0.5: no answer was compared with its reference: nothing to vouch for (docs/consistency.md)"
    )


def test_a_window_outlives_a_stats_reset_but_not_a_new_run():
    state = _state()
    state.close_window()
    state.reset()  # the end of --warmup, a repeat's end
    assert [w.label for w in state.windows] == ["sweep step 1 (1 users)", "sweep step 2 (8 users)"]
    state.open_window("repeat 1")
    state.add("/e", compare_vectors([1.0, 0.0], [1.0, 0.0]), ship=False)
    state.reset()
    assert state.close_window() is None  # its comparisons before the reset are not its own
    state.restart()
    assert state.windows == [] and state.figures() is None


def test_a_probe_fails_on_its_answers_naming_the_name_and_with_none_compared():
    found = {"/e": {"compared": 4, "cosine_min": 0.9}, "/r": {"compared": 2, "top1_changed_ratio": 0.5}}
    found[TOTAL] = {"compared": 6, "cosine_min": 0.9}
    settings = Settings.from_options(options("--find-capacity", "--slo", "e2e_ms=60,cosine=0.99,top1_changed=0.1"))
    base = dict(number=1, rate=100.0, seconds=4.0, requests=400, good=400, scheduled=400, sent=400)
    probe = judge(Probe(**base, consistency=found), settings)  # type: ignore[arg-type]
    assert not probe.passed and probe.limited_by == "server"
    assert probe.why == ["cosine 0.9 < 0.99 for /e", "top-1 changed in 50.0 % > 10 % for /r"]
    unjudged = judge(Probe(**base), settings)  # type: ignore[arg-type]
    assert unjudged.why == ["no answer was compared with its reference: the answers' terms of --slo judged none"]
    assert judge(Probe(**base), Settings.from_options(options("--find-capacity", "--slo", "e2e_ms=60"))).passed  # type: ignore[arg-type]
