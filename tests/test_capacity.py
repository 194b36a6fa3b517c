"""--find-capacity: the search's arithmetic, each probe's verdict, the options it refuses at start, and
whole searches against a server of known capacity (tests/support/slots_server.py: N slots x a fixed
service time, its M/D/N answer computed here) and against one far faster than one client process."""

from __future__ import annotations

import csv
import json
import math
import statistics
from contextlib import AbstractContextManager

import jsonschema
import pytest

from poolbench_locust.capacity.probes import CLIENT, CPU, SERVER, Probe, judge
from poolbench_locust.capacity.repeated import Searches
from poolbench_locust.capacity.report import Outcome
from poolbench_locust.capacity.search import Search
from poolbench_locust.options import OptionError, Settings
from tests.support.harness import options
from tests.support.hostile import server_process
from tests.support.locust_run import result_schema, run_locust
from tests.support.slots_server import md_n_attainment_rate


def slots_server(slots: int, service_ms: float) -> AbstractContextManager[str]:
    env = {"SLOTS_N": str(slots), "SLOTS_SERVICE_MS": str(service_ms)}
    return server_process("tests.support.slots_server:slots", env)


# ---- the search's arithmetic ---------------------------------------------------------------------------


def run_search(search: Search, capacity: float) -> list[float]:
    """The rates a search probes against a server that passes every rate up to `capacity`."""
    probed = []
    while (rate := search.next_rate()) is not None:
        probed.append(rate)
        search.record(rate, rate <= capacity)
        assert len(probed) < 60, probed
    return probed


def test_the_search_doubles_to_an_upper_bound_then_bisects_to_the_precision():
    search = Search(start=40, precision=0.05)
    probed = run_search(search, capacity=153)
    assert probed[:3] == [40, 80, 160]  # doubling until the first failure
    assert probed[3:5] == [120, 140]  # then halving the bracket
    assert search.passed is not None and search.failed is not None
    assert search.passed <= 153 < search.failed and search.failed - search.passed <= 0.05 * search.passed


def test_a_search_whose_first_probe_fails_halves_down_and_stops_when_nothing_passes():
    search = Search(start=100, precision=0.05)
    probed = run_search(search, capacity=30)
    assert probed[:3] == [100, 50, 25]
    assert 30 * 0.95 <= search.passed <= 30 < search.failed
    nothing = Search(start=100, precision=0.05)
    assert run_search(nothing, capacity=0)[-1] >= 100 / 1024 and nothing.passed is None


# ---- a probe's verdict ----------------------------------------------------------------------------------


def settings(*args: str) -> Settings:
    return Settings.from_options(options("--find-capacity", "--slo", "e2e_ms=60", *args))


def probe(**figures: float) -> Probe:
    base = dict(number=1, rate=100.0, seconds=4.0, requests=400, good=400, scheduled=400, sent=400)
    return Probe(**{**base, **figures})  # type: ignore[arg-type]


def test_a_probe_passes_when_attainment_failures_and_the_rate_sent_all_hold():
    assert judge(probe(good=396), settings()).passed  # 99.0 %
    low = judge(probe(good=395), settings())
    assert not low.passed and low.limited_by == SERVER and "98.8 % of requests met e2e_ms=60" in low.why[0]
    assert not judge(probe(good=396), settings("--capacity-attainment", "0.995")).passed
    failing = judge(probe(failures=8, good=392), settings("--capacity-attainment", "0.9"))
    assert not failing.passed and "2.0 % failed (at most 1 %)" in failing.why[0]
    assert judge(probe(failures=8, good=392), settings("--capacity-attainment", "0.9", "--check-fail-ratio", "0.05"))


def test_one_arrival_still_in_dispatch_at_a_short_probes_end_fails_nothing():
    """A probe of 15 arrivals at 10/s: one not yet taken by a user when the window closed is 93.3 % sent, no
    schedule missed (pacing's MIN_SHORTFALL); two short are."""
    assert judge(probe(rate=10.0, seconds=1.5, requests=14, good=14, scheduled=15, sent=14), settings()).passed
    two_short = judge(probe(rate=10.0, seconds=1.5, requests=13, good=13, scheduled=15, sent=13), settings())
    assert not two_short.passed and "the client sent 86.7 % of its schedule" in two_short.why


