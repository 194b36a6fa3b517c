"""--repeat N: the measured window run N times, each repeat's figures what the server served in it, and
the headline figures' mean and 95 % confidence interval (Student's t, without scipy)."""

from __future__ import annotations

import pytest

from poolbench_locust.repeats.student_t import mean_ci95, t_975


@pytest.mark.parametrize(
    ("df", "expected"),
    [
        (1, 12.706),
        (2, 4.303),
        (4, 2.776),
        (10, 2.228),
        (29, 2.045),
        (30, 2.042),
        (40, 2.021),
        (60, 2.000),
        (120, 1.980),
    ],
)
def test_t_critical_values_match_the_printed_table(df: int, expected: float) -> None:
    assert t_975(df) == pytest.approx(expected, abs=0.0006)


def test_the_interval_of_known_values() -> None:
    mean, low, high = mean_ci95([9.0, 10.0, 11.0, 10.0])  # their sample sd is sqrt(2/3)
    half = 3.1824 * (2 / 3) ** 0.5 / 2
    assert mean == pytest.approx(10.0)
    assert (low, high) == pytest.approx((10.0 - half, 10.0 + half))
    assert low < mean < high


def test_one_value_has_no_interval() -> None:
    assert mean_ci95([5.0]) is None
    assert mean_ci95([]) is None
