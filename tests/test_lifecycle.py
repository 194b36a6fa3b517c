"""Every early exit quits the workers first (poolbench_locust/lifecycle.py): a master that stops a run at
start leaves no worker of its --processes behind, where they waited a minute for its heartbeat."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import run_and_find_leftovers

ROOT = Path(__file__).parent.parent
RUN = ["-f", "locustfiles/embeddings.py", "--headless", "--processes", "2", "-r", "2", "-t", "20s", "--no-preflight"]


@pytest.mark.parametrize(
    ("args", "option", "said"),
    [
        (["-u", "2", "--json-result", "/etc/passwd/x.json"], "--json-result", "is not a writable directory"),
        (["--sweep-rates", "5,10", "--sweep-step-time", "2"], "--sweep-rates", "needs --users"),
    ],
    ids=["unwritable-json-result", "sweep-rates-without-users"],
)
def test_an_early_exit_leaves_no_worker_behind(args, option, said):
    code, output, left = run_and_find_leftovers([*RUN, *args], ROOT)
    assert code == 1, output[-2000:]
    assert option in output and said in output, output[-2000:]
    assert "--run-time limit reached" not in output, "the run stopped at start, not at its end"
    assert [p.info for p in left] == [], "no process of the run is left 3 s after the master exits"
