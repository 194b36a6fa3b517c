"""The pooling stats collector: tokens, sequences, vectors and bytes (received and sent) per second,
and the time split into time-to-headers and body transfer, per request name and in total.

It is fed by the engine's request events (their `context`) and fires none of its own, so
Locust's own table stays as it is. Like Locust's `RequestStats`, a worker ships what it gathered
since its last report and starts again from zero; the master adds every report up. The timings go
into log-linear histograms (histogram.py) of 0.05 % resolution, finer than Locust's own buckets
(two significant digits), so the pooling table's percentiles keep the clock's accuracy.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from locust.stats import CURRENT_RESPONSE_TIME_PERCENTILE_WINDOW

from poolbench_locust.engine.context import RequestContext
from poolbench_locust.metrics.goodput import Slo
from poolbench_locust.metrics.histogram import Histogram, Moments, keyed
from poolbench_locust.store import Slot

AGGREGATED = "Aggregated"
SOURCES = ("server", "metadata", "body-size", "client-tokenize", "client-tokenizer", "client-estimate")
PER_SECOND = ("input_tokens", "sequences", "bytes", "sent_bytes", "vectors")
"""The columns of an entry's per_second lists, by index (`Entry.current(index)`)."""
_ZEROS = (0,) * len(PER_SECOND)
KEPT_SECONDS = CURRENT_RESPONSE_TIME_PERCENTILE_WINDOW + 10
"""Seconds of per_second an entry keeps before its last request: the current window (which `current`
reads as Locust's current_rps does, the 12 s to 3 s before the last request) with room to spare, as
many as Locust keeps of its cached response times; older seconds are dropped."""


TIMINGS = ("ttfb", "e2e", "transfer", "queue", "server_queue", "server_inference")
"""Histograms kept per entry: the client's split of the time, and the server's own where it says."""


COUNTERS = (
    "requests",
    "failures",
    "input_tokens",
    "sequences",
    "bytes",
    "sent_bytes",
    "vectors",
    "image_tokens",
    "image_token_requests",
    "server_tokens_compared",
    "client_tokens_compared",
    "retries",
    "good_requests",
    "good_input_tokens",
)


