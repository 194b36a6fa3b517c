"""--max-requests N: a run bounded by a request count (issue 43), ended as -t ends one: a headless run quits
with its CSV files and JSON result written, a web UI's run stops; the requests in flight finish and count."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from poolbench_locust.options import ALL_OPTIONS, OptionError, Settings
from tests.support.locust_run import LOAD, Completed, run_locust
from tests.support.webui import WebUI

N, USERS = 50, 4
LONG = "60s"
"""-t far beyond the time N requests take on the mock (about 1 s): a run that ends well before it ended at N."""
ENDS_WITHIN_S = 40
"""run_locust's timeout: a run still going then (-t is 60 s) was not ended by its count."""


def _options(**given: str) -> argparse.Namespace:
    values = {opt.dest: opt.default for opt in ALL_OPTIONS}
    return argparse.Namespace(**(values | given))


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"max_requests": "0"}, "must be a whole number >= 1"),
        ({"max_requests": "ten"}, "must be a whole number >= 1"),
        ({"max_requests": "10", "find_capacity": True, "slo": "e2e_ms=100"}, "--find-capacity's probes"),
        ({"max_requests": "10", "sweep_rates": "10,20"}, "a sweep's steps"),
        ({"max_requests": "10", "repeat": "3"}, "--repeat resets the stats"),
    ],
    ids=["zero", "not a number", "with --find-capacity", "with a sweep", "with --repeat"],
)
def test_a_bad_value_or_combination_names_the_option(given, says):
    with pytest.raises(OptionError) as refused:
        Settings.from_options(_options(**given))
    assert refused.value.option == "--max-requests"
    assert says in str(refused.value)


def test_it_goes_with_warmup_a_trace_and_request_rate():
    settings = Settings.from_options(_options(max_requests="10", warmup="2", request_rate="20"))
    assert settings.max_requests == 10


def test_a_bad_value_stops_the_run_at_start(mock_server):
    result = run_locust(
        "locustfiles/embeddings.py", "--max-requests", "0", host=mock_server.url, users=1, run_time="5s"
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "argument --max-requests: must be a whole number >= 1, got 0" in result.stderr
    assert mock_server.stats()["requests"] == 0


def limited_run(mock_server, tmp_path, *args: str, users: int = USERS, **given: Any) -> Completed:
    """A headless run of EmbeddingsUser against the mock with ARGS (its --max-requests among them), -t far off."""
    return run_locust(
        "locustfiles/embeddings.py",
        *LOAD,
        *args,
        host=mock_server.url,
        users=users,
        run_time=LONG,
        csv=tmp_path / "run",
        timeout=ENDS_WITHIN_S,
        **given,
    )


def test_a_headless_run_ends_after_n_requests_with_its_outputs(mock_server, tmp_path):
    result = limited_run(mock_server, tmp_path, "--max-requests", str(N), json_result=tmp_path / "run.json")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"--max-requests {N} reached: {N} requests ended, shutting down" in result.stderr
    counted = int(result.csv()["Aggregated"]["Request Count"])
    # At least N; beyond it only the requests in flight when the Nth ended, one a user at most.
    assert N <= counted < N + USERS, counted
    assert counted == int(result.csv("pooling")["Aggregated"]["Request Count"])
    assert counted == mock_server.stats()["requests"]  # every request sent was counted, none cut off
    document = result.json()  # written at the end as at a -t end
    assert document["total"]["locust"]["Request Count"] == counted == document["completed"] + document["failed"]


def test_warmup_requests_do_not_count_towards_n(mock_server, tmp_path):
    result = limited_run(mock_server, tmp_path, "--max-requests", "30", "--warmup", "1.5", users=2)
    assert result.returncode == 0, result.stderr[-3000:]
    counted = int(result.csv()["Aggregated"]["Request Count"])
    assert 30 <= counted < 32, counted
    assert mock_server.stats()["requests"] > counted + 10  # the warm-up's were sent, and counted nowhere


def test_a_distributed_run_ends_from_its_workers_reports(mock_server, tmp_path):
    result = limited_run(mock_server, tmp_path, "--max-requests", str(N), "--processes", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"--max-requests {N} reached" in result.stderr
    counted = int(result.csv()["Aggregated"]["Request Count"])
    assert counted >= N  # up to one report interval's requests more: the master counts its workers' reports
    assert counted == mock_server.stats()["requests"]


def test_run_time_ends_the_run_when_it_comes_first(mock_server, tmp_path):
    result = run_locust(
        "locustfiles/embeddings.py",
        *LOAD,
        *("--max-requests", "1000000"),
        host=mock_server.url,
        users=2,
        run_time="2s",
        csv=tmp_path / "run",
        timeout=ENDS_WITHIN_S,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "--run-time limit reached" in result.stderr
    assert "--max-requests" not in result.stderr
    assert 0 < int(result.csv()["Aggregated"]["Request Count"]) < 1000000


def test_the_web_ui_stops_the_test_at_n_and_stays_up(mock_server):
    ui = WebUI("locustfiles/embeddings.py", "--host", mock_server.url, *LOAD)
    try:
        answer = ui.swarm(user_count=USERS, spawn_rate=USERS, host=mock_server.url, max_requests=str(N))
        assert answer["success"], answer
        ui.wait_for("stopped", timeout=30)
        counted = ui.locust_total()["num_requests"]
        assert N <= counted < N + USERS, counted
        assert ui.proc.poll() is None  # stopped, not quit: the UI waits for the next run
        assert f"--max-requests {N} reached: {N} requests ended, stopping test" in ui.log()
    finally:
        ui.close()
