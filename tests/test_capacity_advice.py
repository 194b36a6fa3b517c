"""Advice that names the right lever: a client that fell behind its schedule with its CPU idle was short of
users, and the capacity answer, the fell-behind warning and the JSON result say "raise -u to at least N"
with N from Little's law (the rate x the time a request held a user, x1.5); only a client whose CPU was
the limit is told to add processes or workers. Both causes: a whole search against the bundled mock (a
fixed 20 ms, no queue, so 8 users carry at most 400 requests/s), and a busy CPU's figures fed to the
verdict (a CPU made busy for real is flaky)."""

from __future__ import annotations

import json
import math

import jsonschema
import pytest

from poolbench_locust.capacity.probes import CLIENT, CPU, USERS, Probe, judge
from poolbench_locust.capacity.report import Outcome
from poolbench_locust.metrics.client_board import Board
from poolbench_locust.metrics.histogram import Histogram
from poolbench_locust.metrics.pacing import (
    CPU_IDLE_PERCENT,
    USERS_HEADROOM,
    PaceFigures,
    behind_warning,
    held_ms,
    users_advice,
    users_needed,
)
from poolbench_locust.options import Settings
from tests.support.harness import options
from tests.support.locust_run import result_schema, run_locust

# ---- Little's law's figure ------------------------------------------------------------------------------


def test_users_needed_is_the_rate_times_the_time_held_with_headroom_rounded_up():
    assert USERS_HEADROOM == 1.5
    assert users_needed(400.0, 20.0) == 12  # 400/s x 0.02 s = 8 busy, x1.5; not 13 from float noise
    assert users_needed(401.0, 20.0) == 13  # 12.03 rounds up
    assert users_needed(512.0, 20.0) == 16  # the run: 10.24 x 1.5 = 15.36
    assert users_needed(512.0, 20.0, headroom=1.0) == 11
    # always more than the users that fell short, and at least one
    assert users_needed(10.0, 20.0, users=8) == 9 and users_needed(0.0, 0.0) == 1
    for rate, held in ((-1.0, 20.0), (10.0, -1.0), (math.nan, 20.0), (10.0, math.inf)):
        with pytest.raises(ValueError):
            users_needed(rate, held)


def test_the_time_a_request_held_a_user_is_its_e2e_less_its_wait_in_the_clients_queue():
    e2e, queue = Histogram(), Histogram()
    for total, waited in ((25.0, 5.0), (30.0, 10.0), (20.0, 0.0), (20.0, 0.0)):
        e2e.add(total)
        queue.add(waited)
    assert held_ms(e2e, queue) == pytest.approx(20.0, rel=0.002)  # the buckets' middles: within 0.05 %
    assert held_ms(e2e, Histogram()) == pytest.approx(23.75, rel=0.002)  # a closed loop: no queue
    assert held_ms(Histogram(), Histogram()) is None


# ---- the verdict's part of the client, from its figures --------------------------------------------------


def settings(*args: str) -> Settings:
    return Settings.from_options(options("--find-capacity", "--slo", "e2e_ms=200", *args))


def behind_probe(**figures: object) -> Probe:
    """A probe at 512/s that sent 78 % of its schedule with its server answering in 20 ms: the issue's run."""
    base = dict(number=2, rate=512.0, seconds=4.0, requests=1600, good=1600, scheduled=2048, sent=1600)
    base |= dict(ttfb_p99_ms=21.0, e2e_p99_ms=900.0, users=8, held_ms=20.0)
    return Probe(**{**base, **figures})  # type: ignore[arg-type]


def outcome_of(bound: Probe) -> Outcome:
    found = Outcome("e2e_ms=200", 0.99, 0.05, ended="client")
    found.probes.append(judge(behind_probe(number=1, rate=256.0, scheduled=1024, sent=1024), settings()))
    found.probes.append(bound)
    return found


