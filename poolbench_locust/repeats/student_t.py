"""The mean and 95 % confidence interval of a few repeats' figures, with Student's t (no scipy).

The two-sided 95 % critical values for 1..30 degrees of freedom are the printed table's, to four
decimals; beyond 30 the Cornish-Fisher expansion of t in the normal quantile, which is within 0.0005
of the exact value from 30 degrees of freedom up (2.0423 at 30, 2.0003 at 60, 1.9799 at 120)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

T_975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)  # fmt: skip
"""t(0.975, df) for df = 1..30."""
Z_975 = 1.959964


def t_975(df: int) -> float:
    """The two-sided 95 % critical value of Student's t with `df` degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(T_975):
        return T_975[df - 1]
    z = Z_975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_ci95(values: Sequence[float]) -> tuple[float, float, float] | None:
    """(mean, low, high) of the values' mean; None with fewer than two values (no spread to judge)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if len(finite) < 2:
        return None
    mean = statistics.fmean(finite)
    half = t_975(len(finite) - 1) * statistics.stdev(finite) / math.sqrt(len(finite))
    return mean, mean - half, mean + half
