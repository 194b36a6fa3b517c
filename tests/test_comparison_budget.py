"""Which answers that carry a reference are compared (engine/comparison_budget.py): at most
--consistency-rate of the requests, at least one a second, no burst saved up over a pause. The clock is the
test's own, so the figures are exact."""

from __future__ import annotations

import pytest

from poolbench_locust.engine import comparison_budget
from poolbench_locust.engine.comparison_budget import ALWAYS, budget_for


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(comparison_budget, "monotonic", lambda: now[0])
    return now


def _taken(budget: object, requests: int, every_s: float, clock: list[float]) -> int:
    taken = 0
    for _ in range(requests):
        clock[0] += every_s
        taken += budget.take()  # type: ignore[attr-defined]
    return taken


def test_a_fast_run_compares_the_share_of_its_requests(clock: list[float]) -> None:
    # A pool of 64 requests, 8 carrying a reference: each stands for 8 requests; 1 % of them.
    budget = budget_for(0.01, pool_requests=64, carrying=8)
    # 10,000 reference-carrying requests in 10 s (80,000 requests/s): 1 % is 800 comparisons, the first at once.
    taken = _taken(budget, 10_000, 0.001, clock)
    assert taken == pytest.approx(800, abs=2)


def test_a_slow_run_still_compares_one_a_second(clock: list[float]) -> None:
    budget = budget_for(0.01, pool_requests=64, carrying=8)
    assert _taken(budget, 30, 1.0, clock) == 30  # one a second: each is compared
    assert _taken(budget, 100, 0.1, clock) == pytest.approx(10, abs=1)  # ten a second: one of them


def test_a_pause_saves_up_no_burst(clock: list[float]) -> None:
    budget = budget_for(0.01, pool_requests=64, carrying=8)
    _taken(budget, 10, 0.001, clock)
    clock[0] += 3600  # an hour between two runs of the web UI
    # The pause's own request and the one saved, then the share: not the hour's 3,600.
    assert _taken(budget, 100, 0.001, clock) == pytest.approx(2 + 99 * 8 * 0.01, abs=1)


def test_the_whole_share_compares_every_answer(clock: list[float]) -> None:
    budget = budget_for(1.0, pool_requests=8, carrying=8)
    assert _taken(budget, 500, 0.0001, clock) == 500
    assert all(ALWAYS.take() for _ in range(3))