@dataclass
class Entry:
    name: str
    requests: int = 0
    failures: int = 0
    input_tokens: int = 0
    tokens_by_source: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    sequences: int = 0
    bytes: int = 0
    """Bytes received: every request's, failed ones too (as Locust's own Average size)."""
    sent_bytes: int = 0
    """Bytes of the request bodies sent: every request's, failed ones too (an image workload is upload-heavy)."""
    vectors: int = 0
    """Vectors (rows) of successful answers: one per sequence, or the engine's count where an answer holds
    more (token-level and multi-vector answers)."""
    image_tokens: int = 0
    image_token_requests: int = 0
    """Successful requests whose answer gave an image token count: none, and Image Tokens is empty, not 0."""
    server_tokens_compared: int = 0
    """Server-reported tokens of the requests the client counted too: the two sides of the gap."""
    client_tokens_compared: int = 0
    retries: int = 0
    """Requests resent once because their reused keep-alive connection had been closed by the server."""
    good_requests: int = 0
    """Successful requests that met every objective of --slo (none without it): goodput."""
    good_input_tokens: int = 0
    _per_second: dict[int, list[int]] = field(default_factory=dict, repr=False)
    """per_second's seconds, the open one's up to its last flush."""
    timings: dict[str, Histogram] = field(default_factory=lambda: {k: Histogram() for k in TIMINGS})
    e2e_moments: Moments = field(default_factory=Moments)
    """The exact E2E mean and standard deviation."""
    first: float | None = None
    last: float | None = None
    _trimmed_at: int = field(default=0, init=False, repr=False, compare=False)
    """The second of the last trim of per_second: it is trimmed at most once a second."""
    _open_second: int | None = field(default=None, init=False, repr=False, compare=False)
    """The second of the last request logged: its per_second figures are the counters' growth since
    _open_base, added into _per_second when read or when a request of another second comes (a request
    only adds to the counters, not also to a per-second list)."""
    _open_base: tuple[int, ...] = field(default=_ZEROS, init=False, repr=False, compare=False)

    @property
    def per_second(self) -> dict[int, list[int]]:
        """Second -> [input tokens, sequences, bytes, sent bytes, vectors] (PER_SECOND), for the
        current-window rates: the last KEPT_SECONDS only."""
        self._flush_second()
        return self._per_second

    def _counts(self) -> tuple[int, ...]:
        """The counters per_second splits by second, in PER_SECOND's order."""
        return (self.input_tokens, self.sequences, self.bytes, self.sent_bytes, self.vectors)

    def _flush_second(self) -> None:
        """Add what the open second counted since its base into per_second."""
        if self._open_second is None:
            return
        counts = self._counts()
        values = self._per_second.setdefault(self._open_second, [0] * len(PER_SECOND))
        for i, (now, base) in enumerate(zip(counts, self._open_base, strict=True)):
            values[i] += now - base
        self._open_base = counts

    def _new_second(self, second: int) -> None:
        """The first request of another second (called before it is counted): close the open one,
        open this one, and trim (once a second, not on every request)."""
        self._flush_second()
        self._open_second = second
        self._open_base = self._counts()
        self._per_second.setdefault(second, [0] * len(PER_SECOND))
        self._trim(second)

    def _trim(self, now: int) -> None:
        """Drop the seconds older than KEPT_SECONDS before `now`, once a second at most."""
        if now <= self._trimmed_at:
            return
        self._trimmed_at = now
        oldest = now - KEPT_SECONDS
        for old in [t for t in self._per_second if t < oldest]:
            del self._per_second[old]

    def log(
        self, now: float, e2e: float, nbytes: int, failed: bool, context: RequestContext, good: bool = False
    ) -> None:
        """One request event; `good`: it succeeded and met every objective of --slo."""
        log_request((self,), now, e2e, nbytes, failed, context, good)

    def merge(self, data: dict[str, Any]) -> None:
        self._flush_second()  # the merged counts are not the open second's requests
        for key in COUNTERS:
            setattr(self, key, getattr(self, key) + data[key])
        self._open_base = self._counts()
        for source, tokens in data["tokens_by_source"].items():
            self.tokens_by_source[source] += tokens
        for second, values in data["per_second"].items():
            mine = self._per_second.setdefault(int(second), [0] * len(PER_SECOND))
            for i, value in enumerate(values):
                mine[i] += value
        for key, histogram in data["timings"].items():
            self.timings[key].merge(histogram)
        self.e2e_moments.merge(data["e2e_moments"])
        if data["first"] is not None:
            self.first = data["first"] if self.first is None else min(self.first, data["first"])
            self.last = data["last"] if self.last is None else max(self.last or 0.0, data["last"])
        if self.last is not None:
            self._trim(int(self.last))

    def dump(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "requests": self.requests,
            "failures": self.failures,
            "input_tokens": self.input_tokens,
            "tokens_by_source": dict(self.tokens_by_source),
            "sequences": self.sequences,
            "bytes": self.bytes,
            "sent_bytes": self.sent_bytes,
            "vectors": self.vectors,
            "image_tokens": self.image_tokens,
            "image_token_requests": self.image_token_requests,
            "server_tokens_compared": self.server_tokens_compared,
            "client_tokens_compared": self.client_tokens_compared,
            "retries": self.retries,
            "good_requests": self.good_requests,
            "good_input_tokens": self.good_input_tokens,
            "per_second": self.per_second,
            "timings": {k: h.dump() for k, h in self.timings.items()},
            "e2e_moments": self.e2e_moments.dump(),
            "first": self.first,
            "last": self.last,
        }

    def token_gap_percent(self) -> float | None:
        """How far the server's count is from the client's, where both exist (Infinity counts characters)."""
        if not self.client_tokens_compared:
            return None
        return round(
            100.0 * (self.server_tokens_compared - self.client_tokens_compared) / self.client_tokens_compared, 1
        )

    def token_source(self) -> str:
        used = [s for s in SOURCES if self.tokens_by_source.get(s)]
        if len(used) <= 1:
            return used[0] if used else ""
        return " + ".join(f"{s} {self.tokens_by_source[s]}" for s in used)

    def current(self, index: int, start_time: float) -> float:
        """Per-second average of one per_second column over Locust's current window, as its current_rps."""
        if self.last is None:
            return 0.0
        seconds = range(max(int(self.last) - 12, int(start_time)), int(self.last) - 2)
        return sum(self.per_second.get(t, _ZEROS)[index] for t in seconds) / len(seconds) if seconds else 0.0