def test_behind_with_an_idle_cpu_the_users_are_the_limit_and_the_answer_sizes_them():
    probe = judge(behind_probe(cpu_peak=12.0), settings())
    assert not probe.passed and probe.limited_by == CLIENT and probe.client_limit == USERS
    assert probe.users_needed == 16 >= 512 * 20.0 / 1000
    assert "8 users that each held a request 20.0 ms carry at most 400.0 requests/s" in probe.why
    assert f"the client's CPU peaked at 12 % of a core, idle below {CPU_IDLE_PERCENT:g} %" in probe.why
    found = outcome_of(probe)
    answer = found.answer()
    assert answer.startswith("Capacity: not claimed for the server: the client was the limit at 512.0 requests/s")
    assert "its users, not its CPU" in answer
    assert "Raise -u to at least 16 (Little's law: 512.0 requests/s x 20.0 ms a request held a user, x1.5)" in answer
    assert "Run it again with" not in answer and "would share the same -u and change nothing" in answer
    result = found.as_dict()
    assert (result["limited_by"], result["client_limit"], result["users_needed"]) == (CLIENT, USERS, 16)
    last = result["probes"][-1]
    assert (last["client_limit"], last["users_needed"], last["held_ms"]) == (USERS, 16, 20.0)
    assert result["probes"][0]["client_limit"] is None  # a passing probe has no client verdict


def test_users_too_few_by_littles_law_are_the_limit_whatever_the_cpu_short_of_busy():
    """A CPU between idle and busy (or unknown: a master reads no peak per probe) is not the limit where the
    users could not carry the rate at the time each held a request (or 80 % of them were kept busy)."""
    for peak in (75.0, None):
        probe = judge(behind_probe(cpu_peak=peak), settings())
        assert probe.client_limit == USERS and probe.users_needed == 16, probe.why
    # the same users carry 400/s: at 300/s they were free a quarter of the time, the CPU is named
    carried = judge(behind_probe(rate=300.0, scheduled=1200, sent=1000, cpu_peak=75.0), settings())
    assert carried.limited_by == CLIENT and carried.client_limit == CPU and carried.users_needed is None
    assert "Run it again with 2 --processes or workers." in outcome_of(carried).answer()


def test_users_mostly_free_name_the_cpu_even_where_its_figure_reads_idle():
    """A process a busy machine gives a fifth of a core reads 20 % while it cannot hand out its arrivals:
    64 users x 20 ms carry 3,200/s, a sixth of them busy at 512/s. Without a request to time, the CPU's
    peak decides."""
    starved = judge(behind_probe(users=64, cpu_peak=20.0), settings())
    assert starved.client_limit == CPU and starved.users_needed is None
    assert "64 users that each held a request 20.0 ms carry 3,200.0 requests/s: most were free" in "; ".join(
        starved.why
    )
    untimed = judge(behind_probe(held_ms=None, requests=0, good=0, cpu_peak=20.0), settings())
    assert untimed.client_limit == USERS and untimed.users_needed is None
    assert "Raise -u; more --processes or workers would share the same -u" in outcome_of(untimed).answer()
    assert judge(behind_probe(held_ms=None, requests=0, good=0, cpu_peak=60.0), settings()).client_limit == CPU


def test_a_lower_max_concurrency_is_the_option_named():
    probe = judge(behind_probe(cpu_peak=12.0), settings("--max-concurrency", "4"))
    assert probe.client_limit == USERS and probe.users_option == "--max-concurrency" and probe.users_needed == 16
    assert "4 users that each held a request 20.0 ms carry at most 200.0 requests/s" in probe.why
    assert "Raise --max-concurrency to at least 16" in outcome_of(probe).answer()


def test_a_busy_cpu_is_the_limit_and_the_answer_names_processes_not_users():
    """The figures of a client whose CPU stayed above 90 % (CpuWatch's) while it fell behind."""
    probe = judge(behind_probe(cpu_busy=True, cpu_peak=99.0), settings())
    assert probe.limited_by == CLIENT and probe.client_limit == CPU and probe.users_needed is None
    assert "the client's CPU stayed above 90 % (peak 99 %)" in probe.why
    found = outcome_of(probe)
    answer = found.answer()
    assert "Run it again with 2 --processes or workers." in answer
    assert "Raise -u" not in answer and "its users" not in answer
    result = found.as_dict()
    assert (result["client_limit"], result["users_needed"]) == (CPU, None)


