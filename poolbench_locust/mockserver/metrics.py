"""GET /metrics of the mock: what it truly counted, under the names of the server its flavor imitates.

One writer, `Writer`, writes every family's page: each family declares its `Page` beside its routes
(vllm.py, sglang.py, tei.py, llamacpp.py; every flavor without a page of its own writes vLLM's, as the route
table says): its metrics' names, help, labels, and what each one measures of an `Ended` request (or, a
gauge, of the requests in progress now). The page's `style` is how its server writes it:
- `prometheus_client` (vLLM, SGLang: Python servers): `_total` counters with their `_created` timestamps,
  written by prometheus_client itself;
- `rust` (TEI's exporter): counters without `_total` or help, each written once it has counted, the gauges
  once a request has begun, the histograms once one was served;
- `cpp` (llama.cpp's `to_metrics`): unlabelled, every metric with its help, values printed as C++ prints a
  double (6 significant digits).

What the families count from: a request ended (`every`), one that completed (its server time), one served
(completed, 2xx, no fault: what the servers' engines count; its sequences, the tokens its `usage` reported,
each sequence's server time and the wait the mock put before its headers, `ttfb_ms`), and the requests
(or inputs) in that wait now or past it.

The mock's latency buckets are finer than vLLM's (whose first is 0.3 s), so that a test can read percentiles.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import operator
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MODEL = "<model>"
"""A fixed label's value that is the served model's name."""

Count = Callable[[bool], float]
"""Inputs (or requests, for vLLM) in the wait before the headers (True) or past it (False), now."""


@dataclass(frozen=True, slots=True)
class Ended:
    """One pooling request that is over, as every family's page counts it."""

    route: str
    status: int
    seconds: float | None
    """Its time on the server; None: not completed (the client hung up, or a fault cut it short)."""
    served: bool
    """Completed, 2xx, no fault: what the servers' engines count."""
    sequences: int
    tokens: int
    queue: float
    """The wait before its headers, in seconds."""
    cached_tokens: int = 0
    """Of its tokens, those of prompts served before (PrefixCache): what vLLM's prefix cache counts as hits."""

    def input_tokens(self) -> list[int]:
        """Each input's tokens, as near equal as whole numbers go: their sum is the request's count exactly."""
        if not self.sequences:
            return []
        q, r = divmod(self.tokens, self.sequences)
        return [q + 1] * r + [q] * (self.sequences - r)


class Reading:
    """What a gauge reads: the requests (or inputs) in the wait and past it now, and the page's counters."""

    def __init__(self, count: Count, totals: Callable[[str], float]) -> None:
        self._count = count
        self._totals = totals

    @property
    def waiting(self) -> float:
        return self._count(True)

    @property
    def running(self) -> float:
        return self._count(False)

    def __getitem__(self, name: str) -> float:
        """The value of the page's counter `name` (a `rust` or `cpp` page's, all its labels together)."""
        return self._totals(name)


@dataclass(frozen=True)
class Metric:
    """One metric of a page. `measure` is, for a counter, what one ended request adds to it (0: nothing);
    for a histogram, what it observes of one; for a gauge, its value now."""

    kind: Literal["counter", "gauge", "histogram"]
    name: str
    help: str
    measure: Callable[[Any], Any]
    labels: Mapping[str, str] = field(default_factory=dict)
    """Fixed labels (the value MODEL: the served model's name): the metric is written from the start."""
    per_request: tuple[tuple[str, ...], Callable[[Ended], tuple[str, ...]]] | None = None
    """Labels each request gives (their names, and their values for one): a series per value, once counted."""
    buckets: tuple[float, ...] = LATENCY_BUCKETS
    keep: Callable[[float, float], float] = operator.add
    """How a counter takes what a request adds: summed, or (llama.cpp's n_tokens_max) the largest."""


@dataclass(frozen=True)
class Page:
    style: Literal["prometheus_client", "rust", "cpp"]
    metrics: tuple[Metric, ...]
    per_input: bool
    """The gauges count inputs (True) or requests (vLLM's, as the mock always counted them)."""


