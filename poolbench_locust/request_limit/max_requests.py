"""--max-requests N: the run ends once N requests have ended, succeeded or failed, as Locust's stats count them.

The count is Locust's own total, `stats.total.num_requests`: Locust logs every request there once, a failure
too (its error is logged beside it, in num_failures), so the figure the CSV's Request Count, the web UI
and the JSON result show is the figure that ends the run. It counts from the stats' last reset: the
start of the run, the end of --warmup (whose requests are counted nowhere), the web UI's Reset stats.

The run ends the way -t ends one (locust.main's stop_and_optionally_quit): a headless run quits, so
that --csv, --html, the JSON result and every report are written as at a -t end; a web UI's run stops
and the UI stays up for the next. -t still bounds the run when both are given: whichever comes first.

Where the count is read:
- One process: at each request event, after Locust's own listener (added when its runner was made,
  before the plugin's init) has counted it. The listener is added at the first run that has a limit, so
  a run without one pays nothing per request. The Nth request's event tells every user to start no
  other request (_send_no_more); those in flight finish (--stop-timeout 0 becomes --request-timeout:
  stop_timeout.py) and count too: the run ends with at least N, and at most N plus the requests in
  flight when the Nth ended, fewer than the users (an open loop's users are its slots).
- Distributed (--processes, or a master and workers): on the master, at each worker's report, after
  Locust merged it into the master's stats. Workers report every 3 s (locust.runners'
  WORKER_REPORT_INTERVAL), so the run ends up to one report's requests past N.

Refused with --find-capacity and a sweep, whose probes and steps set the run's length, and with --repeat,
whose stats resets would start the count again (options/settings.py's rules).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import gevent
from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner
from locust.user.task import LOCUST_STATE_RUNNING, LOCUST_STATE_STOPPING
from locust.user.users import User

from poolbench_locust.locust_options import locust_options
from poolbench_locust.options import OptionError, settings_of
from poolbench_locust.store import Slot

logger = logging.getLogger("poolbench_locust")


@dataclass
class RequestLimit:
    """This run's --max-requests on the process that ends it (the local one, or the master)."""

    limit: int | None = None
    """N while the run goes on; None without --max-requests, and once the run began to stop."""
    listening: bool = False
    """Whether the request listener is added (once, at the first run with a limit)."""


KILLED_WAIT_S = 1.0
"""How long _end waits for the users killed in their wait to end: a killed sleep ends at the next turn of
the loop; bounded all the same, Locust's stop kills what is left."""

_LIMIT = Slot("max_requests", RequestLimit)


def limit_of(environment: Any) -> RequestLimit:
    """The run's request limit (one per environment)."""
    return _LIMIT.of(environment)


def _max_requests(environment: Environment) -> int | None:
    try:
        return settings_of(environment).max_requests
    except OptionError:
        return None  # the start checks stop the run with the option's one line


def _check(environment: Environment) -> None:
    """End the run if its requests reached the limit: once, from a greenlet of its own (the caller may be
    a user's greenlet, which stopping the users would kill)."""
    state = limit_of(environment)
    runner = environment.runner
    if state.limit is None or runner is None:
        return
    ended = runner.stats.total.num_requests
    if ended < state.limit:
        return
    limit, state.limit = state.limit, None
    killed = [] if isinstance(runner, MasterRunner) else _send_no_more(runner)
    gevent.spawn(_end, environment, f"--max-requests {limit} reached: {ended} requests ended", killed)


def _send_no_more(runner: Any) -> list[gevent.Greenlet[..., Any]]:
    """Every user of this process starts no request from now on; the ones in flight finish (and count).

    Locust's stop does this too, but only once its test_stopping listeners have run and after a yield
    (stop_users spawns each user's stop): meanwhile the users that answered went on sending, 56 requests
    for --max-requests 50 with 4 users, 73 with 16. So before anything yields: a user in its task (the one
    whose request this is, among them) is told to stop once the task is over, as User.stop does to it;
    one in its wait between tasks is killed there, as User.stop does, but without waiting for it to die
    (a yield here would let the others wake and send): their greenlets, for _end to see gone before
    Locust's stop goes through the users (a dead one still in the group is logged as an error).
    Locust's stop then only waits for the users in their task.
    """
    running: list[User] = []
    idle: list[User] = []
    for greenlet in list(runner.user_greenlets):
        user = greenlet.args[0] if greenlet.args else None
        if isinstance(user, User):
            state = user._state  # Locust's own, read as its stop_users reads it
            (running if state == LOCUST_STATE_RUNNING else idle if state != LOCUST_STATE_STOPPING else []).append(user)
    for user in running:
        user.stop(force=False)  # only sets its state: no yield
    for user in idle:
        # Marked stopping first: a kill without blocking lands at the hub's next turn, and a user whose wait
        # ends in that same turn would wake before it, send one more request and be killed with it in
        # flight (the server saw 53 for 52 counted, under load); marked, it wakes to Locust's StopUser.
        user._state = LOCUST_STATE_STOPPING
        user.group.killone(user.greenlet, block=False)
    return [user.greenlet for user in idle]


def _end(environment: Environment, reason: str, killed: list[gevent.Greenlet[..., Any]]) -> None:
    """As locust.main ends a run at -t: a headless run quits, a web UI's stops (the UI stays up)."""
    gevent.joinall(killed, timeout=KILLED_WAIT_S)
    runner = environment.runner
    if runner is None:
        return
    # A user that ended meanwhile (killed in its wait, or done with its task) was seen to stay in the
    # group, dead, where Locust's stop logs an error for it ("a user that didn't have proper args").
    for greenlet in list(runner.user_greenlets):
        if greenlet.dead:
            runner.user_greenlets.discard(greenlet)
    if locust_options(environment).headless or not getattr(environment, "web_ui", None):
        logger.info("%s, shutting down", reason)
        runner.quit()
    else:
        logger.info("%s, stopping test", reason)
        runner.stop()


def _on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    if isinstance(runner, MasterRunner):
        # after Locust's own listener, added when the runner was made, has merged the report into the stats
        environment.events.worker_report.add_listener(lambda **_: _check(environment))


def _on_test_start(environment: Environment, **_: Any) -> None:
    runner = environment.runner
    if isinstance(runner, WorkerRunner) or runner is None:
        return  # a worker's count is the master's to add up
    state = limit_of(environment)
    state.limit = _max_requests(environment)
    if state.limit is None or isinstance(runner, MasterRunner) or state.listening:
        return
    environment.events.request.add_listener(lambda **_: _check(environment))
    state.listening = True


def _on_test_stopping(environment: Environment, **_: Any) -> None:
    # The requests still in flight, and a master's last reports, count in the figures, not in a second end.
    limit_of(environment).limit = None


def setup(events: Events) -> None:
    events.init.add_listener(_on_init)
    events.test_start.add_listener(_on_test_start)
    events.test_stopping.add_listener(_on_test_stopping)
