"""B against A: each figure's difference, its interval and the verdict, by a bootstrap over the run's
blocks (its seconds, or with --ab-paired its pairs), resampled alike for both hosts so that what the
two shared (the machine's noise in that second, the input of that pair) cancels in the difference.

The interval is the difference's bootstrap standard error times the normal quantile that makes the
table's intervals hold together with 95 % (Bonferroni over its figures): a table of seven 95 % intervals
would call some figure "beyond noise" in about a run in four of two identical servers. A difference is
beyond noise when its interval leaves out zero. A percentile is judged only on enough requests for it
(10 beyond it, per host), a run only on enough blocks (MIN_SECONDS seconds, MIN_PAIRS pairs)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from statistics import NormalDist
from typing import Any

from poolbench_locust.ab.samples import Block, Side

LEVEL = 0.95
RESAMPLES = 400
MIN_SECONDS = 10
MIN_PAIRS = 30
SEED = 20261207
"""The resamples are drawn from a fixed seed: the same run's figures give the same table."""

Stat = Callable[[Sequence[Block], str], float | None]


def _sides(blocks: Sequence[Block], side: str) -> list[Side]:
    return [b.a if side == "A" else b.b for b in blocks]


def _ok(blocks: Sequence[Block], side: str) -> float:
    return float(sum(s.requests - s.failures for s in _sides(blocks, side)))


def _quantile(values: list[float], q: float) -> float | None:
    """The q-quantile of sorted values (linear between the two nearest), None when too few for it:
    10 values beyond it (p99: 1,000 values; p50: 20)."""
    n = len(values)
    if n == 0 or n * min(q, 1 - q) < 10:
        return None
    at = q * (n - 1)
    low = int(at)
    high = min(low + 1, n - 1)
    return values[low] + (values[high] - values[low]) * (at - low)


def _times(blocks: Sequence[Block], side: str, what: str) -> list[float]:
    values = list(chain.from_iterable(getattr(s, what) for s in _sides(blocks, side)))
    values.sort()
    return values


@dataclass(frozen=True)
class Figure:
    name: str
    """As the verdict says it: "p99 E2E"."""
    unit: str
    relative: bool
    """The difference is B's change in % of A's; else B - A in the figure's own unit (the failure ratio's points)."""
    higher_is_better: bool


FIGURES = (
    Figure("throughput", "requests/s", True, True),
    Figure("input tokens/s", "tokens/s", True, True),
    Figure("mean E2E", "ms", True, False),
    Figure("p50 E2E", "ms", True, False),
    Figure("p90 E2E", "ms", True, False),
    Figure("p99 E2E", "ms", True, False),
    Figure("p50 TTFB", "ms", True, False),
    Figure("failure ratio", "%", False, False),
)
PRICES = (Figure("USD/1M input tokens", "USD", True, False), Figure("USD/1k requests", "USD", True, False))
"""With --gpu-hour-cost: each host's fleet's hour over its throughput (cost/pricing.py's arithmetic). They are the
throughputs at the hosts' prices, not figures of their own: not counted in the intervals' Bonferroni family."""
PAIRED_SKIPS = ("throughput", "input tokens/s", *(f.name for f in PRICES))
"""Each pair is one input sent to both: their counts are equal by design, nothing to compare (nor their price at
them: only the prices given would differ)."""


def _price(usd_per_hour: float | None, per_s: float | None, unit: float) -> float | None:
    return usd_per_hour / (per_s * 3600.0) * unit if usd_per_hour is not None and per_s else None


def figures_of(
    blocks: Sequence[Block], side: str, seconds: float, usd_per_hour: float | None = None
) -> dict[str, float | None]:
    """Every figure of one host over `blocks`; `seconds` is the time they span (throughput's divisor);
    `usd_per_hour` its fleet's price (--gpu-hour-cost), which adds the prices at its throughput."""
    e2e = _times(blocks, side, "e2e")
    ttfb = _times(blocks, side, "ttfb")
    sides = _sides(blocks, side)
    requests = sum(s.requests for s in sides)
    failures = sum(s.failures for s in sides)
    throughput = _ok(blocks, side) / seconds if seconds > 0 else None
    tokens = sum(s.input_tokens for s in sides) / seconds if seconds > 0 else None
    return {
        "throughput": throughput,
        "input tokens/s": tokens,
        "USD/1M input tokens": _price(usd_per_hour, tokens, 1e6),
        "USD/1k requests": _price(usd_per_hour, throughput, 1e3),
        "mean E2E": (sum(e2e) / len(e2e)) if len(e2e) >= 20 else None,
        "p50 E2E": _quantile(e2e, 0.50),
        "p90 E2E": _quantile(e2e, 0.90),
        "p99 E2E": _quantile(e2e, 0.99),
        "p50 TTFB": _quantile(ttfb, 0.50),
        "failure ratio": 100.0 * failures / requests if requests else None,
    }


TOKENS_AGREE = 0.02
"""Both hosts are sent the same inputs; their token counts a request differing by more than this is two ways of
counting (Infinity's usage counts characters, vLLM's tokens), not two throughputs."""


def tokens_disagree(blocks: Sequence[Block]) -> str | None:
    """Why the hosts' input tokens/s cannot be compared: the same inputs counted differently; None where they
    agree (or one host counted none)."""
    per_request = []
    for side in ("A", "B"):
        sides = _sides(blocks, side)
        requests, tokens = sum(s.requests - s.failures for s in sides), sum(s.input_tokens for s in sides)
        per_request.append(tokens / requests if requests and tokens else None)
    a, b = per_request
    if a is None or b is None or abs(b - a) <= TOKENS_AGREE * a:
        return None
    return f"the hosts count the same inputs' tokens differently: A {a:,.1f} a request, B {b:,.1f}"


