"""--repeat's 95 % interval on a simulated server of known mean and spread: each run's repeats are the
per-window throughput of a first-order autoregression (AR(1)) whose correlation the test sets, fed to the
repeats' table the run uses (repeat_table.RepeatTable.intervals, batch_means.batch_interval). Over 200
runs of 20 repeats the interval must hold the true mean in 90-99 % of them (a run refused an interval
counts as one that missed), independent repeats or correlated ones (phi = 0.5); for the correlated ones
Student's t alone (the interval before the check) holds it in fewer than 90 %. The series are seeded:
each case is one fixed draw of 200 runs, three draws a case."""

from __future__ import annotations

import math
import random

import pytest

from poolbench_locust.options.registry import ALL_OPTIONS
from poolbench_locust.repeats.batch_means import (
    CHECK_MIN,
    METHOD,
    batch_interval,
    lag1_autocorrelation,
    variance_factor,
    widening,
)
from poolbench_locust.repeats.repeat_table import HEADLINE, RepeatTable, interval_line
from poolbench_locust.repeats.student_t import mean_ci95

TRUE_MEAN, SIGMA = 400.0, 20.0
"""The simulated server's requests/s: its mean, and the spread of one window's figure about it."""
RUNS, WINDOWS = 200, 20
"""200 simulated runs of 20 repeats each (a 10-minute -t cut into 30 s repeats, say)."""


def simulated_windows(rng: random.Random, phi: float, n: int = WINDOWS) -> list[float]:
    """n consecutive windows' requests/s: AR(1) about TRUE_MEAN with correlation phi between neighbours and
    a marginal spread SIGMA, started from the stationary distribution (a run after its warm-up)."""
    deviation = rng.gauss(0.0, SIGMA)
    out = []
    for _ in range(n):
        out.append(TRUE_MEAN + deviation)
        deviation = phi * deviation + rng.gauss(0.0, SIGMA * math.sqrt(1.0 - phi * phi))
    return out


def table_of(values: list[float]) -> RepeatTable:
    """A repeats' table holding these windows as the run's rows (every headline figure the same series)."""
    table = RepeatTable(None, len(values))  # type: ignore[arg-type]  # intervals() reads the rows alone
    table.repeats = [{"repeat": i, **{key: v for key, _ in HEADLINE}} for i, v in enumerate(values, 1)]
    return table


def coverage(phi: float, seed: int) -> tuple[float, float, int]:
    """Over RUNS simulated runs: the share whose checked interval holds the true mean (a refused interval
    counts as a miss: the run gave no interval), Student's t's share, and the refusals."""
    rng = random.Random(seed)
    held = plain_held = refused = 0
    for _ in range(RUNS):
        values = simulated_windows(rng, phi)
        found = table_of(values).intervals()["requests_per_s"]
        assert found is not None
        if found.low is None or found.high is None:
            refused += 1
        else:
            held += found.low <= TRUE_MEAN <= found.high
        plain = mean_ci95(values)
        assert plain is not None
        plain_held += plain[1] <= TRUE_MEAN <= plain[2]
    return held / RUNS, plain_held / RUNS, refused


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_independent_repeats_interval_holds_the_true_mean_in_90_to_99_percent(seed: int) -> None:
    held, plain_held, refused = coverage(0.0, seed)
    assert 0.90 <= held <= 0.99, (held, plain_held, refused)
    assert refused <= RUNS // 20  # uncorrelated windows are seldom taken for correlated ones


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_correlated_repeats_interval_is_widened_to_hold_the_true_mean(seed: int) -> None:
    held, plain_held, refused = coverage(0.5, seed)
    assert 0.90 <= held <= 0.99, (held, plain_held, refused)
    assert plain_held < 0.90, plain_held  # what the check is for: Student's t alone is too narrow here


def test_the_widening_is_one_for_independent_windows_and_grows_with_their_correlation() -> None:
    assert variance_factor(0.0, 10) == 1.0 and widening(0.0, 10) == 1.0
    assert widening(-0.3, 10) == 1.0  # a negative correlation is not relied on to narrow the interval
    factors = [widening(phi, 10) for phi in (0.2, 0.4, 0.6, 0.79)]
    assert factors == sorted(factors) and factors[0] > 1.0
    # n large: the factor tends to the AR(1) limit sqrt((1 + phi) / (1 - phi))
    assert widening(0.5, 10_000) == pytest.approx(math.sqrt(3.0), rel=0.01)


def test_lag1_of_known_series() -> None:
    assert lag1_autocorrelation([1.0, -1.0] * 5) == pytest.approx(-0.9)  # alternating: -(n - 1) / n
    assert lag1_autocorrelation([5.0] * 6) is None  # no spread
    assert lag1_autocorrelation([1.0, 2.0]) is None


def test_too_few_repeats_and_a_trend_give_no_interval_and_say_why() -> None:
    few = batch_interval([100.0, 102.0, 98.0, 101.0])
    assert few is not None and few.low is None and few.verdict == "refused: too few"
    assert f"--repeat {CHECK_MIN} or more" in interval_line(few)
    trend = batch_interval([100.0 + 5 * i for i in range(10)])  # a server slowing down steadily
    assert trend is not None and trend.low is None and trend.verdict == "refused: correlated"
    assert "consecutive repeats are correlated" in interval_line(trend)
    independent = batch_interval([100.0, 104.0, 97.0, 103.0, 99.0, 102.0, 96.0, 101.0])
    assert independent is not None and independent.low is not None and independent.verdict == "independent"


def test_the_json_result_and_help_say_the_method() -> None:
    table = table_of(simulated_windows(random.Random(7), 0.0))
    found = table.to_json()
    assert found["repeats_interval"]["method"] == METHOD
    figures = found["repeats_interval"]["figures"]["requests_per_s"]
    assert set(figures) == {"windows", "lag1_autocorrelation", "phi", "widened_by", "verdict"}
    assert figures["windows"] == WINDOWS
    (help_text,) = [o.help for o in ALL_OPTIONS if o.flag == "--repeat"]
    assert "consecutive repeats" in help_text and "lag-1 autocorrelation" in help_text
