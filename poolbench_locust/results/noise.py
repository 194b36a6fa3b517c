"""How much a figure would move between two runs of the same test: a bootstrap over the run's seconds.

A run's blocks (series.py: what each second added) are merged into CHUNKS of a few seconds, so that
on a master one chunk spans a worker's 3 s report; the chunks are then drawn with replacement
RESAMPLES times and the figure is computed from each draw (a rate from the summed counts and
seconds, a percentile from the summed histograms, with Locust's percentile function). The spread of
those draws is the figure's standard error. Two runs differ beyond noise when their figures are
further apart than Z standard errors of the difference, and by more than the histogram's resolution.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from locust.stats import calculate_response_time_percentile

from poolbench_locust.results.series import Block, merge_blocks

MAX_CHUNKS = 100
MIN_CHUNKS = 6
"""Fewer chunks than this give no estimate of the noise: the figure is shown, never marked."""
CHUNK_S = 5.0
RESAMPLES = 200
Z = 3.0
"""Standard errors of the difference a change must exceed: about 1 in 370 for one figure of two
identical runs, and a table has some tens of figures."""


def chunks(blocks: Sequence[Block]) -> list[Block]:
    """The blocks with requests in them, merged into chunks of about CHUNK_S seconds (more when
    the run is long, fewer when it is short, so that there are between ten and MAX_CHUNKS)."""
    live = [b for b in blocks if b["requests"] > 0]
    if not live:
        return []
    width = sum(b["seconds"] for b in live) / len(live) or 1.0
    per_chunk = max(math.ceil(len(live) / MAX_CHUNKS), min(max(round(CHUNK_S / width), 1), len(live) // 10), 1)
    return [merge_blocks(live[i : i + per_chunk]) for i in range(0, len(live), per_chunk)]


def rate_of(count: str) -> Callable[[Block], float | None]:
    def of(block: Block) -> float | None:
        n = block.get(count)  # None: a result written before the count was kept (series.LATER_COUNTS)
        return n / block["seconds"] if n is not None and block["seconds"] > 0 else None

    return of


def _mean_e2e(block: Block) -> float | None:
    return block["e2e_sum_ms"] / block["requests"] if block["requests"] else None


def percentile_of(timing: str, fraction: float) -> Callable[[Block], float | None]:
    def of(block: Block) -> float | None:
        counts = {int(k): n for k, n in block["timings"].get(timing, {}).items()}
        total = sum(counts.values())
        return calculate_response_time_percentile(counts, total, fraction) if total else None

    return of


@dataclass(frozen=True)
class Figure:
    title: str
    better: str
    """'higher' (a throughput) or 'lower' (a time)."""
    source: str
    """Where the figure is read: 'pooling' (table.rows), 'locust' (Locust's CSV row) or 'step' (a sweep row)."""
    column: str
    of_block: Callable[[Block], float | None]
    unit: str = ""
    same_as: str | None = None
    """A column this figure equals in most runs (Vectors/s is Sequences/s but for token-level and multi-vector
    answers): the figure is left out of a table where it equals that column in every run."""

    @property
    def label(self) -> str:
        return self.title + (f" ({self.unit})" if self.unit else "")

    def resolution(self, value: float) -> float:
        """The smallest change the figure can show: Locust's histogram buckets for a percentile."""
        if self.better != "lower" or self.column.startswith("Average"):
            return 0.0
        return 1.0 if value < 100 else 10.0 if value < 1000 else 100.0


def _percentiles(title: str, timing: str, source: str, ps: Sequence[int]) -> list[Figure]:
    return [Figure(f"{title} {p}%", "lower", source, f"{title} {p}%", percentile_of(timing, p / 100), "ms") for p in ps]


FIGURES: tuple[Figure, ...] = (
    Figure("Requests/s", "higher", "locust", "Requests/s", rate_of("requests")),
    Figure("Input Tokens/s", "higher", "pooling", "Input Tokens/s", rate_of("input_tokens")),
    Figure("Sequences/s", "higher", "pooling", "Sequences/s", rate_of("sequences")),
    Figure("Vectors/s", "higher", "pooling", "Vectors/s", rate_of("vectors"), same_as="Sequences/s"),
    Figure("MB/s", "higher", "pooling", "MB/s", rate_of("bytes")),
    Figure("Sent MB/s", "higher", "pooling", "Sent MB/s", rate_of("sent_bytes")),
    Figure("E2E mean", "lower", "locust", "Average Response Time", _mean_e2e, "ms"),
    *_percentiles("E2E", "e2e", "pooling", (50, 90, 99)),
    *_percentiles("TTFB", "ttfb", "pooling", (50, 99)),
    *_percentiles("Transfer", "transfer", "pooling", (50,)),
)
STEP_FIGURES: tuple[Figure, ...] = (
    Figure("Requests/s", "higher", "step", "Requests/s", rate_of("requests")),
    Figure("Input Tokens/s", "higher", "step", "Input Tokens/s", rate_of("input_tokens")),
    *_percentiles("E2E", "e2e", "step", (50, 99)),
)


REPEAT_FIGURES: tuple[Figure, ...] = (
    Figure("Requests/s", "higher", "repeats", "requests_per_s", rate_of("requests")),
    Figure("Input Tokens/s", "higher", "repeats", "input_tokens_per_s", rate_of("input_tokens")),
    Figure("E2E 50%", "lower", "repeats", "e2e_p50_ms", percentile_of("e2e", 0.50), "ms"),
    Figure("E2E 99%", "lower", "repeats", "e2e_p99_ms", percentile_of("e2e", 0.99), "ms"),
)
"""--repeat's headline figures: the mean of the repeats, its noise their spread (repeat_error)."""


def repeat_error(values: Sequence[float]) -> float | None:
    """The standard error of the repeats' mean over the mean: the repeats are independent runs of the
    same test, so their spread measures the run-to-run noise itself; None with fewer than two."""
    if len(values) < 2:
        return None
    centre = statistics.fmean(values)
    return statistics.stdev(values) / math.sqrt(len(values)) / abs(centre) if centre else None


def relative_error(figure: Figure, pieces: Sequence[Block], seed: int = 0) -> float | None:
    """The figure's standard error over its value, from RESAMPLES draws of the chunks; None when
    the run is too short to tell."""
    if len(pieces) < MIN_CHUNKS:
        return None
    rng = random.Random(seed)
    draws = []
    for _ in range(RESAMPLES):
        value = figure.of_block(merge_blocks(rng.choices(pieces, k=len(pieces))))
        if value is not None:
            draws.append(value)
    if len(draws) < RESAMPLES // 2:
        return None
    centre = statistics.fmean(draws)
    return statistics.pstdev(draws) / abs(centre) if centre else None


@dataclass(frozen=True)
class Change:
    base: float | None
    new: float | None
    noise: float | None
    """Half-width of the band a change must leave to be marked (Z standard errors, or the resolution)."""

    @property
    def delta(self) -> float | None:
        return None if self.base is None or self.new is None else self.new - self.base

    @property
    def relative(self) -> float | None:
        delta = self.delta
        return None if delta is None or not self.base else delta / abs(self.base)

    @property
    def significant(self) -> bool:
        delta = self.delta
        return delta is not None and self.noise is not None and abs(delta) > self.noise

    def worse_by(self, figure: Figure) -> float:
        """How much worse the new run is, as a fraction of the base (0 when better or unchanged)."""
        rel = self.relative or 0.0
        return max(-rel if figure.better == "higher" else rel, 0.0)


def change(
    figure: Figure, base: float | None, new: float | None, base_error: float | None, new_error: float | None
) -> Change:
    if base is None or new is None or base_error is None or new_error is None:
        return Change(base, new, None)
    spread = math.hypot(base_error * base, new_error * new)
    return Change(base, new, max(Z * spread, figure.resolution(max(base, new))))


def value(cell: Any) -> float | None:
    """A figure from a table cell: a finite number, else None (an empty or N/A cell, or a bad file)."""
    if isinstance(cell, bool) or not isinstance(cell, int | float):
        return None
    return float(cell) if math.isfinite(cell) else None