def _difference(figure: Figure, a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    if not figure.relative:
        return b - a
    return 100.0 * (b - a) / a if a > 0 else None


@dataclass(frozen=True)
class Row:
    figure: Figure
    a: float | None
    b: float | None
    difference: float | None
    low: float | None
    high: float | None
    why_none: str | None = None
    """Why there is no verdict: too few requests for the figure, too short a run."""

    @property
    def beyond_noise(self) -> bool | None:
        if self.low is None or self.high is None:
            return None
        return self.low > 0 or self.high < 0

    def verdict(self) -> str:
        f = self.figure
        if self.difference is None or self.beyond_noise is None:
            return f"B: {f.name}: no verdict ({self.why_none or 'no figure of one host'})"
        d = self.difference
        digits = (0 if abs(d) >= 10 else 1) if f.relative else 2
        size = f"{abs(d):.{digits}f} {'%' if f.relative else 'points'}"
        way = "higher" if d > 0 else "lower" if d < 0 else "equal"
        change = f"{f.name} {size} {way}" if way != "equal" else f"{f.name} equal"
        if self.beyond_noise:
            better = (d > 0) == f.higher_is_better
            return f"B: {change}, beyond noise ({'better' if better else 'worse'})"
        return f"B: {change}, within noise"

    def as_dict(self) -> dict[str, Any]:
        return {
            "figure": self.figure.name,
            "unit": self.figure.unit,
            "a": self.a,
            "b": self.b,
            "difference": self.difference,
            "difference_unit": "%" if self.figure.relative else "points",
            "low": self.low,
            "high": self.high,
            "beyond_noise": self.beyond_noise,
            "verdict": self.verdict(),
        }


@dataclass(frozen=True)
class Comparison:
    paired: bool
    blocks: int
    rows: list[Row]
    z: float
    """The normal quantile the intervals are wide by (simultaneous 95 % over the judged rows)."""
    why_none: str | None = None

    def summary(self) -> str:
        beyond = [r for r in self.rows if r.beyond_noise]
        if self.why_none is not None:
            return f"A/B: no verdict: {self.why_none}"
        if not beyond:
            return "A/B: every figure of B within noise of A's"
        return "A/B: " + "; ".join(r.verdict() for r in beyond)


def _se(values: list[float]) -> float | None:
    """The bootstrap standard error: the resampled differences' standard deviation (`compare` scales it by
    sqrt(n/(n-1)) of the blocks, by which the bootstrap's own is low)."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def compare(
    blocks: Sequence[Block],
    paired: bool,
    span: float | None = None,
    resamples: int = RESAMPLES,
    hourly: tuple[float, float] | None = None,
) -> Comparison:
    """B against A over `blocks`, each judged by a bootstrap of `resamples` draws of as many blocks; `span`
    is the seconds the blocks span (the throughputs' divisor; default one a block). A resample spans as long.
    `hourly`: A's and B's fleets' USD an hour (--gpu-hour-cost), which add the price rows."""
    n = len(blocks)
    figures = [f for f in (*FIGURES, *(PRICES if hourly else ())) if not (paired and f.name in PAIRED_SKIPS)]
    need = MIN_PAIRS if paired else MIN_SECONDS
    seconds = float(n) if span is None else span
    usd_a, usd_b = hourly or (None, None)
    a, b = figures_of(blocks, "A", seconds, usd_a), figures_of(blocks, "B", seconds, usd_b)
    points = {f.name: _difference(f, a[f.name], b[f.name]) for f in figures}
    uncounted = tokens_disagree(blocks)
    if uncounted is not None:
        points["input tokens/s"] = None
        if "USD/1M input tokens" in points:
            points["USD/1M input tokens"] = None
    judged = [f for f in figures if points[f.name] is not None]
    z = NormalDist().inv_cdf(1 - (1 - LEVEL) / (2 * max(len([f for f in judged if f not in PRICES]), 1)))
    short = None
    if n < need:
        short = f"{n} {'pairs' if paired else 'seconds'} of both hosts; {need} needed"
    draws: dict[str, list[float]] = {f.name: [] for f in judged}
    if short is None and judged:
        rng = random.Random(SEED)
        for _ in range(resamples):
            picked = [blocks[i] for i in rng.choices(range(n), k=n)]
            ra, rb = figures_of(picked, "A", seconds, usd_a), figures_of(picked, "B", seconds, usd_b)
            for f in judged:
                if (d := _difference(f, ra[f.name], rb[f.name])) is not None:
                    draws[f.name].append(d)
    rows = []
    scale = math.sqrt(n / (n - 1)) if n > 1 else 1.0
    for f in figures:
        point = points[f.name]
        se = _se(draws[f.name]) if f.name in draws and len(draws[f.name]) >= resamples // 2 else None
        why = short if short is not None else None
        if point is None:
            why = f"too few requests of a host for its {f.name}" if a[f.name] is None or b[f.name] is None else why
            if f.name in ("input tokens/s", "USD/1M input tokens") and uncounted is not None:
                why = uncounted
        elif se is None and why is None:
            why = f"too few requests of a host for its {f.name} in the resamples"
        low = high = None
        if point is not None and se is not None and why is None:
            low, high = point - z * se * scale, point + z * se * scale
        rows.append(Row(f, a[f.name], b[f.name], point, low, high, why))
    return Comparison(paired, n, rows, z, short)
