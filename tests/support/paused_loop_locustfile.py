"""EmbeddingsUser on an open loop (--request-rate) that is paused half a second into the run and never resumed,
as a capacity search that ended on a failed probe leaves it (capacity/capacity_shape.py): at the run's end
every user waits for an arrival that never falls due."""

from typing import Any

import gevent
from locust import events

from poolbench_locust import EmbeddingsUser  # noqa: F401  (Locust runs the User classes it finds here)
from poolbench_locust.workload.arrival import open_loop_of

PAUSED_AFTER_S = 0.5


@events.test_start.add_listener
def _pause_soon(environment: Any, **_: Any) -> None:
    gevent.spawn_later(PAUSED_AFTER_S, lambda: open_loop_of(environment).pause())
