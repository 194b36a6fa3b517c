"""The answer consistency figures (docs/consistency.md) as Prometheus series, read from the run's tallies when
Prometheus scrapes: per request name, with the pooling series' labels (name, method, run), so that a
dashboard puts a name's cosine beside its throughput.

Counters: the answers compared and, of them, those identical to their reference (a share over any window
is then a ratio of increases). Gauges: the figures since the run's counting began, each only where it
applies (a rerank has no cosine, an embedding no top-1): identical ratio, cosine min and 1st percentile,
largest difference, top-1 changed ratio, Kendall's tau min, labels changed ratio. The total is not a label
value: sum() the counters, min() the minima. Past series.MAX_NAMES names, the rest are merged (Tally.merge,
exact) under series.OTHER, as the pooling series do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from poolbench_locust.consistency.state import Consistency
from poolbench_locust.consistency.tally import Tally
from poolbench_locust.exporter.series import MAX_NAMES, METHOD, OTHER, label

GAUGES = (
    ("identical_ratio", "Share of the compared answers identical to their reference answer, value for value."),
    ("cosine_min", "The lowest cosine similarity of a vector answered under load to its reference."),
    ("cosine_p01", "The 1st percentile of those cosines."),
    ("abs_diff_max", "The largest absolute difference of one value (a component, a score) from its reference."),
    ("top1_changed_ratio", "Rerank and score: the share of compared answers whose best document changed."),
    ("kendall_tau_min", "Rerank and score: the lowest Kendall's tau-b of the documents' order to the reference's."),
    ("labels_changed_ratio", "Classify: the share of compared answers whose most probable label changed."),
)
"""Each gauge: Tally.figures' key (its series is poolbench_consistency_KEY) and its help."""


def by_label(tallies: dict[str, Tally]) -> dict[str, Tally]:
    """The tallies by label value: the first MAX_NAMES names (in the order they appeared) each under their
    own, the rest merged under OTHER; names that read alike once cleaned are merged too."""
    out: dict[str, Tally] = {}
    for i, (name, tally) in enumerate(list(tallies.items())):
        key = label(name) if i < MAX_NAMES else OTHER
        out.setdefault(key, Tally()).merge(tally)
    return out


class ConsistencyCollector(Collector):
    """prometheus_client's custom collector: the consistency series built from the tallies at scrape time."""

    def __init__(self, state: Callable[[], Consistency], run: Callable[[], int]) -> None:
        self._state = state
        self._run = run

    def collect(self) -> Iterator[Metric]:
        # Read at once, with no pause: under gevent the tallies cannot change mid-scrape.
        tallies, run = by_label(self._state().tallies), str(self._run())
        common = ["name", "method", "run"]
        compared = CounterMetricFamily(
            "poolbench_consistency_compared", "Answers compared with their reference answer.", labels=common
        )
        identical = CounterMetricFamily(
            "poolbench_consistency_identical", "Compared answers identical to their reference answer.", labels=common
        )
        gauges = {key: GaugeMetricFamily(f"poolbench_consistency_{key}", text, labels=common) for key, text in GAUGES}
        for name, tally in tallies.items():
            values = [name, METHOD, run]
            compared.add_metric(values, tally.compared)
            identical.add_metric(values, tally.identical)
            figures = tally.figures()
            for key, family in gauges.items():
                if (value := figures.get(key)) is not None:
                    family.add_metric(values, value)
        yield compared
        yield identical
        yield from gauges.values()
