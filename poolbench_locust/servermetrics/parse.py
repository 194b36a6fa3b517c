"""A server's /metrics text, read with prometheus_client's parser, checked, reduced to the figures we show.

The text is untrusted: it may be garbage, huge, NaN, negative, or not cumulative. Whatever it is,
the result is a `Reading` of checked numbers, or a `ParseError` whose one line says why; a series
that breaks a rule is left out (and counted), never passed on.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from dataclasses import dataclass, field

import gevent
from prometheus_client.parser import text_string_to_metric_families

from poolbench_locust.servermetrics.flavors import COUNTERS, HISTOGRAMS, WANTED, Flavor, Ref, detect

MAX_SERIES = 20_000
"""Samples kept from one scrape, over all the names we read (vLLM writes a few hundred)."""
MAX_COUNT = 1e15
"""Above this a count is not one a server reached: the series is left out."""
MAX_GAUGE = 1e9
MAX_SHOWN = 120

SeriesKey = tuple[tuple[str, str], ...]


class ParseError(ValueError):
    """The text is not Prometheus exposition we can read; the message is one line, safe to show."""


class NothingYet(ParseError):
    """An answer with no series at all: a server that makes each metric at its first use (TEI's Rust
    exporter) writes nothing until its first request."""


def printable(text: str) -> str:
    """Untrusted text as one bounded line."""
    line = "".join(c if c.isprintable() else "?" for c in text[:MAX_SHOWN])
    return line + ("..." if len(text) > MAX_SHOWN else "")


@dataclass(frozen=True)
class Hist:
    """One histogram series: its upper bounds (ending in +Inf), cumulative counts, sum and count."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float
    count: float


@dataclass
class Reading:
    flavor: Flavor
    values: dict[str, dict[SeriesKey, float]] = field(default_factory=dict)
    """Counter and gauge figures: series -> value."""
    hists: dict[str, dict[SeriesKey, Hist]] = field(default_factory=dict)
    rejected: int = 0
    """Series left out because a value broke a rule (NaN, negative, not cumulative...)."""


Samples = dict[str, list[tuple[dict[str, str], float]]]
_PREFIXES = tuple(sorted(WANTED))
YIELD_EVERY = 64
"""Families parsed between two yields to the gevent hub: the users' greenlets of a local run share it."""


def _wanted_lines(text: str) -> str:
    """The sample lines that may be of a name we read: the parser sees a few hundred lines, not the
    whole text (vLLM writes ~50 kB; a hostile server 4 MiB), so a scrape never stalls the run.

    Comments go too: without `# TYPE`, every sample keeps the name it is written under, which is what
    the flavors read (a counter under `_total`, or bare where a server writes no suffix)."""
    return "\n".join(line for line in text.splitlines() if line.startswith(_PREFIXES)) + "\n"


def samples(text: str) -> Samples:
    """The samples of the names any flavor reads; every other sample is dropped as it is parsed."""
    kept: Samples = defaultdict(list)
    n = 0
    try:
        for i, family in enumerate(text_string_to_metric_families(_wanted_lines(text))):
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                gevent.sleep(0)
            for sample in family.samples:
                if sample.name not in WANTED:
                    continue
                n += 1
                if n > MAX_SERIES:
                    raise ParseError(f"more than {MAX_SERIES} series of the metrics read")
                kept[sample.name].append((dict(sample.labels), float(sample.value)))
    except ParseError:
        raise
    except Exception as e:  # the parser's error on hostile text may be of any kind: it is one bad scrape
        raise ParseError(f"not Prometheus text: {printable(str(e))}") from None
    return kept


def _matches(labels: dict[str, str], ref: Ref, routes: frozenset[str]) -> bool:
    if any(labels.get(k) != v for k, v in ref.labels) or any(labels.get(k) == v for k, v in ref.unless):
        return False
    return not ref.by_route or labels.get(ref.route_label) in routes


def _key(labels: dict[str, str], named_by: tuple[str, ...] | None = None) -> SeriesKey:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "le" and (named_by is None or k in named_by)))


def _values(found: Samples, ref: Ref, routes: frozenset[str], limit: float) -> tuple[dict[SeriesKey, float], int]:
    values: dict[SeriesKey, float] = {}
    rejected = 0
    for name in ref.samples:
        for labels, value in found.get(name, ()):
            if not _matches(labels, ref, routes):
                continue
            if not (math.isfinite(value) and 0 <= value <= limit):
                rejected += 1
                continue
            values[_key(labels, ref.key_labels)] = value  # a GPU's MIG instances repeat its value: one kept
        if values:  # a counter written both with and without its suffix is read once
            break
    return values, rejected


def _bound(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and not math.isnan(value) else None


def _hists(found: Samples, ref: Ref, routes: frozenset[str]) -> tuple[dict[SeriesKey, Hist], int]:
    bucket_name, sum_name, count_name = ref.samples
    buckets: dict[SeriesKey, list[tuple[float, float]]] = defaultdict(list)
    sums: dict[SeriesKey, float] = {}
    counts: dict[SeriesKey, float] = {}
    for labels, value in found.get(bucket_name, ()):
        if _matches(labels, ref, routes):
            bound = _bound(labels.get("le"))
            buckets[_key(labels)].append((math.inf if bound is None else bound, value))
    for name, into in ((sum_name, sums), (count_name, counts)):
        for labels, value in found.get(name, ()):
            if _matches(labels, ref, routes):
                into[_key(labels)] = value
    hists: dict[SeriesKey, Hist] = {}
    rejected = 0
    for key, pairs in buckets.items():
        pairs.sort()
        bounds = tuple(b for b, _ in pairs)
        cumulative = tuple(c for _, c in pairs)
        total, count = sums.get(key), counts.get(key)
        good = (
            total is not None
            and count is not None
            and bounds[-1] == math.inf
            and len(set(bounds)) == len(bounds)
            and all(math.isfinite(c) and 0 <= c <= MAX_COUNT for c in (*cumulative, count))
            and all(a <= b for a, b in itertools.pairwise(cumulative))
            and cumulative[-1] == count
            and math.isfinite(total)
            and total >= 0
        )
        if good:
            assert total is not None and count is not None
            hists[key] = Hist(bounds, cumulative, total, count)
        else:
            rejected += 1
    return hists, rejected


def reading(text: str, routes: frozenset[str], flavor: Flavor | None = None) -> Reading:
    """The figures of one scrape. `flavor` None: told by the names the server writes."""
    found = samples(text)
    flavor = flavor or detect(set(found))
    if flavor is None and not any(line.strip() and not line.startswith("#") for line in text.splitlines()):
        raise NothingYet("no series yet")
    if flavor is None or not any(m in found for m in flavor.markers):
        raise ParseError(
            "no metrics of vLLM, TEI, SGLang, llama.cpp, dcgm-exporter or an instrumented HTTP server in the text"
        )
    result = Reading(flavor)
    for role, ref in flavor.refs.items():
        if role in HISTOGRAMS:
            result.hists[role], rejected = _hists(found, ref, routes)
        else:
            limit = ref.most if ref.most is not None else MAX_COUNT if role in COUNTERS else MAX_GAUGE
            result.values[role], rejected = _values(found, ref, routes, limit)
        result.rejected += rejected
    return result


def decode(body: bytes) -> str:
    return body.decode("utf-8", errors="replace")
