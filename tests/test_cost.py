"""--gpu-hour-cost and --gpus: the price of a million input tokens and of a thousand requests, the arithmetic
on the run's own measured throughput, in the JSON result and the console summary; a bad price stops the run."""

from __future__ import annotations

import argparse

import pytest

from poolbench_locust.ab.compare import compare
from poolbench_locust.ab.samples import Block
from poolbench_locust.cost.cost_report import fleet
from poolbench_locust.cost.pricing import Throughput, price, row
from poolbench_locust.options import ALL_OPTIONS, OptionError, Settings
from tests.support.hostile import server_process
from tests.support.locust_run import LOAD, run_locust


def _options(**given: str) -> argparse.Namespace:
    values = {opt.dest: opt.default for opt in ALL_OPTIONS}
    return argparse.Namespace(**(values | given))


@pytest.mark.parametrize("bad", ["0", "-2.5", "free", "nan", "inf"])
def test_a_price_that_is_not_a_positive_number_names_the_option(bad):
    with pytest.raises(OptionError) as refused:
        Settings.from_options(_options(gpu_hour_cost=bad))
    assert refused.value.option == "--gpu-hour-cost"


def test_gpus_without_a_price_is_refused():
    with pytest.raises(OptionError) as refused:
        Settings.from_options(_options(gpus="4"))
    assert refused.value.option == "--gpus"
    assert Settings.from_options(_options(gpus="4", gpu_hour_cost="2.5")).gpus == (4,)


@pytest.mark.parametrize(
    ("given", "option", "says"),
    [
        ({"gpu_hour_cost": "2.5,1.2"}, "--gpu-hour-cost", "one per host of --ab-host (A,B): give --ab-host"),
        ({"gpu_hour_cost": "2.5", "gpus": "1,2"}, "--gpus", "one per host of --ab-host (A,B): give --ab-host"),
        ({"gpu_hour_cost": "2.5,1,3", "ab_host": "http://b:1"}, "--gpu-hour-cost", "one value, or one per host"),
        ({"gpu_hour_cost": "2.5,0", "ab_host": "http://b:1"}, "--gpu-hour-cost", "must be a number > 0"),
        ({"gpu_hour_cost": "2.5,nan", "ab_host": "http://b:1"}, "--gpu-hour-cost", "must be a number > 0"),
        ({"gpu_hour_cost": "2", "gpus": "2,x", "ab_host": "http://b:1"}, "--gpus", "must be a whole number >= 1"),
    ],
    ids=["two prices, one host", "two counts, one host", "three prices", "a free B", "nan", "a bad count"],
)
def test_a_price_per_host_needs_two_hosts_and_good_values(given, option, says):
    with pytest.raises(OptionError) as refused:
        Settings.from_options(_options(**given))
    assert refused.value.option == option and says in str(refused.value), str(refused.value)


def test_one_value_prices_both_hosts_two_each_its_own():
    both = Settings.from_options(_options(gpu_hour_cost="2.5", gpus="2", ab_host="http://b:1"))
    assert [fleet(both, side) for side in ("A", "B", None)] == [(2.5, 2)] * 3
    each = Settings.from_options(_options(gpu_hour_cost="2.5,1.2", gpus="1,4", ab_host="http://b:1"))
    assert [fleet(each, side) for side in ("A", "B", None)] == [(2.5, 1), (1.2, 4), (2.5, 1)]


def test_the_ab_comparison_prices_each_host_at_its_fleets_hour():
    # one schedule: both hosts 100 requests of 1,000 tokens a second; B's fleet costs $1 an hour, A's $2
    blocks = []
    for i in range(20):
        block = Block()
        for side in (block.a, block.b):
            side.requests, side.input_tokens = 100, 100_000
            side.e2e = [10.0 + (i + k) % 5 for k in range(100)]
        blocks.append(block)
    found = {r.figure.name: r for r in compare(blocks, paired=False, hourly=(2.0, 1.0)).rows}
    per_1m = found["USD/1M input tokens"]
    assert per_1m.a == pytest.approx(2.0 / (100_000 * 3600) * 1e6) and per_1m.b == pytest.approx(per_1m.a / 2)
    assert per_1m.difference == pytest.approx(-50.0) and per_1m.beyond_noise
    assert per_1m.verdict() == "B: USD/1M input tokens 50 % lower, beyond noise (better)"
    assert found["USD/1k requests"].b == pytest.approx(1.0 / (100 * 3600) * 1e3)
    # the price rows leave the other intervals as wide as without them
    assert compare(blocks, paired=False).z == compare(blocks, paired=False, hourly=(2.0, 1.0)).z
    assert "USD/1M input tokens" not in {r.figure.name for r in compare(blocks, paired=False).rows}
    assert not {"USD/1M input tokens", "USD/1k requests"} & {
        r.figure.name for r in compare(blocks, paired=True, hourly=(2.0, 1.0)).rows
    }
    for block in blocks:  # the hosts count the same inputs' tokens differently: no price per token compared
        block.b.input_tokens *= 5
    tokens = {r.figure.name: r for r in compare(blocks, paired=False, hourly=(2.0, 1.0)).rows}
    assert (
        tokens["USD/1M input tokens"].beyond_noise is None and "differently" in tokens["USD/1M input tokens"].verdict()
    )
    assert tokens["USD/1k requests"].beyond_noise


