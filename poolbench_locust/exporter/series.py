"""The client's own figures as Prometheus series, read from the pooling stats when Prometheus scrapes.

Nothing here runs per request: a scrape walks the pooling stats (metrics/collector.py) as they are
at that moment, the same figures the Pooling CSV prints at the end, so the counters equal that file.
Under gevent a scrape is one greenlet that never yields while it reads, so it needs no lock and sees
no half-merged worker report; what it costs the users is one pass over each histogram's buckets.

Every series but the gauges carries `run`: a number that grows by one at each reset of the stats
(a run's START, the end of --warmup, the web UI's Reset stats). A run's counters only grow; when the
stats are reset, the old run's series stop being served (Prometheus marks them stale) and the new
run's start from zero, so no counter ever goes down.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from operator import mul
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from poolbench_locust.metrics.collector import SOURCES, Entry, PoolingStats
from poolbench_locust.metrics.histogram import SUB_BUCKETS, Histogram, bucket_key, bucket_value

BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0)
"""1 ms to 60 s. Each is an edge of the pooling histogram's own buckets (a power of two times k/2048),
so every count is exact: a bucket of the precise histogram lies wholly below or wholly above each."""
_BOUNDS_MS = tuple(b * 1000 for b in BUCKETS_S)
_LE = (*(repr(b) for b in BUCKETS_S), "+Inf")
TIMINGS = (
    ("e2e", "poolbench_e2e_seconds", "Whole request time, first byte sent to last byte read (all requests)."),
    ("ttfb", "poolbench_ttfb_seconds", "Time to the response headers."),
    ("transfer", "poolbench_transfer_seconds", "Time from the headers to the last byte of the body."),
    ("queue", "poolbench_queue_seconds", "Open loop: how late a request left after its scheduled time."),
)
METHOD = "POST"
"""Every request of an EndpointUser is a POST (engine/user.py), as the Pooling CSV's Type column says."""
MAX_NAMES = 100
"""Request names served with a label of their own; the rest of a run's names add up under OTHER."""
MAX_WORKERS = 256
MAX_LABEL_CHARS = 120
OTHER = "(other)"
OTHER_SOURCE = "other"


def label(text: Any) -> str:
    """A label value from a name nobody vetted (a User class's request name, a worker's id, an option):
    printable characters only (a lone surrogate would break the page's UTF-8) and at most
    MAX_LABEL_CHARS of them."""
    text = str(text)
    if len(text) > MAX_LABEL_CHARS:
        text = text[: MAX_LABEL_CHARS - 1] + "…"
    return "".join(c if c.isprintable() else "?" for c in text)


_MIDDLES: dict[int, array[float]] = {}
"""Row -> bucket_value of each of its SUB_BUCKETS buckets, made the first time a histogram has the row (at
most ROWS rows, 8 kB each, the same for every histogram)."""
_BOUNDS = tuple(divmod(bucket_key(ms), SUB_BUCKETS) for ms in _BOUNDS_MS)
"""(row, column) of the pooling-histogram bucket that starts at each bound: the values below a bound are
those of the rows before its row and of the columns before its column."""


def _middles(row: int) -> array[float]:
    middles = _MIDDLES.get(row)
    if middles is None:
        base = row * SUB_BUCKETS
        middles = _MIDDLES[row] = array("d", (bucket_value(base + column) for column in range(SUB_BUCKETS)))
    return middles


@dataclass
class PrometheusBuckets:
    """One or more pooling histograms in Prometheus' cumulative buckets, their sum and count."""

    cumulative_counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS_S) + 1))
    sum_ms: float = 0.0
    n: int = 0

    def add(self, histogram: Histogram) -> None:
        """A scrape's cost is this, for every histogram: C-level passes over its rows (a Python loop over
        the buckets took five times as long), nothing kept between scrapes."""
        totals = histogram.totals()  # (row, its counts, the running count up to and including it)
        cumulative = self.cumulative_counts
        for i, (bound_row, bound_column) in enumerate(_BOUNDS):
            below = 0
            for r, row, running in totals:
                if r > bound_row:
                    break
                if r == bound_row:
                    below += sum(row[:bound_column])
                    break
                below = running
            cumulative[i] += below
        cumulative[-1] += totals[-1][2] if totals else 0
        self.sum_ms += sum(
            map(
                mul,
                chain.from_iterable(row for _, row, _ in totals),
                chain.from_iterable(_middles(r) for r, _, _ in totals),
            )
        )
        self.n += histogram.n

    def cumulative(self) -> list[tuple[str, float]]:
        return list(zip(_LE, self.cumulative_counts, strict=True))


@dataclass
class LabelFigures:
    """The counters of one label value: one entry, or several folded together."""

    requests: int = 0
    failures: int = 0
    tokens: dict[str, int] = field(default_factory=dict)
    sequences: int = 0
    bytes: int = 0
    sent_bytes: int = 0
    vectors: int = 0
    image_tokens: int = 0
    image_token_requests: int = 0
    timings: dict[str, PrometheusBuckets] = field(default_factory=dict)

    def add(self, entry: Entry) -> None:
        self.requests += entry.requests
        self.failures += entry.failures
        for source, count in entry.tokens_by_source.items():
            # A worker's report is merged as sent: only the engine's own sources become label values.
            key = source if source in SOURCES else OTHER_SOURCE
            self.tokens[key] = self.tokens.get(key, 0) + count
        self.sequences += entry.sequences
        self.bytes += entry.bytes
        self.sent_bytes += entry.sent_bytes
        self.vectors += entry.vectors
        self.image_tokens += entry.image_tokens
        self.image_token_requests += entry.image_token_requests
        for key, _, _ in TIMINGS:
            histogram = entry.timings[key]
            if histogram.n:
                self.timings.setdefault(key, PrometheusBuckets()).add(histogram)


