"""Whole runs against hostile servers in processes of their own: a master and two workers, and the end of a run.

The servers are tests/support/process_servers.py's counting ones: each counts the pooling requests it
received and answers `GET /count` with that number.
"""

from __future__ import annotations

import csv
import logging
import subprocess
from pathlib import Path

import pytest
import requests
from locust.env import Environment

from devsupport.ports import free_port
from poolbench_locust.metrics import shipping
from poolbench_locust.metrics.collector import PoolingStats
from tests.support import zygote
from tests.support.locust_run import ROOT, locust_argv, run_locust
from tests.support.process_servers import EVERY, FIRST_HOSTILE, served


@pytest.fixture(autouse=True)
def _no_scrapes(monkeypatch: pytest.MonkeyPatch) -> None:
    """These servers count every request they get: --server-metrics' GET /metrics would be one more."""
    monkeypatch.setenv("LOCUST_SERVER_METRICS", "off")


EMBEDDINGS = "locustfiles/embeddings.py"
SHAPE = ("--batch-size", "2", "--input-len", "4")


def aggregated(path: Path) -> dict[str, str]:
    with path.open() as f:
        return next(row for row in csv.DictReader(f) if row["Name"] == "Aggregated")


def served_count(url: str) -> int:
    return int(requests.get(f"{url}/count", timeout=5).text)


def test_an_implausible_usage_in_one_answer_of_500_keeps_the_master_s_counts_whole(tmp_path):
    prefix = tmp_path / "dist"
    port = str(free_port())
    with served("implausible_usage") as url:
        workers = [
            zygote.popen(
                locust_argv(
                    EMBEDDINGS, *SHAPE, *("--worker", "--master-host", "127.0.0.1", "--master-port", port), host=url
                ),
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        try:
            master = run_locust(
                EMBEDDINGS,
                *(*SHAPE, "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", port),
                *("--expect-workers", "2"),
                host=url,
                users=4,
                # Past the second hostile answer however busy the machine (8 s ended at none on a loaded one).
                requests=FIRST_HOSTILE + EVERY + 50,
                csv=prefix,
                timeout=120,
            )
            worker_logs = [w.communicate(timeout=30)[1] for w in workers]
        finally:
            for w in workers:
                if w.poll() is None:
                    w.kill()
                    w.wait()
        count = served_count(url)
    locust_row, pooling_row = aggregated(Path(f"{prefix}_stats.csv")), aggregated(Path(f"{prefix}_pooling.csv"))
    requests_counted = int(locust_row["Request Count"])
    print(
        f"server received {count}; Locust CSV {requests_counted} ({locust_row['Failure Count']} failed); "
        f"pooling CSV {pooling_row['Request Count']} ({pooling_row['Failure Count']} failed); exit {master.returncode}"
    )
    assert count > FIRST_HOSTILE, ("the run reached the first hostile answer", master.stderr[-2000:], worker_logs)
    assert not any("OverflowError" in log for log in worker_logs), worker_logs
    assert "POOLING REPORT LOST" not in master.stderr
    assert pooling_row["Request Count"] == locust_row["Request Count"]
    assert pooling_row["Failure Count"] == locust_row["Failure Count"]
    hostile_answers = 1 + (count - FIRST_HOSTILE) // EVERY
    assert int(locust_row["Failure Count"]) == hostile_answers
    assert count - 4 <= requests_counted <= count, "every answer counted, but for those in flight at the stop"
    failures = Path(f"{prefix}_failures.csv").read_text()
    assert "usage.prompt_tokens is implausible" in failures
    assert master.returncode == 1, master.stderr[-3000:]  # Locust's exit code when a request failed


@pytest.mark.parametrize("loop", [(), ("--request-rate", "20")], ids=["closed-loop", "open-loop"])
def test_requests_in_flight_at_the_end_of_a_run_are_reported(tmp_path, loop):
    prefix = tmp_path / "end"
    with served("slow") as url:
        result = run_locust(
            EMBEDDINGS, *SHAPE, *loop, "--request-timeout", "5", host=url, users=4, run_time="2s", csv=prefix
        )
        count = served_count(url)
    row = aggregated(Path(f"{prefix}_stats.csv"))
    print(f"server received {count}; Locust CSV {row['Request Count']}; exit {result.returncode}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert int(row["Request Count"]) == count
    assert aggregated(Path(f"{prefix}_pooling.csv"))["Request Count"] == row["Request Count"]


def test_a_report_that_cannot_be_packed_is_sent_as_an_error_and_the_master_fails_the_run(caplog):
    stats = PoolingStats()
    stats.on_request("/e", 5.0, 100, None, {"sequences": 1, "input_tokens": 1})
    stats.entries["/e"].input_tokens = 2**70  # no server value can get here any more; a future bug might
    outbox = shipping.Outbox()
    report = outbox.report(stats)
    assert set(report) == {shipping.ERROR, shipping.BEFORE, shipping.REQUESTS}
    assert "OverflowError" in report[shipping.ERROR]
    environment = Environment()
    inbox = shipping.Inbox(environment, PoolingStats())
    with caplog.at_level(logging.ERROR, "poolbench_locust"):
        inbox.merge("worker-1", report)
    assert environment.process_exit_code == shipping.REPORT_EXIT_CODE
    assert "POOLING REPORT LOST from worker worker-1" in caplog.text


def test_the_master_notices_a_report_that_never_arrived(caplog):
    worker = PoolingStats()
    outbox = shipping.Outbox()
    environment = Environment()
    merged = PoolingStats()
    inbox = shipping.Inbox(environment, merged)
    outbox.report(worker)  # an empty first report Locust's master may miss at start: nothing lost
    one = {"sequences": 2, "input_tokens": 8}
    worker.on_request("/e", 5.0, 100, None, one)
    inbox.merge("w", outbox.report(worker))
    assert environment.process_exit_code is None and merged.total.requests == 1
    for _ in range(3):
        worker.on_request("/e", 5.0, 100, None, one)
    outbox.report(worker)  # lost on the way
    worker.on_request("/e", 5.0, 100, None, one)
    with caplog.at_level(logging.ERROR, "poolbench_locust"):
        inbox.merge("w", outbox.report(worker))
    assert "the figures of 3 request(s) in earlier reports never arrived" in caplog.text
    assert environment.process_exit_code == shipping.REPORT_EXIT_CODE
