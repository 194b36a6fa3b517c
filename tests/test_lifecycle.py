"""Every early exit quits the workers first (poolbench_locust/lifecycle.py): a master that stops a run at
start leaves no worker of its --processes behind, where they waited a minute for its heartbeat."""

from __future__ import annotations

import subprocess
import sys

import pytest

from poolbench_locust import lifecycle
from tests.support.locust_run import locust_argv
from tests.support.processes import run_and_find_leftovers

RUN = ("--processes", "2", "-r", "2", "--no-preflight")


@pytest.mark.parametrize(
    ("args", "option", "said"),
    [
        (["-u", "2", "--json-result", "/etc/passwd/x.json"], "--json-result", "is not a writable directory"),
        (["--sweep-rates", "5,10", "--sweep-step-time", "2"], "--sweep-rates", "needs --users"),
    ],
    ids=["unwritable-json-result", "sweep-rates-without-users"],
)
def test_an_early_exit_leaves_no_worker_behind(args, option, said):
    argv = locust_argv("locustfiles/embeddings.py", *RUN, *args, headless=True, run_time="20s")
    code, output, left = run_and_find_leftovers(argv)
    assert code == 1, output[-2000:]
    assert option in output and said in output, output[-2000:]
    assert "--run-time limit reached" not in output, "the run stopped at start, not at its end"
    assert [p.info for p in left] == [], "no process of the run is left 3 s after the master exits"


FORKED_WORKER_THAT_NEVER_HEARS = """
import os, signal, sys, time
from poolbench_locust import lifecycle
child = os.fork()
if child == 0:  # a forked worker that connected too late to hear the quit message
    if sys.argv[1] == "SIGKILL":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one that a SIGTERM does not end
    time.sleep(30)
    os._exit(0)
time.sleep(0.2)
started = time.monotonic()
lifecycle.end_forked_workers(timeout=0.5)
took = time.monotonic() - started
# the signal is sent when end_forked_workers returns; the child's exit runs when the kernel next schedules it
# (on a loaded machine, a floor run's, not always within the 1 s end_forked_workers waits after a SIGKILL)
deadline = time.monotonic() + 5
while (ended := os.waitpid(child, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
    time.sleep(0.01)
by = ended[0] == child and os.WIFSIGNALED(ended[1]) and signal.Signals(os.WTERMSIG(ended[1])).name
print(by, took)
"""


@pytest.mark.parametrize("ended_by", ["SIGTERM", "SIGKILL"])
def test_a_forked_worker_that_did_not_quit_is_ended_before_the_master_exits(ended_by):
    done = subprocess.run(
        [sys.executable, "-c", FORKED_WORKER_THAT_NEVER_HEARS, ended_by], capture_output=True, text=True, timeout=30
    )
    signal_name, took = done.stdout.split()
    assert signal_name == ended_by, done.stderr[-2000:]
    assert float(took) < 0.5 + 2 * lifecycle.WORKERS_TERM_S + 1.0, "ended within its bounds"
