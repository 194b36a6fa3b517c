"""The exact percentile of a list of values (nearest rank), against which the reported ones are checked."""

from __future__ import annotations

import math

PERCENTILES = ("50%", "90%", "95%", "99%")
"""The percentile columns of Locust's stats CSV that the precision tests compare."""


def nearest_rank(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(fraction * len(ordered) - 1e-9))) - 1]
