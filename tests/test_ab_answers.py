"""--ab-host with answer consistency: B's reference answers compared with A's for the same inputs, by the
measure of each answer's form (cosine for vectors, the best document and Kendall's tau for rankings, the label
for a classification), in the console, PREFIX_consistency.csv, the HTML report and the JSON result's
`ab.answers`; each host's answers under load against its own references (the consistency rows [A] and [B]).
Two identical mocks are at parity; a B whose mock drifts (--drift-above 0: every answer, the references
too) or flips its rankings (--flip-above 0) differs by what that implies."""

from __future__ import annotations

import csv
import json
import logging

import pytest

from devsupport.ports import free_port
from poolbench_locust.consistency.between_hosts import Between, _compare, _merge, summary
from poolbench_locust.consistency.tally import Tally
from tests.support.locust_run import CONSISTENCY_ON, LOAD, run_locust

DRIFT_COSINE = 1891 / 2080
"""The mock's drifted vector against its honest one (mockserver/vectors.py)."""

# (id, locustfile, options, B's mock flags that make it differ)
FORMS = [
    ("embeddings-float", "locustfiles/embeddings.py", (), ("--drift-above", "0")),
    ("embeddings-bytes", "locustfiles/embeddings.py", ("--encoding-format", "bytes"), ("--drift-above", "0")),
    ("rerank", "locustfiles/rerank.py", (), ("--flip-above", "0")),
    ("classify", "locustfiles/classify.py", (), ("--drift-above", "0")),
]