def log_request(
    entries: tuple[Entry, ...],
    now: float,
    e2e: float,
    nbytes: int,
    failed: bool,
    context: RequestContext,
    good: bool = False,
) -> None:
    """One request event into each of `entries` (its name's entry, and the total where one is kept).

    This runs for every request, on the users' hub: the context is read and every timing bucketed
    once, then only added into each entry (a local runner logs each request twice)."""
    get: Callable[..., Any] = context.get  # a local name: no attribute lookup per key (its values: Any)
    sent = get("request_bytes", 0)
    sequences = context["sequences"]
    retried = get("retried")
    if failed:
        tokens = vectors = 0
    else:
        tokens = get("input_tokens", 0)
        source = get("token_source", "client-estimate")
        vectors = get("vectors", sequences)
        images = get("image_tokens")
        client = get("client_tokens")
    # Each timing bucketed once (keyed: its bucket and its value clamped), for every entry.
    e2e_key, e2e_ms = keyed(e2e)
    if (queue := get("queue_ms")) is not None:
        queue_key, queue_ms = keyed(queue)
    if (ttfb := get("ttfb_ms")) is not None:
        ttfb_key, ttfb_ms = keyed(ttfb)
        transfer_key, transfer_ms = keyed(max(e2e - ttfb - (queue or 0.0), 0.0))
    if (server_queue := get("server_queue_ms")) is not None:
        server_queue_key, server_queue_ms = keyed(server_queue)
    if (inference := get("server_inference_ms")) is not None:
        inference_key, inference_ms = keyed(inference)
    t = int(now)
    for entry in entries:
        if t != entry._open_second:
            entry._new_second(t)
        entry.requests += 1
        entry.bytes += nbytes
        entry.sent_bytes += sent
        if retried:
            entry.retries += 1
        if failed:
            entry.failures += 1
        else:
            entry.input_tokens += tokens
            entry.tokens_by_source[source] += tokens
            entry.sequences += sequences
            entry.vectors += vectors
            if images is not None:
                entry.image_tokens += images
                entry.image_token_requests += 1
            if client is not None:
                entry.server_tokens_compared += tokens
                entry.client_tokens_compared += client
            if good:
                entry.good_requests += 1
                entry.good_input_tokens += tokens
        timings = entry.timings
        timings["e2e"].add_keyed(e2e_key, e2e_ms)
        if queue is not None:
            timings["queue"].add_keyed(queue_key, queue_ms)
        if ttfb is not None:
            timings["ttfb"].add_keyed(ttfb_key, ttfb_ms)
            timings["transfer"].add_keyed(transfer_key, transfer_ms)
        if server_queue is not None:
            timings["server_queue"].add_keyed(server_queue_key, server_queue_ms)
        if inference is not None:
            timings["server_inference"].add_keyed(inference_key, inference_ms)
        entry.e2e_moments.add(e2e)
        if entry.first is None:
            entry.first = now
        entry.last = now


class PoolingStats:
    """Per-name entries and their total, fed by request events, mergeable across workers."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self.total = Entry(AGGREGATED)
        self._targets: dict[str, tuple[Entry, ...]] = {}
        """Name -> the entries its requests are logged into (its own, and the total): one lookup a request."""
        self._keeps_total = True
        self.start_time = time.time()
        self.slo: Slo | None = None
        """The run's --slo (set from the options at start; kept through resets): goodput counts against it."""

    @property
    def keeps_total(self) -> bool:
        """False on a worker: nobody reads its total, and its master adds the entries up itself, so a
        request logs into its own entry only (half the collector's work per request, half the report)."""
        return self._keeps_total

    @keeps_total.setter
    def keeps_total(self, keeps: bool) -> None:
        self._keeps_total = keeps
        self._targets.clear()

    def on_request(
        self,
        name: str,
        response_time: float,
        response_length: int,
        exception: Any,
        context: RequestContext,
        request_type: str = "",
        url: str = "",
        start_time: float = 0.0,
        response: Any = None,
        **_: Any,
    ) -> None:
        # Locust's other fields of the event are named (and unused) rather than left to **_: a dict of
        # them made for every request cost more than a third of a microsecond.
        if "sequences" not in context:
            return  # a request of some other User class
        failed = exception is not None
        targets = self._targets.get(name)
        if targets is None:
            targets = self._targets_of(name)
        slo = self.slo
        good = not failed and slo is not None and slo.met(response_time, context)
        log_request(targets, time.time(), response_time, response_length, failed, context, good)

    def _targets_of(self, name: str) -> tuple[Entry, ...]:
        """The entries a request of `name` is logged into, kept until the next reset."""
        entry = self.entries.get(name)
        if entry is None:
            entry = self.entries[name] = Entry(name)
        targets = self._targets[name] = (entry, self.total) if self._keeps_total else (entry,)
        return targets

    def reset(self) -> None:
        self.entries.clear()
        self._targets.clear()
        self.total = Entry(AGGREGATED)
        self.start_time = time.time()

    def take_report(self) -> dict[str, Any]:
        """What a worker sends with its report: everything since the last one; then start from zero.
        The total is not in it: the master adds the entries into its own."""
        report = {"entries": [e.dump() for e in self.entries.values()]}
        start = self.start_time
        self.reset()
        self.start_time = start
        return report

    def merge_report(self, report: dict[str, Any]) -> None:
        for data in report["entries"]:
            entry = self.entries.get(data["name"])
            if entry is None:
                entry = self.entries[data["name"]] = Entry(data["name"])
            entry.merge(data)
            self.total.merge(data)

    def per_second(self, entry: Entry, amount: float) -> float:
        """`amount` per second of the run so far, up to the entry's last request."""
        elapsed = (entry.last - self.start_time) if entry.last is not None else 0.0
        return amount / max(elapsed, 1e-9) if entry.last is not None else 0.0

    def sorted_entries(self) -> list[Entry]:
        return [self.entries[name] for name in sorted(self.entries)]


_STATS = Slot("pooling_stats", PoolingStats)


def stats_of(environment: Any) -> PoolingStats:
    """The environment's pooling stats (made on first use, one per environment)."""
    return _STATS.of(environment)
