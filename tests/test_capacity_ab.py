"""--find-capacity with --ab-host: each host's own capacity under the same --slo, their searches' probes
interleaved in time (A's, then B's, then A's next), every request of a probe sent to that probe's host alone;
against two servers of known different capacity (tests/support/slots_server.py: N slots x a fixed service
time, their M/D/N answers computed here), each found near its own, in the right order, in the console, the
capacity CSV, the JSON result's `capacity` (each host's under `ab`) and the cost table's capacity rows."""

from __future__ import annotations

import csv
import json
import re

import jsonschema
import pytest

from tests.support.hostile import server_process
from tests.support.locust_run import result_schema, run_locust
from tests.support.slots_server import md_n_attainment_rate

SERVICE_MS, SLO_MS, ATTAINMENT = 50.0, 150.0, 0.95
A_SLOTS, B_SLOTS = 4, 2


@pytest.mark.timing
@pytest.mark.alone
def test_each_host_gets_its_own_capacity_from_interleaved_probes(tmp_path):
    """A: 4 slots x 50 ms (95 % within 150 ms up to about 67/s); B: 2 slots x 50 ms (about 28/s). Probes of 3 s
    and a 10 % precision keep it short: the answers are asked within 15 % of the computed ones. Times of tens of
    ms and 95 %, not 99 %: a shared machine's scheduling noise is a few ms, in the far tail more."""
    a_capacity = md_n_attainment_rate(A_SLOTS, SERVICE_MS, SLO_MS, ATTAINMENT)
    b_capacity = md_n_attainment_rate(B_SLOTS, SERVICE_MS, SLO_MS, ATTAINMENT)
    assert a_capacity > 2 * b_capacity
    prefix, result = tmp_path / "cap", tmp_path / "cap.json"
    servers = [{"SLOTS_N": str(n), "SLOTS_SERVICE_MS": f"{SERVICE_MS:g}"} for n in (A_SLOTS, B_SLOTS)]
    slots = "tests.support.slots_server:slots"
    with server_process(slots, servers[0]) as a, server_process(slots, servers[1]) as b:
        done = run_locust(
            "locustfiles/embeddings.py",
            *("--find-capacity", "--ab-host", b, "--input-len", "6", "--only-summary", "--server-metrics", "off"),
            *("--slo", f"e2e_ms={SLO_MS:g}", "--capacity-attainment", f"{ATTAINMENT:g}"),
            *("--capacity-start-rate", "20", "--capacity-precision", "0.1"),
            *("--sweep-step-time", "3", "--gpu-hour-cost", "2"),
            host=a,
            users=64,
            csv=prefix,
            json_result=result,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(result.read_text())
    jsonschema.validate(doc, result_schema())
    capacity = doc["capacity"]
    hosts = capacity["ab"]
    assert hosts["A"]["host"] == a and hosts["B"]["host"] == b
    for side, computed in (("A", a_capacity), ("B", b_capacity)):
        found = hosts[side]
        assert found["limited_by"] == "server" and found["ended"] == "converged", found["answer"]
        assert found["requests_per_s"] == pytest.approx(computed, rel=0.15), found["answer"]
        # every request of a probe went to its host: its own names counted the whole rate, not half of it
        passed = [p for p in found["probes"] if p["passed"]]
        assert passed and all(p["requests_per_s"] == pytest.approx(p["rate"], rel=0.15) for p in passed), passed
    assert hosts["B"]["requests_per_s"] < hosts["A"]["requests_per_s"]
    assert hosts["b_against_a_percent"] == pytest.approx(
        100 * (hosts["B"]["requests_per_s"] / hosts["A"]["requests_per_s"] - 1)
    )
    # the keys of the capacity object are A's (--host's) search, as a run without --ab-host has them
    assert capacity["requests_per_s"] == hosts["A"]["requests_per_s"] and capacity["probes"] == hosts["A"]["probes"]
    # interleaved: A's probe, B's, A's next, ... until one host's search is over
    order = re.findall(r"Capacity probe ([AB])(\d+):", done.stderr)
    turns = [side for side, _ in order]
    shorter = min(len(hosts["A"]["probes"]), len(hosts["B"]["probes"]))
    assert turns[: 2 * shorter] == ["A", "B"] * shorter, turns
    # the CSV: a row a probe, its host first, each host's rates as in the JSON result
    with open(f"{prefix}_capacity.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for side in "AB":
        rates = [float(r["Target Requests/s"]) for r in rows if r["Host"] == side]
        assert rates == [round(p["rate"], 2) for p in hosts[side]["probes"]]
    # the console: each host's answer line, and B's against A's
    for side, host in (("A", a), ("B", b)):
        assert f"Capacity of {side} ({host}): {hosts[side]['requests_per_s']:,.1f} requests/s" in done.stderr
    assert hosts["answer"] in done.stderr and "% lower than A." in hosts["answer"]
    # the price at each host's own capacity: B serves fewer requests an hour for the same price
    at = doc["cost"]["capacity_per_host"]
    assert at["A"]["requests_per_s"] == hosts["A"]["requests_per_s"]
    assert at["B"]["usd_per_1k_requests"] > at["A"]["usd_per_1k_requests"]
    assert "host [A], its capacity found" in done.stderr and "host [B], its capacity found" in done.stderr