# What the families measure of a request (counters: what it adds; histograms: what they observe).
def each_request(e: Ended) -> int:
    return 1


def never(e: Ended) -> int:
    return 0


def served_sequences(e: Ended) -> int:
    return e.sequences if e.served else 0


def served_tokens(e: Ended) -> int:
    return e.tokens if e.served else 0


def served_cached_tokens(e: Ended) -> int:
    return e.cached_tokens if e.served else 0


def server_seconds(e: Ended) -> list[float]:
    return [e.seconds] if e.seconds is not None else []


def served_seconds_per_input(e: Ended) -> list[float]:
    return [e.seconds] * e.sequences if e.served and e.seconds is not None else []


def served_queue_per_input(e: Ended) -> list[float]:
    return [e.queue] * e.sequences if e.served else []


def waiting(reading: Reading) -> float:
    return reading.waiting


def running(reading: Reading) -> float:
    return reading.running


class _Hist:
    """One histogram as a hand-written exporter keeps it: per-bucket counts, sum and count."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[next((i for i, b in enumerate(self.bounds) if value <= b), len(self.bounds))] += 1
        self.sum += value

    def lines(self, name: str) -> list[str]:
        out = [f"# TYPE {name} histogram"]
        for bound, seen in zip((*self.bounds, math.inf), itertools.accumulate(self.counts), strict=True):
            out.append(f'{name}_bucket{{le="{"+Inf" if math.isinf(bound) else repr(bound)}"}} {seen}')
        out += [f"{name}_sum {self.sum!r}", f"{name}_count {sum(self.counts)}"]
        return out


class Writer:
    """The one writer: a family's page, fed every ended request, written in its server's style."""

    def __init__(self, page: Page, model: str, count: Count) -> None:
        self.page = page
        self._reading = Reading(count, self._total)
        self._begun = self._served = False
        self._counts: dict[str, dict[tuple[str, ...], float]] = {m.name: {} for m in page.metrics}
        """A hand-written page's counters: label values -> value."""
        self._hists = {m.name: _Hist(m.buckets) for m in page.metrics if m.kind == "histogram"}
        self._client: dict[str, Any] = {}
        """A prometheus_client page's metrics, by name."""
        if page.style == "prometheus_client":
            self.registry = CollectorRegistry()
            for m in page.metrics:
                self._client[m.name] = self._register(m, model)

    def _register(self, m: Metric, model: str) -> Any:
        """The prometheus_client metric of `m`: its child of the fixed labels, or its parent to label per request."""
        fixed = {k: model if v == MODEL else v for k, v in m.labels.items()}
        names = list(fixed) if m.per_request is None else list(m.per_request[0])
        made: Histogram | Counter | Gauge
        if m.kind == "histogram":
            made = Histogram(m.name, m.help, names, buckets=m.buckets, registry=self.registry)
        else:
            made = (Counter if m.kind == "counter" else Gauge)(m.name, m.help, names, registry=self.registry)
        if m.per_request is not None:
            return made
        child = made.labels(**fixed) if fixed else made
        if m.kind == "gauge":
            cast(Gauge, child).set_function(lambda: m.measure(self._reading))
        return child

    def began(self) -> None:
        self._begun = True

    def ended(self, e: Ended) -> None:
        self._served = self._served or e.served
        for m in self.page.metrics:
            if m.kind == "gauge":
                continue
            measured = m.measure(e)
            if not measured:
                continue
            key = m.per_request[1](e) if m.per_request is not None else ()
            if m.name in self._client:
                target = self._client[m.name]
                if m.per_request is not None:
                    target = target.labels(*key)
                if m.kind == "counter":
                    target.inc(measured)
                else:
                    for value in measured:
                        target.observe(value)
            elif m.kind == "counter":
                counts = self._counts[m.name]
                counts[key] = m.keep(counts[key], measured) if key in counts else measured
            else:
                for value in measured:
                    self._hists[m.name].observe(value)

    def _total(self, name: str) -> float:
        return sum(self._counts[name].values())

    def text(self) -> bytes:
        if self.page.style == "prometheus_client":
            return generate_latest(self.registry)
        lines: list[str] = []
        for m in self.page.metrics:
            if self.page.style == "cpp":
                value = m.measure(self._reading) if m.kind == "gauge" else self._total(m.name)
                # as `prometheus << double` writes it: %g, six significant digits
                lines += [f"# HELP {m.name} {m.help}", f"# TYPE {m.name} {m.kind}", f"{m.name} {value:g}"]
            elif m.kind == "counter" and (counts := self._counts[m.name]):
                names = m.per_request[0] if m.per_request is not None else ()
                lines.append(f"# TYPE {m.name} counter")
                for key, n in sorted(counts.items()):
                    labels = ",".join(f'{k}="{v}"' for k, v in zip(names, key, strict=True))
                    lines.append(f"{m.name}{{{labels}}} {n}" if labels else f"{m.name} {n}")
            elif m.kind == "gauge" and self._begun:  # made at the first input queued, as TEI's
                lines += [f"# TYPE {m.name} gauge", f"{m.name} {m.measure(self._reading):g}"]
            elif m.kind == "histogram" and self._served:  # the exporter writes a histogram once it has an observation
                lines += self._hists[m.name].lines(m.name)
        return ("\n".join(lines) + "\n").encode()


