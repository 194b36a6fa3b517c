"""Which validator checks JSON answers (answer_validator.py): the start log says it once, the JSON result
records it, with lazyjson's C pass built and, in a run where it cannot be imported (tests/support/no_c_pass.py,
as an install without a compiler), with simdjson."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from locust.env import Environment

from devsupport.ports import free_port
from poolbench_locust import answer_validator, lazyjson
from tests.support.locust_run import ROOT, result_schema, run_locust
from tests.support.no_c_pass import without_c_pass

C_LINE = "JSON answers validated by the C pass"
SIMDJSON_LINE = "JSON answers validated by simdjson: the C pass is not built here (no compiler at install)"


def assert_valid(doc: dict) -> None:
    errors = list(jsonschema.Draft202012Validator(result_schema()).iter_errors(doc))
    assert not errors, [e.message[:300] for e in errors[:5]]


def test_the_c_pass_is_built_in_this_checkout() -> None:
    """The runs below that expect the C pass run this checkout: a missing build fails here first, by name."""
    assert lazyjson.SCANS and lazyjson.validator() == lazyjson.C_PASS


def test_hiding_the_extension_leaves_simdjson(tmp_path: Path) -> None:
    code = "from poolbench_locust import lazyjson; print(lazyjson.SCANS, lazyjson.validator())"
    env = {**os.environ, **without_c_pass(tmp_path / "hide")}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "simdjson"]


@pytest.mark.parametrize("built", [True, False], ids=["c-pass", "simdjson"])
def test_a_local_run_says_its_validator_once_and_records_it(built: bool, mock_server, tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    done = run_locust(
        "locustfiles/demo.py",
        host=mock_server.url,
        users=2,
        requests=20,
        json_result=result,
        env=None if built else without_c_pass(tmp_path / "hide"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said, not_said = (C_LINE, SIMDJSON_LINE) if built else (SIMDJSON_LINE, C_LINE)
    assert done.stderr.count(said) == 1, done.stderr[-3000:]
    assert not_said not in done.stderr
    parsed = json.loads(result.read_text())
    assert_valid(parsed)
    assert parsed["validator"] == ("c" if built else "simdjson")
    assert parsed["total"]["locust"]["Request Count"] > 0


def test_a_master_says_what_its_workers_validate_with(mock_server, tmp_path: Path) -> None:
    """The master sends no request: its workers' reports say which validator ran (here simdjson, hidden in
    every process), once, naming the first worker that reported it."""
    result = tmp_path / "result.json"
    port = str(free_port())
    done = run_locust(
        "locustfiles/demo.py",
        *("--processes", "2", "--master-bind-port", port, "--master-port", port),
        host=mock_server.url,
        users=4,
        run_time="4s",
        json_result=result,
        env=without_c_pass(tmp_path / "hide"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    relayed = [line for line in done.stderr.splitlines() if "JSON answers validated by" in line]
    assert len(relayed) == 1, relayed
    assert "worker " in relayed[0] and "simdjson: the C pass is not built there (no compiler at install)" in relayed[0]
    parsed = json.loads(result.read_text())
    assert_valid(parsed)
    assert parsed["run"]["runner"] == "master" and parsed["validator"] == "simdjson"


def test_the_master_keeps_only_known_validators_and_says_when_workers_differ(caplog) -> None:
    environment = Environment()
    seen = answer_validator.SEEN.of(environment)
    assert seen.summary() is None  # no worker reported: null in the JSON result
    for bad in (None, 5, "C", "c" * 10_000, ["c"]):
        answer_validator.record(environment, "w0", bad, 0)
    assert seen.by_worker == {} and seen.summary() is None
    with caplog.at_level(logging.INFO, logger="poolbench_locust"):
        answer_validator.record(environment, "w0", "c", 0)
        answer_validator.record(environment, "w1", "c", 1)
        assert seen.summary() == "c"
        answer_validator.record(environment, "w2", "simdjson", 2)
        answer_validator.record(environment, "w3", "simdjson", 3)
    assert seen.summary() == answer_validator.MIXED
    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert said == [
        (logging.INFO, f"worker 0: {C_LINE}"),
        (logging.WARNING, "worker 2: " + SIMDJSON_LINE.replace(" here ", " there ")),
    ]


def test_the_master_holds_a_bounded_number_of_workers(monkeypatch) -> None:
    monkeypatch.setattr(answer_validator, "MAX_WORKERS", 3)
    environment = Environment()
    for i in range(10):
        answer_validator.record(environment, f"w{i}", "c", i)
    answer_validator.record(environment, "w1", "simdjson", 1)  # a known worker may still change its report
    assert answer_validator.SEEN.of(environment).by_worker == {"w0": "c", "w1": "simdjson", "w2": "c"}
