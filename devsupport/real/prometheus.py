"""Read counters and histograms out of a Prometheus text page, as the tests compare against them."""

from __future__ import annotations

import math
import re

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def total(text: str, name: str) -> float:
    """The sum of every sample of `name` (all label sets): a counter over engines and models."""
    value = 0.0
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and match.group(1) == name:
            sample = float(match.group(3))
            if math.isfinite(sample):
                value += sample
    return value


def histogram(text: str, name: str) -> tuple[float, float]:
    """(sum, count) of a histogram."""
    return total(text, name + "_sum"), total(text, name + "_count")
