"""The 95 % interval of the mean of consecutive repeats: batch means whose correlation is checked.

The repeats of one run are consecutive windows of the same load, not independent runs: a server that
is slow for a while (a cache warming, a neighbour's load, a clock slowing down with heat) is slow in
neighbouring windows alike. Student's t treats the N windows as independent, and when they are not its
interval is too narrow twice over: the mean wanders more than sigma/sqrt(N), and the windows' own spread
understates sigma.

So each figure's windows are checked: their lag-1 autocorrelation r1 is read as phi, the correlation of
one window with the next under a first-order autoregression (AR(1)): the phi whose expected r1 over N
values is the r1 measured, since r1 of few values is well below phi. Then:
- phi at PHI_REFUSED or above: no interval (a trend or a random walk has no mean to give one of);
- else the interval is widened by the exact finite-N factor of an AR(1) whose phi is read from r1 raised
  by LEAN standard errors: the mean's variance is c(phi) sigma^2 / N, the windows' sample variance
  expects (N - c(phi)) / (N - 1) sigma^2, with c(phi) = 1 + 2 sum_k (1 - k/N) phi^k, and the degrees of
  freedom shrink to N (1 - phi) / (1 + phi) less one, not below DF_FLOOR;
- fewer than CHECK_MIN windows: no interval, too few to tell.
tests/test_repeat_coverage.py holds the interval's coverage on simulated series, correlated and not."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from poolbench_locust.repeats.student_t import t_975

METHOD = "batch means: consecutive repeats, Student's t widened by their lag-1 autocorrelation"
"""The JSON result's `repeats_interval.method`, the --help text's and the docs' words for it."""
CHECK_MIN = 5
"""The fewest windows whose lag-1 autocorrelation says anything (with 4 or fewer, one window decides it)."""
PHI_REFUSED = 0.95
"""At this correlation or above, N windows are worth fewer than N/39 independent ones (a trend, or a
random walk, has no mean to give an interval of): the interval is refused."""
LEAN = 0.5
"""The measured r1 is raised by LEAN standard errors (1/sqrt(N)) before phi is read from it."""
DF_FLOOR = 4
"""The fewest degrees of freedom a widened interval is given (N - 1 when that is fewer)."""


@dataclass(frozen=True)
class Interval:
    """One figure's repeats: their mean, the interval (None when refused) and the check's figures."""

    mean: float
    low: float | None
    high: float | None
    windows: int
    lag1: float | None
    """The windows' lag-1 autocorrelation as measured (None with fewer than CHECK_MIN)."""
    phi: float | None
    """The correlation of one window with the next that lag1 points to (an AR(1)'s, whose expected r1 is
    lag1), within [-0.99, 1]; the widening reads it from lag1 raised by LEAN standard errors."""
    widened_by: float
    """The half-width over Student's t's for N independent windows (1.0: not widened), the fewer degrees
    of freedom included."""
    verdict: str
    """`independent`, `widened`, `refused: correlated` or `refused: too few`."""

    def as_dict(self) -> dict[str, float | int | str | None]:
        return {
            "windows": self.windows,
            "lag1_autocorrelation": _round(self.lag1),
            "phi": _round(self.phi),
            "widened_by": round(self.widened_by, 3),
            "verdict": self.verdict,
        }

    def reason(self) -> str:
        """Why there is no interval, in a line's words; "" when there is one."""
        if self.verdict == "refused: too few":
            return (
                f"no interval: {self.windows} repeats are too few to check that they are independent "
                f"(--repeat {CHECK_MIN} or more)"
            )
        if self.verdict == "refused: correlated":
            return (
                f"no interval: consecutive repeats are correlated (lag-1 autocorrelation {self.lag1:.2f}, "
                f"phi {self.phi:.2f} >= {PHI_REFUSED}); fewer, longer repeats (a smaller --repeat or a longer -t) "
                "or separate runs"
            )
        return ""


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def lag1_autocorrelation(values: Sequence[float]) -> float | None:
    """r1 = sum (x_i - m)(x_i+1 - m) / sum (x_i - m)^2; None for fewer than 3 values or no spread."""
    if len(values) < 3:
        return None
    mean = statistics.fmean(values)
    deviations = [v - mean for v in values]
    spread = sum(d * d for d in deviations)
    if spread <= 0.0:
        return None
    return sum(a * b for a, b in itertools.pairwise(deviations)) / spread


