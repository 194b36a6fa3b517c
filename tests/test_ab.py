"""--ab-host and --ab-paired: two servers on one schedule. Each host's figures under its own request names
([A], [B]) in Locust's tables; B against A, each figure's difference with an interval and a verdict, in the
console, PREFIX_ab.csv and the JSON result's `ab`; a B of known larger delay is found slower, beyond noise,
and two identical servers are within noise; bad input stops the run at start naming the host."""

from __future__ import annotations

import argparse
import random

import pytest

from devsupport.ports import free_port
from poolbench_locust.ab.compare import MIN_SECONDS, compare
from poolbench_locust.ab.samples import MAX_KEPT, Block, Samples
from poolbench_locust.engine.ab import mark, same_host, side_of, unmarked
from poolbench_locust.options import ALL_OPTIONS, OptionError, Settings
from tests.support.locust_run import LOAD, PREFLIGHT_ON, run_locust


def _options(**given: object) -> argparse.Namespace:
    values = {opt.dest: opt.default for opt in ALL_OPTIONS}
    return argparse.Namespace(**(values | given))


# --- the options ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "option", "says"),
    [
        ({"ab_paired": True}, "--ab-paired", "give --ab-host too"),
        ({"ab_host": "127.0.0.1:8001"}, "--ab-host", "must be an http:// or https:// URL"),
        ({"ab_host": "http://b:8000", "dataset": "trace:t.jsonl"}, "--ab-host", "replays each request once"),
        (
            {"ab_host": "http://b:8000", "ab_paired": True, "find_capacity": True, "slo": "e2e_ms=100"},
            "--ab-paired",
            "probes each host alone",
        ),
        ({"server_metrics": "B=http://b:8000/metrics"}, "--server-metrics", "give --ab-host"),
    ],
    ids=["paired without a host", "not a URL", "a trace", "a paired capacity search", "a metrics URL of host B"],
)
def test_a_bad_value_or_combination_names_the_option(given, option, says):
    with pytest.raises(OptionError) as refused:
        Settings.from_options(_options(**given))
    assert refused.value.option == option
    assert says in str(refused.value)


def test_names_are_marked_by_host():
    assert mark(None, "http://a:1") == ""
    assert mark("http://b:2", "http://a:1") == " [A]"
    assert mark("http://b:2/", "HTTP://B:2") == " [B]"
    assert side_of("/v1/embeddings [B]") == "B" and side_of("/v1/embeddings [A]") == "A"
    assert side_of("/v1/embeddings") is None and unmarked("/rerank [A]") == "/rerank"
    assert same_host("http://x", "http://x:80/") and not same_host("http://x:8000", "http://x:8001")
    assert not same_host("http://x:8000", "https://x:8000")


# --- the comparison's arithmetic ------------------------------------------------------------------------------


def _blocks(seconds: int, per_second: int, b_scale: float, rng: random.Random) -> list[Block]:
    """Seconds of two hosts whose E2E are lognormal around 20 ms, B's times `b_scale` times A's law."""
    blocks = []
    for _ in range(seconds):
        block = Block()
        for side, scale in ((block.a, 1.0), (block.b, b_scale)):
            side.requests = side_ok = per_second
            side.input_tokens = 100 * side_ok
            side.e2e = sorted(scale * 20 * rng.lognormvariate(0, 0.2) for _ in range(per_second))
            side.ttfb = sorted(0.8 * v for v in side.e2e)
        blocks.append(block)
    return blocks


def test_a_known_difference_is_found_and_said_beyond_noise():
    found = compare(_blocks(20, 100, 1.2, random.Random(1)), paired=False)
    p50 = next(r for r in found.rows if r.figure.name == "p50 E2E")
    assert p50.difference == pytest.approx(20, abs=3)
    assert p50.low is not None and p50.low > 0 and p50.beyond_noise
    assert p50.verdict() == f"B: p50 E2E {p50.difference:.0f} % higher, beyond noise (worse)"
    throughput = next(r for r in found.rows if r.figure.name == "throughput")
    assert throughput.difference == 0 and throughput.beyond_noise is False
    assert "p50 E2E" in found.summary()


def test_tokens_counted_differently_by_the_hosts_get_no_verdict():
    """vLLM's usage counts tokens, Infinity's characters: the same inputs, 5 times the "tokens" (seen A/B'ing
    the real two). Their tokens/s would say B is 400 % better; it is no verdict, and says why."""
    blocks = _blocks(20, 100, 1.0, random.Random(4))
    for block in blocks:
        block.b.input_tokens *= 5
    tokens = next(r for r in compare(blocks, paired=False).rows if r.figure.name == "input tokens/s")
    assert tokens.beyond_noise is None and tokens.difference is None
    assert "the hosts count the same inputs' tokens differently: A 100.0 a request, B 500.0" in tokens.verdict()
    for block in blocks:  # counted alike to within 1 %: compared
        block.b.input_tokens = block.a.input_tokens + 1
    alike = next(r for r in compare(blocks, paired=False).rows if r.figure.name == "input tokens/s")
    assert alike.beyond_noise is not None