def test_each_host_is_priced_at_its_own_gpus_and_share(mock_server_factory, tmp_path):
    a, b = mock_server_factory(), mock_server_factory("--ttfb-ms", "2")
    result = run_locust(
        "locustfiles/embeddings.py",
        *LOAD,
        *("--ab-host", b.url, "--gpu-hour-cost", "2.5,1.2", "--gpus", "1,4"),
        host=a.url,
        users=2,
        requests=200,
        csv=tmp_path / "r",
        json_result=tmp_path / "r.json",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    doc = result.json()
    cost = doc["cost"]
    hosts = cost["per_host"]
    assert (hosts["A"]["gpu_hour_usd"], hosts["A"]["gpus"], hosts["A"]["usd_per_hour"]) == (2.5, 1, 2.5)
    assert (hosts["B"]["gpu_hour_usd"], hosts["B"]["gpus"], hosts["B"]["usd_per_hour"]) == (1.2, 4, 4.8)
    assert cost["usd_per_hour"] == pytest.approx(7.3)  # both fleets, over what the two did together
    for side, host in hosts.items():
        assert host["usd_per_1m_input_tokens"] == pytest.approx(
            host["usd_per_hour"] / (host["input_tokens_per_s"] * 3600) * 1e6
        )
        assert host["usd_per_1k_requests"] == pytest.approx(
            host["usd_per_hour"] / (host["requests_per_s"] * 3600) * 1e3
        )
        row = next(r for r in doc["requests"] if r["name"] == f"/v1/embeddings [{side}]")
        pooling = row["pooling"]  # its own requests' tokens, over the same seconds as its requests
        per_request = pooling["Input Tokens"] / (pooling["Request Count"] - pooling["Failure Count"])
        assert host["input_tokens_per_s"] / host["requests_per_s"] == pytest.approx(per_request)
    shown = result.stdout + result.stderr
    assert "Cost (--gpu-hour-cost: A $2.5 x 1 GPU = $2.5/hour, B $1.2 x 4 GPUs = $4.8/hour" in shown
    line = next(x for x in result.stderr.splitlines() if x.startswith("host [B], its share")).split()
    assert line[4] == f"${hosts['B']['usd_per_1m_input_tokens']:.4g}"
    figures = {f["figure"]: f for f in doc["ab"]["figures"]}
    assert figures["USD/1M input tokens"]["unit"] == "USD" and figures["USD/1M input tokens"]["b"] is not None
    assert "USD/1k requests" in (tmp_path / "r_ab.csv").read_text()


def test_the_price_is_the_fleets_hour_over_what_it_did_in_it():
    # 2 GPUs at $3/h: $6/h; 1,000 tokens/s are 3.6M tokens an hour, 10 requests/s are 36,000
    p = price(3.0, 2, Throughput(requests_per_s=10.0, input_tokens_per_s=1000.0, at="measured"))
    assert p.usd_per_hour == 6.0
    assert p.usd_per_1m_input_tokens == pytest.approx(6.0 / 3.6)
    assert p.usd_per_1k_requests == pytest.approx(6.0 / 36.0)
    assert row(p, "x", energy_j_per_1m=1234.5) == ["x", "$1.667", "$0.1667", "1,000.0", "10.00", "1,234.5"]


def test_nothing_done_has_no_price():
    p = price(3.0, 1, Throughput(requests_per_s=0.0, input_tokens_per_s=None, at="measured"))
    assert p.usd_per_1m_input_tokens is None and p.usd_per_1k_requests is None
    assert row(p, "x")[1:4] == ["n/a", "n/a", "no successful request"]


def test_the_run_prices_its_own_measured_throughput(mock_server, tmp_path):
    result = run_locust(
        "locustfiles/embeddings.py",
        *LOAD,
        "--gpu-hour-cost",
        "2.5",
        "--gpus",
        "2",
        host=mock_server.url,
        users=2,
        requests=150,
        json_result=tmp_path / "r.json",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    doc = result.json()
    cost, run = doc["cost"], doc  # vLLM's names of the run's total: the same figures the pooling table shows
    assert cost["gpu_hour_usd"] == 2.5 and cost["gpus"] == 2 and cost["usd_per_hour"] == 5.0
    assert run["completed"] >= 150 and run["failed"] == 0
    assert cost["usd_per_1m_input_tokens"] == pytest.approx(5.0 / (run["total_token_throughput"] * 3600) * 1e6)
    assert cost["usd_per_1k_requests"] == pytest.approx(5.0 / (run["request_throughput"] * 3600) * 1e3)
    assert cost["measured"]["usd_per_1m_input_tokens"] == cost["usd_per_1m_input_tokens"]
    assert cost["capacity"] is None and cost["per_host"] is None and cost["energy_j_per_1m_input_tokens"] is None
    summary = result.stdout + result.stderr
    assert "Cost (--gpu-hour-cost $2.5 x 2 GPUs = $5/hour" in summary
    shown = next(x for x in summary.splitlines() if x.startswith("measured throughput")).split()
    assert shown[2] == f"${cost['usd_per_1m_input_tokens']:.4g}" and shown[3] == f"${cost['usd_per_1k_requests']:.4g}"


def test_without_a_price_the_result_says_none(mock_server, tmp_path):
    result = run_locust(
        "locustfiles/embeddings.py", *LOAD, host=mock_server.url, users=1, requests=10, json_result=tmp_path / "r.json"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.json()["cost"] is None
    assert "--gpu-hour-cost" not in result.stdout + result.stderr


def test_beside_the_price_the_energy_per_million_tokens_of_a_dcgm_exporter(mock_server, tmp_path):
    with server_process("tests.support.dcgm_page:two_gpus") as dcgm:
        result = run_locust(
            "locustfiles/embeddings.py",
            *LOAD,
            *("--server-metrics", f"{mock_server.url}/metrics,{dcgm}/metrics", "--server-metrics-interval", "1"),
            *("--stop-timeout", "5", "--gpu-hour-cost", "4"),
            host=mock_server.url,
            users=2,
            run_time="4s",
            json_result=tmp_path / "g.json",
            timeout=90,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    doc = result.json()
    (block,) = doc["server_metrics"]["gpus"]
    cost = doc["cost"]
    assert block["energy_j_per_1m_input_tokens"] > 0
    assert cost["energy_j_per_1m_input_tokens"] == block["energy_j_per_1m_input_tokens"]
    energy = f"{block['energy_j_per_1m_input_tokens']:,.1f}"
    assert next(x for x in result.stderr.splitlines() if x.startswith("measured throughput")).endswith(energy)


@pytest.mark.timing
def test_a_capacity_found_is_priced_at_its_rate_beside_its_probes_energy(tmp_path):
    """A search against 4 slots x 20 ms (200 requests/s at most), the 250 W dcgm page beside it."""
    env = {"SLOTS_N": "4", "SLOTS_SERVICE_MS": "20"}
    with (
        server_process("tests.support.slots_server:slots", env) as url,
        server_process("tests.support.dcgm_page:two_gpus") as dcgm,
    ):
        result = run_locust(
            "locustfiles/embeddings.py",
            *("--find-capacity", "--slo", "e2e_ms=60", "--input-len", "6", "--only-summary"),
            *("--capacity-start-rate", "50", "--sweep-step-time", "2", "-t", "20s", "--gpu-hour-cost", "3"),
            *("--server-metrics", f"{url}/metrics,{dcgm}/metrics", "--server-metrics-interval", "0.5"),
            host=url,
            users=16,
            json_result=tmp_path / "cap.json",
            timeout=90,
        )
    doc = result.json()
    capacity, cost = doc["capacity"], doc["cost"]
    assert capacity["requests_per_s"] is not None, capacity["answer"]
    best = max((p for p in capacity["probes"] if p["passed"]), key=lambda p: p["rate"])
    priced = cost["capacity"]
    assert priced["requests_per_s"] == capacity["requests_per_s"]
    assert priced["usd_per_1m_input_tokens"] == pytest.approx(3.0 / (capacity["input_tokens_per_s"] * 3600) * 1e6)
    assert priced["usd_per_1k_requests"] == pytest.approx(3.0 / (capacity["requests_per_s"] * 3600) * 1e3)
    assert cost["usd_per_1m_input_tokens"] == priced["usd_per_1m_input_tokens"]  # the headline is the capacity's
    assert cost["energy_j_per_1m_input_tokens"] == best["energy_j_per_1m_input_tokens"] is not None
    line = next(x for x in result.stderr.splitlines() if x.startswith("capacity found"))
    assert line.endswith(f"{best['energy_j_per_1m_input_tokens']:,.1f}")
