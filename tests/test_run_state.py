"""A run's state lives on its environment: a second run in the same process starts clean, whether in a
new environment (a test, a master beside others) or in the same one (the web UI's next START)."""

from __future__ import annotations

from poolbench_locust import EmbeddingsUser, plugin
from poolbench_locust.locust_pages import PageEvents
from poolbench_locust.metrics.pooling_reports import stats_of
from poolbench_locust.run_state import state_of
from poolbench_locust.workload.arrival import open_loop_of
from poolbench_locust.workload.warmup import warmup_of
from tests.support.harness import Run


def started(run: Run) -> Run:
    """The run's environment with the plugin's listeners, its test started, as Locust starts one."""
    run.env.create_local_runner()
    plugin.setup(run.env.events, PageEvents())
    run.env.events.test_start.fire(environment=run.env)
    return run


def test_a_second_run_in_the_process_starts_clean(mock_server):
    first = started(Run(EmbeddingsUser, mock_server.url, "--warmup", "60", "--no-preflight"))
    try:
        assert not warmup_of(first.env).counting, "the first run is warming up for a minute"
        open_loop_of(first.env).rate_override = 50.0  # what a sweep step's message sets
        first.user.send()
        assert first.events == [], "a warm-up request is counted nowhere"
        learned = first.user.plan

        second = started(Run(EmbeddingsUser, mock_server.url, "--no-preflight"))
        event = second.one()  # counted: the first run's warm-up is not this one's
        assert event["exception"] is None and event["context"]["sequences"] >= 1
        assert open_loop_of(second.env).rate_override is None
        assert second.user.plan is not learned, "plans are made per run"
        stats_of(second.env).on_request(**event)
        assert stats_of(second.env).total.requests == 1 and stats_of(first.env).total.requests == 0
        assert state_of(second.env) is not state_of(first.env)
    finally:
        first.env.events.test_stop.fire(environment=first.env)

    # The web UI's next START, in the same environment: the warm-up and the open loop start again.
    assert warmup_of(first.env).counting and open_loop_of(first.env).rate_override is None
    first.env.events.test_start.fire(environment=first.env)
    assert not warmup_of(first.env).counting, "the next run warms up again"
    first.env.events.test_stop.fire(environment=first.env)