def test_a_client_that_fell_behind_is_the_limit_unless_the_server_was_slow_too():
    fast_server = judge(probe(sent=300, good=300, requests=300, ttfb_p99_ms=25.0), settings())
    assert not fast_server.passed and fast_server.limited_by == CLIENT
    assert "the client sent 75.0 % of its schedule" in fast_server.why
    slow_server = judge(probe(sent=300, good=30, requests=300, ttfb_p99_ms=900.0), settings())
    assert not slow_server.passed and slow_server.limited_by == SERVER
    busy = judge(probe(cpu_busy=True, cpu_peak=99.0), settings())
    assert busy.limited_by == CLIENT and busy.workers_needed() == 2


def test_a_probe_whose_scheduler_was_starved_is_the_clients_cpu_not_the_server():
    """A starved dispatcher catches up when it runs, so it sends all it schedules (behind compares those) while
    the arrivals reached the users late: seen as 5,452 of 7,750 requests/s when a second search shared the
    CPU, and the verdict named the server. The share the dispatcher put out late names the client's CPU."""
    starved = judge(probe(dispatched_late=40, sent=400, good=300), settings())
    assert not starved.passed and starved.limited_by == CLIENT and starved.client_limit == CPU
    assert "the client's scheduler put 10.0 % of the arrivals out over 50 ms late" in starved.why[-1]
    assert starved.workers_needed() == 2
    # a few late arrivals (a GC pause) are not a starved loop: the server's verdict stands
    assert judge(probe(dispatched_late=19, good=300), settings()).limited_by == SERVER


# ---- refused at start -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "--find-capacity: the capacity is the highest rate that meets --slo: give --slo"),
        (("--slo", "e2e_ms=60", "--sweep-rates", "10,20"), "--sweep-rates: --find-capacity sets the rate"),
        (("--slo", "e2e_ms=60", "--sweep-users", "1,2"), "--sweep-users: --find-capacity sets the rate"),
        (("--slo", "e2e_ms=60", "--request-rate", "5"), "--request-rate: --find-capacity sets the rate"),
        (("--slo", "e2e_ms=60", "--dataset", "trace:t.jsonl"), "--find-capacity: a trace (--dataset trace:)"),
    ],
)
def test_what_the_search_cannot_run_with_is_refused_naming_the_option(args, message):
    with pytest.raises(OptionError) as refused:
        Settings.from_options(options("--find-capacity", *args))
    assert str(refused.value).startswith(message), str(refused.value)


def test_an_attainment_outside_zero_to_one_stops_the_run_at_start():
    for bad in ("0", "1.5"):
        result = run_locust("locustfiles/embeddings.py", "--find-capacity", "--capacity-attainment", bad)
        assert result.returncode == 2 and "argument --capacity-attainment: must be" in result.stderr


def test_without_slo_the_run_stops_at_start_before_any_request(mock_server):
    result = run_locust("locustfiles/embeddings.py", "--find-capacity", host=mock_server.url, users=4, run_time="5s")
    assert result.returncode == 1 and "--find-capacity: the capacity is the highest rate" in result.stderr
    assert mock_server.stats()["requests"] == 0


# ---- whole searches --------------------------------------------------------------------------------------

# Sixteen slots x 100 ms, 95 % within 150 ms: a knee sharp enough that 6 s probes find it within 10 % in 99 % of
# searches (python -m tests.support.capacity_montecarlo 16 100 150 80 6 --attainment 0.95: 1.0 % missed); of 4 x 20 ms
# at 99 % within 60 ms, 15.0 % missed (a CI run: 137.5/s where 153.1 was computed), and a fixed 6 ms of the client's
# own moved that answer 4 % (this one's 2 %).
SLOTS, SERVICE_MS, SLO_MS, ATTAINMENT = 16, 100.0, 150.0, 0.95
SLO = f"e2e_ms={SLO_MS:g}"
TARGET = ("--slo", SLO, "--capacity-attainment", f"{ATTAINMENT:g}")


