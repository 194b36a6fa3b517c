"""The bounded failure rows (engine/failure_messages.py: 100 distinct messages as themselves, the rest grouped)
start again from none whenever the failures table does: at the end of --warmup and at *Reset stats*,
in one process and on every worker. Before, the warm-up's messages (counted nowhere) or the rows a
reset had emptied used up the 100, and every message after them was grouped."""

from __future__ import annotations

import contextlib
import csv
import time
from collections.abc import Iterator

import pytest
import requests

from poolbench_locust.engine.failure_messages import DISTINCT_MESSAGES
from tests.support.hostile import handler_process
from tests.support.locust_run import run_locust
from tests.support.webui import WebUI

PROCESSES = pytest.mark.parametrize("processes", [[], ["--processes", "2"]], ids=["one process", "2 workers"])


def own_rows(errors: list[str]) -> list[str]:
    """The failure messages shown as themselves, not grouped (Locust writes CatchResponseError('...'))."""
    return [e for e in errors if "HTTP 500: failure " in e]


@PROCESSES
def test_the_end_of_warmup_clears_the_failure_rows(tmp_path, processes):
    prefix = tmp_path / "warm"
    with handler_process("unique_errors") as url:
        done = run_locust(
            "locustfiles/embeddings.py",
            *("--only-summary", "--stop-timeout", "5", "--warmup", "4"),
            *processes,
            host=url,
            users=2,
            run_time="7s",
            csv=prefix,
            timeout=60,
        )
    assert "Warm-up over" in done.stderr, done.stderr[-3000:]
    with open(f"{prefix}_failures.csv") as f:
        errors = [row["Error"] for row in csv.DictReader(f)]
    assert sum(1 for e in errors if "messages grouped" in e) >= 1, "more than 100 distinct messages came"
    # Each process that sends shows its first 100 distinct messages after warm-up as themselves.
    senders = int(processes[-1]) if processes else 1
    assert len(own_rows(errors)) == DISTINCT_MESSAGES * senders, (len(own_rows(errors)), errors[:5])
    first_counted = min(int(e.split("failure ")[1].rstrip("')")) for e in own_rows(errors))
    assert first_counted > DISTINCT_MESSAGES * senders, "the warm-up alone sent more messages than the rows keep"


@contextlib.contextmanager
def web_ui_against(url: str, *args: str) -> Iterator[WebUI]:
    ui = WebUI("locustfiles/embeddings.py", "--host", url, *args)
    try:
        yield ui
    finally:
        ui.close()


def failure_messages(ui: WebUI) -> list[str]:
    """The Error column of the failures CSV the web UI serves (not cached, as /stats/requests is)."""
    text = requests.get(f"{ui.base}/stats/failures/csv", timeout=10).text
    return [row["Error"] for row in csv.DictReader(text.splitlines())]


@PROCESSES
def test_reset_stats_clears_the_failure_rows(processes):
    with handler_process("unique_errors") as url, web_ui_against(url, *processes) as ui:
        if processes:
            deadline = time.monotonic() + 20
            while len(ui.requests_json().get("workers") or []) < 2:
                assert time.monotonic() < deadline, "the workers never connected"
                time.sleep(0.2)
        assert ui.swarm(user_count=2, spawn_rate=2, host=url)["success"]
        deadline = time.monotonic() + 20
        while not any("messages grouped" in e for e in failure_messages(ui)):
            assert time.monotonic() < deadline, "no grouped row: fewer than 100 distinct messages came"
            time.sleep(0.3)
        requests.post(f"{ui.base}/stats/reset", timeout=10).raise_for_status()
        time.sleep(3)  # new failures, and (with workers) their reports
        ui.stop()
        errors = failure_messages(ui)
    senders = int(processes[-1]) if processes else 1
    assert len(own_rows(errors)) == DISTINCT_MESSAGES * senders, (len(own_rows(errors)), errors[:5])
