"""The one way a run ends early: say why in one line, tell the workers to quit, and exit with code 1.

With --processes (or a distributed run), Locust forked or connected workers before the plugin's init
listeners ran. A master that only called sys.exit left them waiting about a minute for its heartbeat
(locust.main's clean-up takes a running child for an exited one); on Kubernetes they logged errors for
that minute. A master's quit message ends them now.

StartCheck is where a check of the run at its start runs (at init, or at each test_start of a web UI's
run), written once for the modules that stop a bad run at start.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

import gevent
import psutil  # Locust's own dependency (locust.runners measures CPU with it): no new one
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner

from poolbench_locust.locust_options import locust_options

logger = logging.getLogger("poolbench_locust")

WORKERS_CONNECT_S = 3.0
"""How long a --processes master that stops at start waits for its forked workers, to tell them to quit."""
WORKERS_EXIT_S = 3.0
"""How long it then waits for its forked workers to end, before it sends a SIGTERM to those left."""
WORKERS_TERM_S = 1.0
"""How long a SIGTERMed worker has to end before a SIGKILL. One ends in milliseconds, but CI once saw a worker
outlive its master on a slow machine (and hold the run's stderr for the heartbeat's minute): the SIGKILL bounds it."""


def quit_workers(environment: Any, runner: MasterRunner) -> None:
    """Tell every worker to quit; with --processes, wait first (bounded) for the forked ones to connect
    (only a connected worker hears the quit message), and see them end after."""
    options = locust_options(environment)
    forked = bool(options.processes)
    if forked:
        expected = options.expect_workers
        deadline = time.monotonic() + WORKERS_CONNECT_S
        while len(runner.clients.ready) < expected and time.monotonic() < deadline:
            gevent.sleep(0.05)
    runner.quit()
    if forked:
        end_forked_workers()


def forked_workers() -> list[psutil.Process]:
    """This process's children that Locust forked for --processes: they run its own command line."""
    me = psutil.Process()
    try:
        command, children = me.cmdline(), me.children()
    except psutil.Error:
        return []
    found = []
    for child in children:
        try:
            if child.cmdline() == command:
                found.append(child)
        except psutil.Error:
            continue  # ended meanwhile: nothing to do
    return found


def end_forked_workers(timeout: float = WORKERS_EXIT_S) -> None:
    """Wait for the forked workers to end; SIGTERM any still running after `timeout` (one that connected
    too late to hear the quit message), and SIGKILL any the SIGTERM did not end. A forked worker of a run
    that stopped at start has sent nothing and holds nothing worth saving. Never reaps them: Locust's exit
    clean-up waits for each child itself, and logs an error in a loop for a child already reaped."""
    running = _wait_for_end(forked_workers(), timeout)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for worker in running:
            logger.debug("worker process %d did not quit: sending it %s", worker.pid, sig.name)
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.kill(worker.pid, sig)
        running = _wait_for_end(running, WORKERS_TERM_S)  # bounded even after a SIGKILL


def _wait_for_end(workers: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """The workers still running after at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while (running := [w for w in workers if _running(w)]) and time.monotonic() < deadline:
        gevent.sleep(0.05)
    return running


def _running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def stop_run(environment: Any, error: str) -> None:
    """A web UI's run that its form made wrong (checked at test_start): log the one line and stop that
    run before its users spawn; the UI stays up for the next."""
    logger.error("%s", error)
    if environment.runner is not None:
        gevent.spawn(environment.runner.stop)


def exit_early(environment: Any, error: str) -> NoReturn:
    """Log the one line, quit this master's workers, and end the process with code 1, before any user runs."""
    logger.error("%s", error)
    if isinstance(runner := environment.runner, MasterRunner):
        quit_workers(environment, runner)
    sys.exit(1)


Check = Callable[[Any], str | None]
"""A check of the run at its start: the one line that says why it cannot run, or None."""


class StartCheck:
    """A check run where Locust starts a run, declared by its module with its check alone.

    A headless or --autostart run is checked at init: an error ends the process (exit_early). A web UI's
    run gets its options and host from the form, so it is checked at each test_start, before users spawn:
    an error stops that run and the UI stays up (stop_run); `before_the_form`, if given, is what can be
    checked at init all the same. A worker is never checked: it takes its options and host from the master.
    """

    def __init__(self, check: Check, before_the_form: Check | None = None) -> None:
        self.check = check
        self.before_the_form = before_the_form

    def on_init(self, environment: Any, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
        if isinstance(runner, WorkerRunner):
            return
        waits_for_the_form = web_ui is not None and not locust_options(environment).autostart
        check = self.before_the_form if waits_for_the_form else self.check
        if check is not None and (error := check(environment)) is not None:
            exit_early(environment, error)

    def on_test_start(self, environment: Any, **_: Any) -> None:
        runner = environment.runner
        if isinstance(runner, WorkerRunner) or runner is None:
            return
        if (error := self.check(environment)) is not None:
            stop_run(environment, error)

    def setup(self, events: Events) -> None:
        events.init.add_listener(self.on_init)
        events.test_start.add_listener(self.on_test_start)