def test_a_server_verdict_has_no_client_part():
    slow = judge(behind_probe(ttfb_p99_ms=900.0, good=100, cpu_peak=10.0), settings())
    assert slow.limited_by == "server" and slow.client_limit is None and slow.users_needed is None


# ---- the open loop's fell-behind warning -----------------------------------------------------------------


def test_the_warning_of_a_process_short_of_slots_sizes_the_users_and_of_a_busy_one_names_processes():
    figures = PaceFigures(target_rate=512.0, scheduled=6144, sent=4800, seconds=12.0, behind=True, cause="slots")
    figures.cpu_peak, figures.behind_sent_rate, figures.behind_scheduled_rate = 14.0, 400.0, 512.0
    advice = users_advice(512.0, 20.0, users_needed(512.0, 20.0, 8))
    text = behind_warning("local", figures, True, advice=advice)
    assert "Likely cause: no free slot: every user was busy with a request when its arrival fell due; the users" in text
    assert "were the limit, not the client's CPU (peak 14 % of a core): raise -u to at least 16 (Little's law" in text
    # the board asks for the advice with the run's target, every process's together
    asked: list[float | None] = []
    board = Board(advice=lambda rate: asked.append(rate) or advice)
    board.update("worker 1", figures)
    board.update("worker 2", PaceFigures(target_rate=512.0, scheduled=6144, sent=6144, seconds=12.0))
    assert asked == [512.0] and "raise -u to at least 16" in board.summary_warnings()[0] and asked[-1] == 1024.0
    busy = PaceFigures(target_rate=512.0, scheduled=6144, sent=4800, seconds=12.0, behind=True, cause="cpu")
    text = behind_warning("local", busy, False, advice=advice)
    assert "client CPU: the process could not run its schedule in time (add --processes or workers)" in text
    assert "raise -u" not in text


# ---- a whole search against the mock: 8 users, 20 ms, no queue ------------------------------------------


@pytest.mark.timing
@pytest.mark.searches(seconds=10)
def test_against_a_20_ms_server_with_8_users_the_search_says_raise_the_users(mock_server_factory, tmp_path):
    """8 users x 20 ms carry at most 400/s: the probe at 250/s passes, the one at 500/s falls behind with the
    client's CPU far from busy. The answer, the warning and the JSON result name the users and size them by
    Little's law; none says processes. Probes of 4 s: the fell-behind warning needs a few seconds behind."""
    mock = mock_server_factory("--ttfb-ms", "20")
    result = tmp_path / "cap.json"
    done = run_locust(
        "locustfiles/embeddings.py",
        *("--find-capacity", "--slo", "e2e_ms=200", "--capacity-start-rate", "250", "--sweep-step-time", "4"),
        *("--input-len", "6", "--only-summary", "--server-metrics", "off"),
        host=mock.url,
        users=8,
        json_result=result,
        timeout=90,
    )
    assert done.returncode == 3, done.stderr[-3000:]  # no capacity claimed: the checks' code
    doc = json.loads(result.read_text())
    capacity = doc["capacity"]
    assert capacity["limited_by"] == CLIENT and capacity["ended"] == "client", capacity["answer"]
    assert capacity["client_limit"] == USERS, capacity["answer"]
    bound = min((p for p in capacity["probes"] if not p["passed"]), key=lambda p: p["rate"])
    assert bound["client_limit"] == USERS and bound["held_ms"] >= 20.0
    needed = capacity["users_needed"]
    assert needed == bound["users_needed"] and needed >= bound["rate"] * bound["held_ms"] / 1000 and needed > 8
    assert needed >= bound["rate"] * 20.0 / 1000  # the server's own 20 ms, whatever the client added
    answer = next(line for line in done.stderr.splitlines() if line.startswith("Capacity: "))
    assert "its users, not its CPU" in answer and f"Raise -u to at least {needed} (Little's law" in answer
    assert "Run it again with" not in done.stderr
    # the open loop's warning says the same lever
    warning = next(line for line in done.stderr.splitlines() if "The open loop fell behind on local" in line)
    assert "the users were the limit" in warning and "raise -u to at least" in warning, warning
    assert "add --processes or workers" not in warning
    jsonschema.validate(doc, result_schema())