def test_the_same_law_is_within_noise_in_most_runs():
    # the table's intervals hold together with 95 %: of 40 runs of one law, at most a few may call any figure
    alarms = sum(
        any(r.beyond_noise for r in compare(_blocks(15, 60, 1.0, random.Random(seed)), paired=False).rows)
        for seed in range(40)
    )
    assert alarms <= 4


def test_too_short_a_run_or_too_few_requests_get_no_verdict():
    short = compare(_blocks(MIN_SECONDS - 1, 100, 2.0, random.Random(2)), paired=False)
    assert all(r.beyond_noise is None for r in short.rows)
    assert short.summary() == f"A/B: no verdict: {MIN_SECONDS - 1} seconds of both hosts; {MIN_SECONDS} needed"
    few = compare(_blocks(12, 50, 2.0, random.Random(3)), paired=False)  # 600 a host: p99 needs 1,000
    p99 = next(r for r in few.rows if r.figure.name == "p99 E2E")
    assert p99.beyond_noise is None and "too few requests" in p99.verdict()
    assert next(r for r in few.rows if r.figure.name == "p90 E2E").beyond_noise


def test_kept_times_stay_bounded_and_a_servers_nonsense_is_not_kept():
    samples = Samples()
    for i in range(3 * MAX_KEPT):
        samples.add("A" if i % 2 else "B", False, 10.0 + i % 7, {"ttfb_ms": 5.0, "input_tokens": 3}, 1000.0 + i / 1000)
    kept = sum(len(b.a.e2e) + len(b.b.e2e) for b in samples.blocks())
    assert kept <= MAX_KEPT and samples.stride == 4
    assert sum(b.a.requests + b.b.requests for b in samples.blocks()) == 3 * MAX_KEPT  # every request counted
    before = sum(len(b.a.e2e) for b in samples.blocks())
    for bad in (-1.0, float("nan"), float("inf"), True, "12", 1e12):
        samples.add("A", False, bad, {"ttfb_ms": bad, "input_tokens": bad}, 1000.0)
    assert sum(len(b.a.e2e) for b in samples.blocks()) == before


def test_pairs_are_matched_by_their_id():
    samples = Samples(paired=True)
    samples.add("A", False, 10.0, {"ab_pair": 1}, 0)
    samples.add("A", False, 11.0, {"ab_pair": 2}, 0)
    samples.add("B", False, 13.0, {"ab_pair": 1}, 0)
    samples.add("B", True, 14.0, {"ab_pair": 3}, 0)  # its A never came
    (pair,) = samples.blocks()
    assert pair.a.e2e == [10.0] and pair.b.e2e == [13.0]


# --- runs against the mock ------------------------------------------------------------------------------------


def ab_run(a: str, b: str, tmp_path, *args: str, run_time: str = "12s", users: int = 4, env=None):
    return run_locust(
        "locustfiles/embeddings.py",
        *LOAD,
        "--ab-host",
        b,
        *args,
        host=a,
        users=users,
        run_time=run_time,
        csv=tmp_path / "r",
        json_result=tmp_path / "r.json",
        env=env,
    )


def _figure(doc, name):
    return next(f for f in doc["ab"]["figures"] if f["figure"] == name)


@pytest.mark.timing
def test_a_slower_b_is_found_slower_beyond_noise(mock_server_factory, tmp_path):
    a, b = mock_server_factory("--ttfb-ms", "10"), mock_server_factory("--ttfb-ms", "25")
    result = ab_run(a.url, b.url, tmp_path, "--html", str(tmp_path / "r.html"))
    assert result.returncode == 0, result.stderr[-3000:]
    page = (tmp_path / "r.html").read_text()
    assert 'id="poolbench-ab"' in page and "higher, beyond noise (worse)" in page
    stats = result.csv()
    assert {"/v1/embeddings [A]", "/v1/embeddings [B]"} <= set(stats)
    count_a, count_b = (int(stats[f"/v1/embeddings [{s}]"]["Request Count"]) for s in "AB")
    assert abs(count_a - count_b) <= 4  # in turn, per user: one schedule shared
    assert a.stats()["requests"] >= count_a and b.stats()["requests"] >= count_b
    assert set(result.csv("pooling")) >= {"/v1/embeddings [A]", "/v1/embeddings [B]"}
    doc = result.json()
    assert doc["ab"]["mode"] == "alternate" and doc["ab"]["blocks"] >= MIN_SECONDS
    p50 = _figure(doc, "p50 E2E")
    # 10 ms against 25 ms to the headers (and the same few ms of the rest): B some 50 to 150 % slower
    assert p50["beyond_noise"] is True and 40 < p50["difference"] < 200, p50
    assert p50["verdict"].startswith("B: p50 E2E") and "higher, beyond noise (worse)" in p50["verdict"]
    assert _figure(doc, "p50 TTFB")["beyond_noise"] is True
    assert p50["low"] > 0 and p50["b"] > p50["a"]
    assert (tmp_path / "r_ab.csv").read_text().splitlines()[0].startswith("Figure,Unit,A,B,B - A")
    output = result.stdout + result.stderr
    assert "A/B: B http://127.0.0.1" in output and "beyond noise (worse)" in output