def by_label(entries: list[Entry], pause: Callable[[], Any]) -> dict[str, LabelFigures]:
    """A run's entries by label value: the first MAX_NAMES names (in the order they appeared, which
    a run never changes) each under their own, the rest under OTHER; names that read alike once
    cleaned add up, so no two series ever share their labels. `pause()` after each entry lets the
    users run between them."""
    out: dict[str, LabelFigures] = {}
    for i, entry in enumerate(entries):
        name = label(entry.name) if i < MAX_NAMES else OTHER
        out.setdefault(name, LabelFigures()).add(entry)
        pause()
    return out


@dataclass
class Gauges:
    """What the collector asks the run for at each scrape (all may be absent)."""

    users: Callable[[], int | None]
    target_rate: Callable[[], float | None]
    cpu: Callable[[], dict[str, float]]
    info: Callable[[], dict[str, str]]


class PoolingCollector(Collector):
    """prometheus_client's custom collector: every series built from the stats at scrape time."""

    def __init__(
        self,
        stats: Callable[[], PoolingStats],
        run: Callable[[], int],
        gauges: Gauges,
        pause: Callable[[], Any] = lambda: None,
    ) -> None:
        """`pause`: gevent.sleep in a run, so that a scrape never holds the users for more than one
        entry's histograms (a held hub would add its time to the requests in flight)."""
        self._stats = stats
        self._run = run
        self._gauges = gauges
        self._pause = pause

    def collect(self) -> Iterator[Metric]:
        # All read before the first pause: a reset during the scrape (Entry objects are replaced, never
        # emptied) leaves this page with the run it began with, and that run's counters never go down.
        stats, run = self._stats(), str(self._run())
        entries, start_time = list(stats.entries.values()), stats.start_time
        figures = by_label(entries, self._pause)
        yield from self._counters(figures, run)
        yield from self._gauge_families(start_time, run)

    def _counters(self, figures: dict[str, LabelFigures], run: str) -> Iterable[Metric]:
        common = ["name", "method", "run"]
        requests = CounterMetricFamily(
            "poolbench_requests", "Requests whose answer was read, by result.", labels=[*common, "result"]
        )
        tokens = CounterMetricFamily(
            "poolbench_input_tokens",
            "Input tokens of successful requests, by where the count came from.",
            labels=[*common, "source"],
        )
        sequences = CounterMetricFamily("poolbench_sequences", "Sequences of successful requests.", labels=common)
        body = CounterMetricFamily("poolbench_response_bytes", "Response body bytes read.", labels=common)
        sent = CounterMetricFamily("poolbench_request_bytes", "Request body bytes sent.", labels=common)
        vectors = CounterMetricFamily(
            "poolbench_vectors",
            "Vectors (rows) of successful answers: one per sequence, or each row of a token-level answer.",
            labels=common,
        )
        image_tokens = CounterMetricFamily(
            "poolbench_image_tokens",
            "Image tokens the server reported (only names whose answers gave a count: none is not zero).",
            labels=common,
        )
        histograms = {key: HistogramMetricFamily(metric, text, labels=common) for key, metric, text in TIMINGS}
        for name, f in figures.items():
            values = [name, METHOD, run]
            requests.add_metric([*values, "success"], f.requests - f.failures)
            requests.add_metric([*values, "failure"], f.failures)
            for source, count in sorted(f.tokens.items()):
                tokens.add_metric([*values, source], count)
            sequences.add_metric(values, f.sequences)
            body.add_metric(values, f.bytes)
            sent.add_metric(values, f.sent_bytes)
            vectors.add_metric(values, f.vectors)
            if f.image_token_requests:
                image_tokens.add_metric(values, f.image_tokens)
            for key, buckets in f.timings.items():
                histograms[key].add_metric(values, buckets.cumulative(), buckets.sum_ms / 1000)
        yield from (requests, tokens, sequences, body, sent, vectors, image_tokens, *histograms.values())

    def _gauge_families(self, start_time: float, run: str) -> Iterable[Metric]:
        gauges = self._gauges
        if (users := gauges.users()) is not None:
            yield GaugeMetricFamily("poolbench_users", "Users running now.", value=users)
        if (rate := gauges.target_rate()) is not None:
            yield GaugeMetricFamily(
                "poolbench_target_request_rate", "Open loop: the request rate asked for (requests/s).", value=rate
            )
        cpu = GaugeMetricFamily("poolbench_client_cpu_percent", "CPU use of each Locust process.", labels=["worker"])
        for worker, percent in list(gauges.cpu().items())[:MAX_WORKERS]:
            cpu.add_metric([label(worker)], percent)
        yield cpu
        start = GaugeMetricFamily(
            "poolbench_run_start_timestamp_seconds", "When this run's counting began (Unix time).", labels=["run"]
        )
        start.add_metric([run], start_time)
        yield start
        info = {k: label(v) for k, v in gauges.info().items()}
        family = GaugeMetricFamily("poolbench_run_info", "What this run sends, and where.", labels=["run", *info])
        family.add_metric([run, *info.values()], 1)
        yield family