def search_run(url: str, tmp_path, *args: str, timeout: float = 150):
    prefix, result = tmp_path / "cap", tmp_path / "cap.json"
    done = run_locust(
        "locustfiles/embeddings.py",
        *("--find-capacity", "--input-len", "6", "--only-summary", *args),
        host=url,
        users=64,
        csv=prefix,
        json_result=result,
        timeout=timeout,
    )
    with open(f"{prefix}_capacity.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return done, rows, json.loads(result.read_text())


@pytest.mark.timing
@pytest.mark.searches(seconds=53)
def test_against_a_server_of_four_slots_the_search_finds_its_m_d_n_capacity(tmp_path):
    """16 slots x 100 ms serve 160/s; with Poisson arrivals 95 % finish within 150 ms up to about 136.9/s.

    Probes of 6 s: near the knee the queue takes seconds to reach its steady state, and a 3 s probe that
    starts from a calmer one passes where the steady state fails (of 4 x 20 ms at 99 %, 168.75/s passed at 99.0 %
    where the steady state meets 94.5 %: issue 33)."""
    computed = md_n_attainment_rate(SLOTS, SERVICE_MS, SLO_MS, ATTAINMENT)
    assert 130 < computed < 145
    with slots_server(SLOTS, SERVICE_MS) as url:
        done, rows, doc = search_run(
            url,
            tmp_path,
            *TARGET,
            *("--capacity-start-rate", "80", "--sweep-step-time", "6"),
            *("--server-metrics-interval", "0.5"),  # its /metrics: the requests waiting for a slot
        )
    assert done.returncode == 0, done.stderr[-3000:]
    capacity = doc["capacity"]
    assert capacity["limited_by"] == SERVER and capacity["ended"] == "converged"
    assert capacity["requests_per_s"] == pytest.approx(computed, rel=0.10), capacity["answer"]
    assert capacity["input_tokens_per_s"] == pytest.approx(6 * capacity["measured_requests_per_s"], rel=0.01)
    # one CSV row a probe, as in the JSON result; the bracket is within the precision
    assert [float(r["Target Requests/s"]) for r in rows] == pytest.approx(
        [p["rate"] for p in capacity["probes"]], abs=0.01
    )
    passed = max(p["rate"] for p in capacity["probes"] if p["passed"])
    failed = min(p["rate"] for p in capacity["probes"] if not p["passed"])
    assert passed == capacity["requests_per_s"] and failed - passed <= 0.05 * passed
    assert all(p["sent_ratio"] >= 0.95 for p in capacity["probes"] if p["passed"])
    # the console: the probe table and its one answer line
    answer = next(line for line in done.stderr.splitlines() if line.startswith("Capacity: "))
    assert f"Capacity: {passed:,.1f} requests/s" in answer and "limited by the server" in answer
    assert f"within {SLO}" in answer and "Capacity search over after" in done.stderr
    # the server's own evidence, from --server-metrics: its queue, quoted at the answer and the bound, far
    # longer where the rate overloaded it than at the first probe
    waiting = {p["rate"]: p["server_waiting"] for p in capacity["probes"]}
    running = {p["rate"]: p["server_running"] for p in capacity["probes"]}
    if max(waiting[passed], waiting[failed]) >= 0.5:
        assert (
            f"its own queue held {waiting[passed]:,.1f} requests at {passed:,.1f}/s and {waiting[failed]:,.1f}"
            in answer
        )
    else:  # a bound that failed by a hair, its queue as empty as the answer's (a CI run: 0.4 and 0.3): the slots said
        assert (
            f"nothing waited in its queue; it ran {running[passed]:,.1f} requests at once at {passed:,.1f}/s" in answer
        )
    assert waiting[80.0] < 0.5 and max(w for w in waiting.values() if w is not None) > 5
    # the chart of the probes beside the CSV: attainment and p99 against the rate, every probe marked
    image = (tmp_path / "cap_capacity.svg").read_text()
    assert "Capacity: attainment" in image and "Capacity: E2E p99" in image and f"SLO {SLO}" in image
    assert all(f">#{n}<" in image for n in range(1, len(rows) + 1)), image[:2000]
    jsonschema.validate(doc, result_schema())  # schema.json holds the document's own keys: the rooms' merged in


@pytest.mark.timing
@pytest.mark.searches(seconds=26)
def test_after_a_probe_that_overloaded_the_server_the_next_starts_from_an_empty_queue(tmp_path):
    """4 slots x 40 ms (100/s): the probe at 120/s leaves about 60 requests queued at the server; the next, at 90/s,
    meets 300 ms for 99.8 % of requests in the steady state. Had its arrivals joined that queue, it would drain at
    10/s through the probe's settle and window, and fail (a CI run: a 75/s probe after one at 100/s of this server
    met 89.7 % within 120 ms, where the steady state meets 99.3 %)."""
    with slots_server(4, 40.0) as url:
        done, _, doc = search_run(
            url,
            tmp_path,
            *("--slo", "e2e_ms=300", "--capacity-attainment", "0.95", "--capacity-start-rate", "60"),
            *("--sweep-step-time", "2", "--server-metrics", "off"),
        )
    assert done.returncode == 0, done.stderr[-3000:]
    first = doc["capacity"]["probes"][:3]
    assert [(p["rate"], p["passed"]) for p in first] == [(60.0, True), (120.0, False), (90.0, True)], first


@pytest.mark.timing
@pytest.mark.searches(seconds=68)
def test_with_two_worker_processes_the_master_drives_the_probes_to_the_same_answer(tmp_path):
    """The same server, the search driven by a master over 2 worker processes (each takes half the rate)."""
    computed = md_n_attainment_rate(SLOTS, SERVICE_MS, SLO_MS, ATTAINMENT)
    with slots_server(SLOTS, SERVICE_MS) as url:
        done, rows, doc = search_run(
            url,
            tmp_path,
            *TARGET,
            *("--capacity-start-rate", "80", "--sweep-step-time", "6"),
            *("--processes", "2", "--server-metrics", "off"),
        )
    assert done.returncode == 0, done.stderr[-3000:]
    capacity = doc["capacity"]
    assert doc["run"]["runner"] == "master" and doc["run"]["workers"] == 2
    assert capacity["limited_by"] == SERVER and capacity["ended"] == "converged"
    assert capacity["requests_per_s"] == pytest.approx(computed, rel=0.10), capacity["answer"]
    assert len(rows) == len(capacity["probes"]) >= 5
    # the probes' figures are the workers' own, as of each mark: the rate sent is the rate asked
    assert all(p["requests_per_s"] == pytest.approx(p["rate"], rel=0.15) for p in capacity["probes"][1:] if p["passed"])


@pytest.mark.timing
@pytest.mark.alone
def test_against_a_server_far_faster_than_the_client_no_capacity_is_claimed(tmp_path):
    """A server that answers at once: the client falls behind before the SLO breaks at the server; the
    verdict is the client's, the run exits with the checks' code and says how many processes to try."""
    with slots_server(10_000, 0) as url:
        done, rows, doc = search_run(
            url,
            tmp_path,
            *("--slo", "e2e_ms=200", "--capacity-start-rate", "1000", "--sweep-step-time", "2"),
            *("--server-metrics", "off"),
        )
    assert done.returncode == 3, done.stderr[-3000:]
    capacity = doc["capacity"]
    assert capacity["limited_by"] == CLIENT and capacity["requests_per_s"] is None and capacity["ended"] == "client"
    last = capacity["probes"][-1]
    assert not last["passed"] and last["limited_by"] == CLIENT and rows[-1]["Limited By"] == CLIENT
    assert "Capacity: not claimed for the server: the client was the limit" in done.stderr
    assert "--processes or workers" in done.stderr and "Check failed: --find-capacity" in done.stderr


def test_the_run_time_caps_a_search_and_the_answer_says_it_was_cut_short(tmp_path):
    """Locust starts -t's timer only once a load shape has ended: the search keeps it itself. Its probes (10 to
    80 requests/s against 160) pass whatever the machine's load: an objective of 1 s, not the module's 150 ms (with
    the parallel part beside it, a 100 ms server's p99 reached 193 ms and the first probe failed)."""
    with slots_server(SLOTS, SERVICE_MS) as url:
        done, rows, doc = search_run(
            url,
            tmp_path,
            *("--slo", "e2e_ms=1000", "--capacity-start-rate", "10", "--sweep-step-time", "1"),
            *("--server-metrics", "off", "-t", "5s"),
        )
    assert done.returncode == 0, done.stderr[-3000:]
    capacity = doc["capacity"]
    assert capacity["ended"] == "cut short" and 1 <= len(rows) <= 3, capacity["answer"]
    assert "Capacity search cut short by the run time (-t 5s)" in done.stderr
    assert "the search was cut short by the run time" in capacity["answer"]


# ---- --repeat: whole searches, their answers' mean and 95 % interval ----------------------------------------


def outcome(capacity: float, bound_by: str = SERVER) -> Outcome:
    """A search that passed at `capacity` and failed just above it, by `bound_by`."""
    found = Outcome("e2e_ms=60", 0.99, 0.05, ended="converged" if bound_by == SERVER else "client")
    found.probes.append(probe(rate=capacity, passed=True, limited_by=SERVER))
    found.probes.append(probe(rate=capacity * 1.04, passed=False, limited_by=bound_by))
    return found


def test_repeated_searches_give_the_mean_of_their_answers_and_its_student_t_interval():
    searches = Searches(3, [outcome(150), outcome(156), outcome(147)])
    assert searches.over() and searches.claimed()
    found = searches.as_dict()
    assert found["requests_per_s"] == pytest.approx(151.0)
    # mean 151, sd 4.583: half width t(0.975, 2) 4.3027 x 4.583 / sqrt(3) = 11.385
    assert found["requests_per_s_ci95"] == pytest.approx([139.615, 162.385], abs=0.002)
    assert [s["requests_per_s"] for s in found["searches"]] == [150, 156, 147]
    assert [p["search"] for p in found["probes"]] == [1, 1, 2, 2, 3, 3]
    assert searches.answer().startswith("Capacity over 3 searches: 151.0 requests/s (95 % CI 139.6 .. 162.4;")
    top = searches.repeats()
    assert top is not None and [r["requests_per_s"] for r in top["repeats"]] == [150, 156, 147]
    assert top["requests_per_s_ci95"] == found["requests_per_s_ci95"]


def test_a_repeated_search_stops_at_the_first_client_limit_and_claims_nothing():
    searches = Searches(5, [outcome(150), outcome(400, bound_by=CLIENT)])
    assert searches.over() and not searches.claimed() and searches.failed()
    found = searches.as_dict()
    assert found["requests_per_s"] is None and found["requests_per_s_ci95"] is None
    assert found["limited_by"] == CLIENT and "not claimed (search 2 claimed none" in found["answer"]
    assert not Searches(5, [outcome(150)]).over()


@pytest.mark.timing
@pytest.mark.searches(seconds=107)
@pytest.mark.beside_pairs
@pytest.mark.timeout(450)
def test_five_searches_give_an_interval_that_holds_the_m_d_n_capacity(tmp_path):
    """--repeat 5 --find-capacity: five independent searches of the 16 x 100 ms server; the run's 95 % interval is
    Student's of their answers, and the answers centre on the computed capacity: their 99.9 % interval holds it.

    Asked of the 95 % interval, the test would fail in 1 run of 20 by that interval's own definition, more with
    2 s probes' spread (python -m tests.support.capacity_montecarlo 16 100 150 80 2 --attainment 0.95 --repeat 5:
    15.0 % of runs; of the 99.9 % interval, 0.3 %)."""
    computed = md_n_attainment_rate(SLOTS, SERVICE_MS, SLO_MS, ATTAINMENT)
    with slots_server(SLOTS, SERVICE_MS) as url:
        done, rows, doc = search_run(
            url,
            tmp_path,
            *TARGET,
            *("--capacity-start-rate", "80", "--sweep-step-time", "2"),
            *("--server-metrics", "off", "--repeat", "5"),
            timeout=400,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    capacity = doc["capacity"]
    answers = [s["requests_per_s"] for s in capacity["searches"]]
    assert len(answers) == 5 and all(s["limited_by"] == SERVER for s in capacity["searches"]), capacity["answer"]
    low, high = capacity["requests_per_s_ci95"]
    mean, spread = statistics.fmean(answers), statistics.stdev(answers) / math.sqrt(5)
    assert [low, high] == pytest.approx([mean - 2.776 * spread, mean + 2.776 * spread], abs=0.01)  # t(0.975, 4)
    assert mean - 8.610 * spread <= computed <= mean + 8.610 * spread, (answers, computed)  # t(0.9995, 4)
    # each repeat at the JSON result's top level is one search, its figure the search's answer
    assert [r["requests_per_s"] for r in doc["repeats"]] == answers and doc["requests_per_s_ci95"] == [low, high]
    assert {int(r["Search"]) for r in rows} == {1, 2, 3, 4, 5}
    assert f"Capacity over 5 searches: {capacity['requests_per_s']:,.1f} requests/s (95 % CI {low:,.1f}" in done.stderr
    jsonschema.validate(doc, result_schema())  # schema.json holds the document's own keys: the rooms' merged in


def test_a_server_verdict_on_a_probe_the_client_fell_behind_says_the_server_held_the_users():
    """Behind its schedule, the client is cleared only by the server's own slow answers: the answer says
    so, not that the client kept its schedule."""
    found = Outcome("e2e_ms=60", 0.99, 0.05, ended="converged")
    found.probes.append(judge(probe(rate=150.0), settings()))
    found.probes.append(judge(probe(rate=156.0, sent=300, good=30, requests=300, ttfb_p99_ms=900.0), settings()))
    assert found.limited_by == SERVER
    answer = found.answer()
    assert "the client sent 75.0 % of its schedule with its own time to headers at 900.0 ms (p99)" in answer
    assert "kept its schedule" not in answer


def test_where_nothing_waited_the_answer_quotes_what_the_server_ran_at_once():
    """vLLM runs every pooling request it holds at once (its waiting gauge stayed 0 against the real CPU
    build): the evidence is then its running requests, which grew with the rate."""
    found = Outcome("e2e_ms=2000", 0.99, 0.05, ended="converged")
    found.probes.append(judge(probe(rate=7.5, server_waiting=0.0, server_running=3.1), settings()))
    found.probes.append(judge(probe(rate=7.8, good=200, server_waiting=0.0, server_running=12.4), settings()))
    assert "nothing waited in its queue; it ran 3.1 requests at once at 7.5/s and 12.4 at 7.8/s" in found.answer()
    queued = Outcome("e2e_ms=60", 0.99, 0.05, ended="converged")
    queued.probes.append(judge(probe(rate=150.0, server_waiting=0.4, server_running=4.0), settings()))
    queued.probes.append(judge(probe(rate=156.0, good=300, server_waiting=21.0, server_running=4.0), settings()))
    assert "its own queue held 0.4 requests at 150.0/s and 21.0 at 156.0/s" in queued.answer()


def test_where_the_server_reports_neither_queue_nor_running_the_answer_quotes_its_own_latency():
    """vLLM's pooling runner (CPU build) left num_requests_waiting and num_requests_running at 0 while its own
    latency histogram grew: an empty gauge is no evidence, its latency is."""
    found = Outcome("e2e_ms=2000", 0.99, 0.05, ended="converged")
    quiet = dict(server_waiting=0.0, server_running=0.0)
    found.probes.append(judge(probe(rate=5.8, server_latency_ms=310.0, **quiet), settings()))
    found.probes.append(judge(probe(rate=6.0, good=300, server_latency_ms=1480.0, **quiet), settings()))
    answer = found.answer()
    assert "its own mean latency was 310 ms at 5.8/s and 1,480 ms at 6.0/s" in answer
    assert "ran 0.0" not in answer and "held 0.0" not in answer