@pytest.mark.timing
def test_two_identical_servers_are_within_noise(mock_server_factory, tmp_path):
    a, b = mock_server_factory("--ttfb-ms", "10"), mock_server_factory("--ttfb-ms", "10")
    # A verdict at 95 % errs in about one run of 20 by design (bench/ab_false_alarm.py measures how often):
    # a first run beyond noise gets a second, and two in a row fail.
    for _attempt in range(2):
        result = ab_run(a.url, b.url, tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        doc = result.json()
        judged = [f for f in doc["ab"]["figures"] if f["beyond_noise"] is not None]
        assert {"p50 E2E", "mean E2E", "throughput"} <= {f["figure"] for f in judged}
        if not any(f["beyond_noise"] for f in judged):
            break
    assert doc["ab"]["summary"] == "A/B: every figure of B within noise of A's", doc["ab"]
    assert abs(_figure(doc, "p50 E2E")["difference"]) < 15


@pytest.mark.timing
def test_paired_sends_each_input_to_both_at_once(mock_server_factory, tmp_path):
    a, b = mock_server_factory("--ttfb-ms", "5"), mock_server_factory("--ttfb-ms", "15")
    result = ab_run(a.url, b.url, tmp_path, "--ab-paired", "--max-requests", "400", run_time="30s")
    assert result.returncode == 0, result.stderr[-3000:]
    stats = result.csv()
    assert stats["/v1/embeddings [A]"]["Request Count"] == stats["/v1/embeddings [B]"]["Request Count"]
    assert a.stats()["requests"] == b.stats()["requests"]
    doc = result.json()
    assert doc["ab"]["mode"] == "paired" and doc["ab"]["block"] == "pair" and doc["ab"]["blocks"] >= 150
    assert {f["figure"] for f in doc["ab"]["figures"]}.isdisjoint({"throughput", "input tokens/s"})
    assert _figure(doc, "p50 TTFB")["beyond_noise"] is True and _figure(doc, "p50 TTFB")["difference"] > 50


def test_without_ab_host_there_is_no_comparison(mock_server, tmp_path):
    result = run_locust(
        "locustfiles/embeddings.py",
        *LOAD,
        host=mock_server.url,
        users=1,
        requests=10,
        csv=tmp_path / "r",
        json_result=tmp_path / "r.json",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.json()["ab"] is None and "/v1/embeddings" in result.csv()
    assert not (tmp_path / "r_ab.csv").exists()


# --- bad input ------------------------------------------------------------------------------------------------


def _stopped(result, says: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-2000:]
    assert says in output, output[-2000:]
    assert "Aggregated" not in output and "Traceback" not in output


def test_b_equal_to_a_stops_the_run(mock_server, tmp_path):
    result = ab_run(mock_server.url, mock_server.url + "/", tmp_path, run_time="5s")
    _stopped(result, f"--ab-host {mock_server.url}: the same server as --host")


def test_an_unreachable_b_is_named(mock_server, tmp_path):
    b = f"http://127.0.0.1:{free_port()}"
    result = ab_run(mock_server.url, b, tmp_path, run_time="5s")
    _stopped(result, f"--ab-host {b}: cannot connect to 127.0.0.1")
    assert mock_server.stats()["requests"] == 0


def test_a_route_only_a_serves_stops_the_run_naming_b(mock_server, tmp_path):
    b = f"{mock_server.url.replace('127.0.0.1', 'localhost')}/elsewhere"  # the same mock: 404 under /elsewhere
    result = ab_run(mock_server.url, b, tmp_path, run_time="5s", env=PREFLIGHT_ON)
    _stopped(result, f"preflight: EmbeddingsUser (POST /elsewhere/v1/embeddings) on --ab-host {b} failed: HTTP 404")
