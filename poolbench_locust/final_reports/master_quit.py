"""The master quits once every worker's final report is in, not 0.5 s after asking for it.

Locust's master, quitting, sends each worker `quit` and stops listening 0.5 s later (MasterRunner.quit,
"wait for final stats report from all workers": locustio/locust#1025 took 0.5 s as good enough; #1426
saw it drop reports on Kubernetes). The worker's answer is its final report of Locust's stats: every
request since its last periodic report (Locust's workers send one every 3 s). The users have stopped by
then (metrics/pooling_reports.py stops them at test_stopping and waits for the pooling figures), so the
answer is quick on an idle machine; a worker descheduled for more than that half second (a busy CI
machine, a crowded node) lost it without a word: Locust's table and --csv then held fewer requests than
the pooling table, up to 3 s of the run's traffic fewer (tests/test_final_reports.py: 830 of 2,549).

Here the master sends `quit` to its workers itself and waits until each has quit, at most the stop timeout
and FINAL_REPORT_GRACE_S more; a worker that sends no heartbeat (Locust marks it missing) is not waited for.
A worker's final report reaches the master before its `quit` (one socket, read in order by one listener),
so a worker gone from the master's list is a worker counted. Then Locust's own quit runs and finds no
worker left to tell. Locust fires no event between its quit message and its listener's end, so the runner's
quit is wrapped, on this runner alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import gevent
from locust.event import Events
from locust.rpc import Message
from locust.runners import STATE_MISSING, MasterRunner, WorkerNode

logger = logging.getLogger("poolbench_locust")

FINAL_REPORT_GRACE_S = 10.0
"""How long a worker's final report may come after the stop timeout (its users' requests ended by then): here
and for the pooling figures' (metrics/pooling_reports.py)."""
POLL_S = 0.02


def _listening(runner: MasterRunner) -> list[WorkerNode]:
    """The workers the master still hears from (a missing one sends nothing more)."""
    return [worker for worker in runner.clients.all if worker.state != STATE_MISSING]


def quit_after_final_reports(runner: MasterRunner, locust_quit: Callable[[], None]) -> Callable[[], None]:
    """The runner's quit: tell the workers to quit, wait for their final reports (bounded), then Locust's quit."""

    def quit() -> None:
        # Locust's own listener quits when the last worker has quit: nobody is left, and it must not wait
        # on itself (it reads the messages this would wait for).
        if gevent.getcurrent() in runner.greenlet.greenlets or not (workers := _listening(runner)):
            locust_quit()
            return
        runner.stop(send_stop_to_client=False)  # what Locust's quit does first: test_stopping and test_stop, once
        for worker in workers:
            runner.server.send_to_client(Message("quit", None, worker.id))
        waited_s = runner.environment.stop_timeout + FINAL_REPORT_GRACE_S
        deadline = time.monotonic() + waited_s
        while (left := _listening(runner)) and time.monotonic() < deadline:
            gevent.sleep(POLL_S)
        if left:
            logger.warning(
                "%d worker(s) sent no final report within %g s of the quit (%s): their requests since their last "
                "report are not in the totals",
                len(left),
                waited_s,
                ", ".join(f"index {runner.get_worker_index(w.id)}" for w in left),
            )
        locust_quit()

    return quit


def on_init(environment: Any, runner: Any = None, **_: Any) -> None:
    if isinstance(runner, MasterRunner):
        runner.quit = quit_after_final_reports(runner, runner.quit)  # type: ignore[method-assign]


def setup(events: Events) -> None:
    events.init.add_listener(on_init)