PHI_RANGE = (-0.99, 0.999)
"""Where phi is sought: r1 beyond what the upper end expects reads as phi = 1 (a trend, or a random walk)."""


def expected_lag1(phi: float, n: int) -> float:
    """What r1 of n values of an AR(1) of this phi expects (its numerator's expectation over its
    denominator's): below phi with few values, since each deviation is from the values' own mean."""
    # cov(x_i, mean) for unit variance: the sum of phi^|i-j| over j, closed form, over n
    near = [((1.0 - phi ** (i + 1)) + (1.0 - phi ** (n - i))) / (1.0 - phi) - 1.0 for i in range(n)]
    with_mean = [c / n for c in near]
    var_mean = sum(with_mean) / n
    numerator = sum(phi - with_mean[i] - with_mean[i + 1] + var_mean for i in range(n - 1))
    return numerator / (n * (1.0 - var_mean))


def phi_of(r1: float, n: int) -> float:
    """The AR(1) coefficient whose expected r1 over n values is the r1 measured (by bisection: the
    expectation grows with phi); 1.0 when r1 is beyond what any stationary series expects."""
    low, high = PHI_RANGE
    if r1 >= expected_lag1(high, n):
        return 1.0
    if r1 <= expected_lag1(low, n):
        return low
    for _ in range(40):
        mid = (low + high) / 2.0
        low, high = (mid, high) if expected_lag1(mid, n) < r1 else (low, mid)
    return (low + high) / 2.0


def variance_factor(phi: float, n: int) -> float:
    """c(phi): the variance of the mean of n AR(1) values over that of n independent ones."""
    return 1.0 + 2.0 * sum((1.0 - k / n) * phi**k for k in range(1, n))


def widening(phi: float, n: int) -> float:
    """The half-width of a correlated series' interval over the plain one's: the mean's true spread over
    what the sample's spread expects of it (1.0 for phi <= 0: a negative correlation is not relied on)."""
    if phi <= 0.0:
        return 1.0
    c = variance_factor(phi, n)
    return math.sqrt(c * (n - 1) / (n - c))


def batch_interval(values: Sequence[float]) -> Interval | None:
    """The mean of the finite values and its 95 % interval, checked; None with fewer than two values."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    n = len(finite)
    if n < 2:
        return None
    mean = statistics.fmean(finite)
    if n < CHECK_MIN:
        return Interval(mean, None, None, n, None, None, 1.0, "refused: too few")
    r1 = lag1_autocorrelation(finite)
    if r1 is None:  # every window the same figure: nothing wanders, the interval is the point
        return Interval(mean, mean, mean, n, None, None, 1.0, "independent")
    phi = phi_of(r1, n)
    if phi >= PHI_REFUSED:
        return Interval(mean, None, None, n, r1, phi, 1.0, "refused: correlated")
    # Leaning to the wide side: r1 of few values is loose (its standard error about 1/sqrt(n)), and an
    # interval too narrow misleads where one too wide does not; half a standard error up is what holds
    # the coverage of correlated series at 20 repeats without taking independent ones for correlated.
    leaned = min(phi_of(min(r1 + LEAN / math.sqrt(n), 1.0), n), PHI_REFUSED)
    # The windows hold fewer independent values than n: n (1 - phi) / (1 + phi) of them; never fewer
    # than DF_FLOOR + 1, where t's quantile (12.7 at one degree of freedom) rather than the data would
    # set the width.
    df = n - 1 if leaned <= 0.0 else max(round(n * (1.0 - leaned) / (1.0 + leaned)) - 1, min(DF_FLOOR, n - 1))
    plain = t_975(n - 1) * statistics.stdev(finite) / math.sqrt(n)
    half = widening(leaned, n) * t_975(df) / t_975(n - 1) * plain
    factor = half / plain if plain > 0.0 else 1.0
    return Interval(mean, mean - half, mean + half, n, r1, phi, factor, "widened" if factor > 1.0 else "independent")
