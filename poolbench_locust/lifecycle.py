"""The one way a run ends early: say why in one line, tell the workers to quit, and exit with code 1.

With --processes (or a distributed run), Locust forked or connected workers before the plugin's init
listeners ran. A master that only called sys.exit left them waiting about a minute for its heartbeat
(locust.main's clean-up takes a running child for an exited one); on Kubernetes they logged errors for
that minute. A master's quit message ends them now.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, NoReturn

import gevent
from locust.runners import MasterRunner

logger = logging.getLogger("poolbench_locust")

WORKERS_CONNECT_S = 3.0
"""How long a --processes master that stops at start waits for its forked workers, to tell them to quit."""


def quit_workers(environment: Any, runner: MasterRunner) -> None:
    """Tell every worker to quit; with --processes, wait first (bounded) for the forked ones to connect."""
    options = environment.parsed_options
    if getattr(options, "processes", None):
        expected = getattr(options, "expect_workers", 1)
        deadline = time.monotonic() + WORKERS_CONNECT_S
        while len(runner.clients.ready) < expected and time.monotonic() < deadline:
            gevent.sleep(0.05)
    runner.quit()


def exit_early(environment: Any, error: str) -> NoReturn:
    """Log the one line, quit this master's workers, and end the process with code 1, before any user runs."""
    logger.error("%s", error)
    if isinstance(runner := environment.runner, MasterRunner):
        quit_workers(environment, runner)
    sys.exit(1)
