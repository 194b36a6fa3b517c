"""Each room's state lives in its environment's store (poolbench_locust/store.py): a second run in the same
process starts clean, whether in a new environment (a test, a master beside others) or in the same one
(the web UI's next START)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from poolbench_locust import EmbeddingsUser, plugin
from poolbench_locust.json_sections import ResultEvents
from poolbench_locust.locust_pages import PageEvents
from poolbench_locust.metrics.collector import stats_of
from poolbench_locust.store import ATTRIBUTE, Slot, store_of
from poolbench_locust.workload.arrival import open_loop_of
from poolbench_locust.workload.warmup import warmup_of
from tests.support.harness import Run


def started(run: Run) -> Run:
    """The run's environment with the plugin's listeners, its test started, as Locust starts one."""
    run.env.create_local_runner()
    plugin.setup(run.env.events, PageEvents(), ResultEvents())  # hooks of its own, as its events are
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
    finally:
        first.env.events.test_stop.fire(environment=first.env)

    # The web UI's next START, in the same environment: the warm-up and the open loop start again.
    assert warmup_of(first.env).counting and open_loop_of(first.env).rate_override is None
    first.env.events.test_start.fire(environment=first.env)
    assert not warmup_of(first.env).counting, "the next run warms up again"
    first.env.events.test_stop.fire(environment=first.env)


def test_a_slot_makes_its_state_once_per_environment():
    made: list[list[str]] = []

    def make() -> list[str]:
        made.append([])
        return made[-1]

    slot = Slot("test_store.a_list", make)
    first, second = SimpleNamespace(), SimpleNamespace()
    assert slot.peek(first) is None, "nothing is made before it is asked for"
    slot.of(first).append("x")
    assert slot.of(first) == ["x"] and len(made) == 1, "found again, not made again"
    assert slot.of(second) == [] and len(made) == 2, "another environment has its own"
    assert getattr(first, ATTRIBUTE) == {"test_store.a_list": ["x"]}, "kept in the environment's plain dict"
    slot.drop(first)
    assert slot.peek(first) is None and store_of(first) == {}


def test_a_slot_without_a_maker_is_put_by_its_room():
    slot: Slot[int] = Slot("test_store.put_only")
    env = SimpleNamespace()
    with pytest.raises(LookupError, match="put by its room"):
        slot.of(env)
    assert slot.put(env, 3) == 3 and slot.of(env) == 3


def test_two_rooms_cannot_share_a_key():
    Slot("test_store.shared", dict)
    Slot("test_store.shared", dict)  # the same module declaring it again (imported twice) is the same slot
    other_room = "from poolbench_locust.store import Slot\nSlot('pooling_stats', dict)\n"
    done = subprocess.run(
        [sys.executable, "-c", "import poolbench_locust.metrics.collector\n" + other_room],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "slot 'pooling_stats' is declared twice" in done.stderr