PREFIX_CACHE_PROMPTS = 65_536
"""Prompts the mock's prefix cache remembers (16 bytes each), the least recently used forgotten first."""


class PrefixCache:
    """The prompts served before, as a prefix cache of whole prompts: a prompt served again is all hits (a real
    cache finds its blocks, and the shared start of new prompts too: the mock counts only exact repeats)."""

    def __init__(self, size: int = PREFIX_CACHE_PROMPTS) -> None:
        self._size = size
        self._seen: OrderedDict[bytes, None] = OrderedDict()

    def hits(self, prompts: tuple[tuple[object, int], ...]) -> int:
        """The tokens of `prompts` served before; each is remembered from now on."""
        found = 0
        for prompt, tokens in prompts:
            key = hashlib.blake2b(repr(prompt).encode(), digest_size=16).digest()
            if key in self._seen:
                self._seen.move_to_end(key)
                found += tokens
                continue
            self._seen[key] = None
            if len(self._seen) > self._size:
                self._seen.popitem(last=False)
        return found


class Metrics:
    def __init__(self, model: str, page: Page) -> None:
        self._in_progress: dict[int, tuple[float, int]] = {}
        """Request number -> when its wait before the headers ends (monotonic), and what it weighs in the
        gauges: 1 for vLLM (requests, as the mock always counted them), its inputs for the others."""
        self._numbers = itertools.count()
        self._per_input = page.per_input
        self._writer = Writer(page, model, self._count_in_progress)
        self._prefix_cache = PrefixCache()

    def _count_in_progress(self, waiting: bool) -> float:
        now = time.monotonic()
        return float(sum(weight for ends, weight in self._in_progress.values() if (now < ends) == waiting))

    def began(self, arrived: float, ttfb_ms: float, sequences: int = 1) -> int:
        number = next(self._numbers)
        self._in_progress[number] = (arrived + ttfb_ms / 1000, max(sequences, 1) if self._per_input else 1)
        self._writer.began()
        return number

    def ended(
        self,
        number: int,
        route: str,
        status: int,
        arrived: float,
        done: float | None,
        served: bool,
        sequences: int,
        tokens: int,
        ttfb_ms: float,
        prompts: tuple[tuple[object, int], ...] = (),
    ) -> None:
        """One pooling request is over; `served`: completed, 2xx, no fault (what the servers' engines count);
        `prompts`: the prompts it ran and their tokens, where its route says them (the prefix cache's)."""
        self._in_progress.pop(number, None)
        seconds = None if done is None else done - arrived
        cached = min(self._prefix_cache.hits(prompts), tokens) if served else 0
        self._writer.ended(Ended(route, status, seconds, served, sequences, tokens, ttfb_ms / 1000, cached))

    def text(self) -> bytes:
        return self._writer.text()
