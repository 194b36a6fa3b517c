"""EmbeddingsUser on a worker that answers its master's quit late: once its users have stopped, every report
it sends to the master is held 1.5 s first, its whole process blocked, as a worker descheduled on a busy
machine is (CI: 2 cores, six test processes). Locust's master gave the final report 0.5 s."""

import time
from typing import Any

from locust import events
from locust.runners import STATE_STOPPED, WorkerRunner

from poolbench_locust import EmbeddingsUser  # noqa: F401  (Locust runs the User classes it finds here)

HELD_S = 1.5


@events.init.add_listener
def _late(environment: Any, runner: Any = None, **_: Any) -> None:
    if not isinstance(runner, WorkerRunner):
        return

    @environment.events.report_to_master.add_listener
    def hold(**_: Any) -> None:
        if runner.state == STATE_STOPPED:
            time.sleep(HELD_S)  # not gevent's: the process is blocked, heartbeats and all
