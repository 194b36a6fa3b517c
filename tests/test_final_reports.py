"""A distributed run's master keeps its workers' final reports, however late they come within their bound
(poolbench_locust/final_reports): Locust's master gave them 0.5 s after its quit message.

The requests in flight at the end are test_distributed_hostile's: the pooling final reports at test_stopping."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

import gevent
import pytest
from locust.env import Environment
from locust.runners import MasterRunner, WorkerNode

from poolbench_locust.final_reports import master_quit
from tests.support.locust_run import LOAD, run_locust


def test_a_worker_slow_to_answer_the_quit_is_counted_whole(mock_server, tmp_path):
    prefix = tmp_path / "late"
    result = run_locust(
        "tests/support/late_final_report_locustfile.py",
        *LOAD,
        *("--processes", "1", "--server-metrics", "off"),
        host=mock_server.url,
        users=2,
        run_time="4s",
        csv=prefix,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    served = mock_server.stats()["requests"]
    assert served > 0
    # Locust's own table, from the worker's reports (its last one sent 1.5 s after the quit), and the plugin's
    assert int(result.csv("stats")["Aggregated"]["Request Count"]) == served
    assert int(result.csv("pooling")["Aggregated"]["Request Count"]) == served


@pytest.fixture
def master() -> Iterator[Callable[[float], MasterRunner]]:
    """A master runner in this process (no worker connects; a test puts the ones it needs in its list)."""
    made: list[MasterRunner] = []

    def make(stop_timeout: float) -> MasterRunner:
        made.append(Environment(user_classes=[], stop_timeout=stop_timeout).create_master_runner("127.0.0.1", 0))
        return made[-1]

    yield make
    for runner in made:
        runner.greenlet.kill(block=True)
        runner.server.close()


def test_a_worker_that_never_reports_holds_the_quit_no_longer_than_its_bound(master, monkeypatch, caplog):
    """A worker that hears the quit and never answers (not yet missing: its heartbeats were on time)."""
    monkeypatch.setattr(master_quit, "FINAL_REPORT_GRACE_S", 0.3)
    runner = master(0.2)
    runner.clients["silent"] = WorkerNode("silent")
    locust_quits: list[float] = []
    quit = master_quit.quit_after_final_reports(runner, lambda: locust_quits.append(time.monotonic()))
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="poolbench_locust"):
        quit()
    waited = locust_quits[0] - started
    assert 0.5 <= waited < 0.5 + 1.0, "the stop timeout and the grace, then Locust's quit"
    [warning] = [r.getMessage() for r in caplog.records if "final report" in r.getMessage()]
    assert warning.startswith("1 worker(s) sent no final report within 0.5 s"), warning


@pytest.mark.parametrize("state", ["missing", "gone"])
def test_no_wait_for_a_worker_that_cannot_answer(master, state):
    runner = master(5.0)
    if state == "missing":
        runner.clients["dead"] = WorkerNode("dead")
        runner.clients["dead"].state = "missing"
    called: list[bool] = []
    started = time.monotonic()
    gevent.spawn(master_quit.quit_after_final_reports(runner, lambda: called.append(True))).join(timeout=10)
    assert called == [True]
    assert time.monotonic() - started < 1.0