def _run(a: str, b: str, tmp_path, locustfile: str, *args: str):
    result = run_locust(
        locustfile,
        *LOAD,
        *args,
        "--ab-host",
        b,
        "--consistency-rate",
        "1",
        "--html",
        str(tmp_path / "r.html"),
        host=a,
        users=2,
        requests=160,  # each user's 80 go round the pool of 32 (its first few carry the reference inputs)
        csv=tmp_path / "r",
        json_result=tmp_path / "r.json",
        env=CONSISTENCY_ON,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _answers(result) -> dict:
    found = result.json()["ab"]["answers"]
    assert found is not None, result.stderr[-3000:]
    return found


@pytest.mark.parametrize(("locustfile", "args"), [(f[1], f[2]) for f in FORMS], ids=[f[0] for f in FORMS])
def test_two_identical_servers_answer_alike(mock_server_factory, tmp_path, locustfile, args):
    a, b = mock_server_factory(), mock_server_factory()
    result = _run(a.url, b.url, tmp_path, locustfile, *args)
    found = _answers(result)
    total = found["between_hosts"]["total"]
    assert total["compared"] >= 4 and total["identical_ratio"] == 1.0, found
    if "cosine_min" in total:
        assert total["cosine_min"] == 1.0
    assert found["summary"].startswith("B's reference answers are identical to A's")
    # each host's answers under load against its own references
    assert set(found["per_host"]) == {"A", "B"}, found
    assert all(h["compared"] > 0 and h["identical_ratio"] == 1.0 for h in found["per_host"].values()), found
    names = {row["Name"] for row in csv.DictReader((tmp_path / "r_consistency.csv").open())}
    assert any(n.endswith(" [A]") for n in names) and any(n.endswith(" [B]") for n in names), names
    assert any(n.startswith("B against A: ") for n in names), names
    assert "Answers between hosts" in result.stderr and "identical to A's" in result.stderr
    assert "Answers between hosts" in (tmp_path / "r.html").read_text()


@pytest.mark.parametrize(("locustfile", "args", "drift"), [f[1:] for f in FORMS], ids=[f[0] for f in FORMS])
def test_a_drifting_b_differs_by_what_its_drift_implies(mock_server_factory, tmp_path, locustfile, args, drift):
    a, b = mock_server_factory(), mock_server_factory(*drift)
    result = _run(a.url, b.url, tmp_path, locustfile, *args)
    found = _answers(result)
    total = found["between_hosts"]["total"]
    assert total["compared"] >= 4 and total["identical_ratio"] == 0.0, found
    if locustfile.endswith("embeddings.py"):  # every vector is the drifted one: its cosine with the honest one
        assert total["cosine_min"] == pytest.approx(DRIFT_COSINE, abs=1e-4), total
    elif locustfile.endswith("rerank.py"):  # the two best documents trade places: the best is another
        assert total["top1_changed_ratio"] == 1.0 and total["kendall_tau_min"] < 1.0, total
    else:  # the two labels' probabilities swapped: the label changes
        assert total["labels_changed_ratio"] == 1.0, total
    assert found["summary"].startswith("B's reference answers differ from A's"), found
    # B's answers under load are drifted as its references are: B agrees with itself
    assert found["per_host"]["B"]["identical_ratio"] == 1.0, found
    assert "differ from A's" in result.stderr


def test_hostile_or_mismatched_values_are_not_compared_and_a_workers_tally_is_checked(caplog):
    between = Between()
    with caplog.at_level(logging.WARNING, "poolbench_locust"):
        _compare(between, "n", "vectors", {0: [1.0, 0.0], 1: [1.0]}, "scores", {0: [1.0, 0.0]}, ship=True)
        _compare(between, "n", "vectors", {0: [1.0, 0.0], 1: [1.0, 2.0]}, "vectors", {0: [0.0, 1.0], 2: [1.0]}, True)
    assert between.skipped == 1 and "could not be compared between hosts" in caplog.text
    assert between.tallies["n"].compared == 1 and between.unshipped["n"].compared == 1  # only input 0 had both
    assert between.tallies["n"].cosine_min == 0.0
    merged = Between()
    _merge(merged, "w1", {"n": between.unshipped["n"].to_wire()})
    _merge(merged, "w2", {"n": {**Tally().to_wire(), "identical": 5}})  # more identical than compared: refused
    _merge(merged, "w3", ["not", "a", "mapping"])
    assert merged.tallies["n"].compared == 1
    assert summary(merged.figures()).startswith("B's reference answers differ from A's: 1 of 1 inputs not identical")
    assert summary(None) == "B's reference answers: none compared with A's"


def test_without_ab_host_there_are_no_answers_between_hosts(mock_server, tmp_path):
    result = run_locust(
        "locustfiles/embeddings.py",
        *LOAD,
        host=mock_server.url,
        users=1,
        requests=10,
        json_result=tmp_path / "r.json",
        env=CONSISTENCY_ON,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["ab"] is None and "Answers between hosts" not in result.stderr


def test_workers_ship_their_comparisons_and_bs_reference_requests(mock_server_factory, tmp_path):
    """Two processes: each takes both hosts' references and compares them; the master merges the tallies, and
    reconciles each host's server count with its requests, the workers' reference requests to it included."""
    a, b = mock_server_factory(), mock_server_factory("--drift-above", "0")
    port = str(free_port())
    result = run_locust(
        "locustfiles/embeddings.py",
        *LOAD,
        *("--processes", "2", "--master-bind-port", port, "--master-port", port),
        *("--ab-host", b.url, "--consistency-rate", "1", "--server-metrics-interval", "1", "--stop-timeout", "5"),
        host=a.url,
        users=4,
        run_time="5s",
        csv=tmp_path / "r",
        json_result=tmp_path / "r.json",
        env=CONSISTENCY_ON,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {row["Name"]: row for row in csv.DictReader((tmp_path / "r_consistency.csv").open())}
    between = rows["B against A: total"]
    assert int(between["compared"]) == 16, rows  # 8 reference inputs, each worker's
    assert float(between["cosine_min"]) == pytest.approx(DRIFT_COSINE, abs=1e-4)
    checks = {r["Check"]: r for r in result.json()["server_metrics"]["reconciliation"]}
    for side, mock in (("A", a), ("B", b)):
        requests = checks[f"Requests [{side}]"]
        assert requests["Server"] == mock.stats()["requests"] == requests["Client"], checks
