"""What poolbench-locust keeps for one run, in one object attached to its Locust environment.

A process may hold several environments (a test, a master beside its workers' tests), each with runs
of its own: nothing of a run lives in a module global, so a new environment starts clean. The web
UI's next run, in the same environment, starts clean through the test_start listeners that reset
what a run counts (the stats, the history, the open-loop schedule, the warm-up).

Each part is declared here and made by its own room on first use (arrival.open_loop_of,
metrics.pooling_reports.stats_of, ...), so that this module, which every room imports, imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from poolbench_locust.engine.failure_messages import FailureRows
    from poolbench_locust.engine.plan import Plan
    from poolbench_locust.exporter.prometheus_endpoint import Exporter
    from poolbench_locust.metrics.collector import PoolingStats
    from poolbench_locust.metrics.history import History
    from poolbench_locust.metrics.pacing import Board, Watcher
    from poolbench_locust.results.series import Series
    from poolbench_locust.servermetrics.pooling_reports import State as ServerMetrics
    from poolbench_locust.workload.arrival import OpenLoop
    from poolbench_locust.workload.trace import Replay
    from poolbench_locust.workload.warmup import Warmup

ATTRIBUTE = "poolbench"


@dataclass(eq=False)
class RunState:
    open_loop: OpenLoop | None = None
    """This process's open-loop schedule (--request-rate), shared by its users."""
    warmup: Warmup | None = None
    trace: Replay | None = None
    """A replayed trace's share of this process and its ending (--dataset trace:; workload/trace.py)."""
    plans: dict[tuple[Any, ...], Plan] = field(default_factory=dict)
    """Each User class's plan, per set of options and host (engine/plan.py)."""
    warned: set[tuple[str, str]] = field(default_factory=set)
    """The API-key warnings given already, one per kind and host (access.py)."""
    failure_rows: FailureRows | None = None
    checked_host: str | None = None
    """The host the start checks found listening: not probed again."""
    preflighted: set[tuple[Any, ...]] = field(default_factory=set)
    """The User classes, hosts and options whose preflight request passed."""
    stop_timeout_set: bool = False
    """Whether environment.stop_timeout is the one stop_timeout.py set (not the user's)."""
    stats: PoolingStats | None = None
    history: History | None = None
    series: Series | None = None
    server_metrics: ServerMetrics | None = None
    """On the master (or the one process) only: workers never scrape."""
    client_load: Board | None = None
    """Each process's rate sent, lateness and CPU (metrics/pacing.py), on the master or the one process."""
    pacing: Watcher | None = None
    """This process watching its own schedule's tally (open_loop.tally) and CPU."""
    prometheus: Exporter | None = None
    """The --prometheus-port endpoint (exporter/prometheus_endpoint.py), on the master or the one process. Unlike the
    rest, its server lives as long as the process, not one run: bound when Locust starts (a busy port
    stops the run then), closed when it quits; what a run changes is its run number, the `run` label."""


def state_of(environment: Any) -> RunState:
    """The environment's run state, made on first use."""
    state = getattr(environment, ATTRIBUTE, None)
    if state is None:
        state = RunState()
        setattr(environment, ATTRIBUTE, state)
    return state
