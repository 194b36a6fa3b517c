"""GET /metrics of the mock: what it truly counted, under the names of the server its flavor imitates.

Flavor `vllm` (and every flavor without metrics of its own) writes vLLM's names with prometheus_client,
as vLLM does (`_total` counters, their `_created` timestamps):
- `vllm:request_success_total`, `vllm:prompt_tokens_total`: sequences and the tokens their `usage`
  reported, of answers completed without a fault (vLLM counts one engine request per prompt);
- `vllm:e2e_request_latency_seconds`: each of those sequences' request time, from its request's last
  byte read to its answer's last byte written (the time /mock/timings gives);
- `vllm:request_queue_time_seconds`: the wait the mock put before the headers (`ttfb_ms`), which is
  also what its TEI `x-queue-time` header says;
- `vllm:num_requests_waiting` / `vllm:num_requests_running`: pooling requests in that wait now / past it;
- `http_requests_total{method,status,handler}` and `http_request_duration_seconds{method,handler}`:
  every pooling request answered, by route and status class, as vLLM's HTTP layer counts them.

Flavor `tei` writes TEI 1.9's (router/src/lib.rs, router/src/http/server.rs, core/src/queue.rs,
core/src/tokenization.rs), as its Rust exporter does: counters without `_total`, its own buckets:
`te_request_count`/`te_request_success{method}`, `te_request_failure{err}`, the histograms
`te_request_input_length` (one observation per input: its tokens), `te_request_duration`,
`te_request_queue_duration`, `te_request_tokenization_duration`, `te_request_inference_duration`
(one per request), and the gauge `te_queue_size` (inputs in the wait). No gauge of what runs: TEI has none.

Flavor `sglang` writes SGLang 0.5.23's (srt/observability/metrics_collector.py, http_request_metrics.py):
`sglang:num_requests_total`, `sglang:prompt_tokens_total`, `sglang:generation_tokens_total` and
`sglang:e2e_request_latency_seconds` per input (the tokenizer manager finishes one request per input),
`sglang:queue_time_seconds`, the gauges `sglang:num_running_reqs`/`sglang:num_queue_reqs` (inputs), and
`sglang:http_requests_total{endpoint,method}`, `sglang:http_responses_total{endpoint,status_code,method}`.

Flavor `llamacpp` writes llama.cpp's (tools/server/server-task.cpp, `to_metrics`): unlabelled
`llamacpp:*` counters and gauges, values printed as C++ prints a double (6 significant digits);
`llamacpp:prompt_tokens_total` counts the prompt tokens served, `requests_processing`/`requests_deferred`
the inputs past the wait / in it (one slot per input). No request counter, no latency: llama.cpp has none.

The mock's latency buckets are finer than vLLM's (whose first is 0.3 s), so that a test can read percentiles.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TEI_DURATION_BUCKETS = tuple(0.00001 * 1.5 ** (i + 1) for i in range(35))
"""TEI's own (router/src/prometheus.rs): 35 bounds, each 1.5 times the last, from 15 µs."""
TEI_INPUT_LENGTH_BUCKETS = tuple(float(2**i) for i in range(20) if 2**i <= 16384)
"""Powers of two up to TEI's max_input_length (the mock's max_batch_tokens, 16384)."""

Count = Callable[[bool], float]
"""Inputs (or requests, for vLLM) in the wait before the headers (True) or past it (False), now."""


class Writer(Protocol):
    def ended(
        self, route: str, status: int, seconds: float | None, served: bool, sequences: int, tokens: int, queue: float
    ) -> None: ...

    def text(self) -> bytes: ...


def _split(tokens: int, sequences: int) -> list[int]:
    """Each input's tokens, as near equal as whole numbers go: their sum is the request's count exactly."""
    q, r = divmod(tokens, sequences)
    return [q + 1] * r + [q] * (sequences - r)


class VllmWriter:
    def __init__(self, model: str, count: Count) -> None:
        self.registry = CollectorRegistry()
        labels = {"model_name": model, "engine": "0"}
        names = tuple(labels)
        registry = self.registry
        self._success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*names, "finished_reason"],
            registry=registry,
        ).labels(**labels, finished_reason="stop")
        self._tokens = Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", names, registry=registry
        ).labels(**labels)
        self._e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            names,
            buckets=LATENCY_BUCKETS,
            registry=registry,
        ).labels(**labels)
        self._queue = Histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            names,
            buckets=LATENCY_BUCKETS,
            registry=registry,
        ).labels(**labels)
        self._http = Counter(
            "http_requests",
            "Total number of requests by method, status and handler.",
            ["method", "status", "handler"],
            registry=registry,
        )
        self._http_time = Histogram(
            "http_request_duration_seconds",
            "Latency with only few buckets by handler.",
            ["method", "handler"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        Gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", names, registry=registry
        ).labels(**labels).set_function(lambda: count(True))
        Gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", names, registry=registry
        ).labels(**labels).set_function(lambda: count(False))

    def ended(
        self, route: str, status: int, seconds: float | None, served: bool, sequences: int, tokens: int, queue: float
    ) -> None:
        self._http.labels("POST", f"{status // 100}xx", route).inc()
        if seconds is None:
            return
        self._http_time.labels("POST", route).observe(seconds)
        if not served:
            return
        self._success.inc(sequences)
        self._tokens.inc(tokens)
        for _ in range(sequences):
            self._e2e.observe(seconds)
            self._queue.observe(queue)

    def text(self) -> bytes:
        return generate_latest(self.registry)


class SGLangWriter:
    def __init__(self, model: str, count: Count) -> None:
        self.registry = registry = CollectorRegistry()
        tokenizer = {"model_name": model}
        scheduler = {"model_name": model, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
        streaming = {**tokenizer, "is_streaming": "false"}
        self._requests = Counter(
            "sglang:num_requests", "Number of requests processed.", list(streaming), registry=registry
        ).labels(**streaming)
        self._tokens = Counter(
            "sglang:prompt_tokens", "Number of prefill tokens processed.", list(streaming), registry=registry
        ).labels(**streaming)
        Counter(
            "sglang:generation_tokens", "Number of generation tokens processed.", list(streaming), registry=registry
        ).labels(**streaming)
        self._e2e = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            list(streaming),
            buckets=LATENCY_BUCKETS,
            registry=registry,
        ).labels(**streaming)
        self._queue = Histogram(
            "sglang:queue_time_seconds",
            "Histogram of queueing time in seconds.",
            list(scheduler),
            buckets=LATENCY_BUCKETS,
            registry=registry,
        ).labels(**scheduler)
        Gauge("sglang:num_running_reqs", "The number of running requests.", list(scheduler), registry=registry).labels(
            **scheduler
        ).set_function(lambda: count(False))
        Gauge(
            "sglang:num_queue_reqs", "The number of requests in the waiting queue.", list(scheduler), registry=registry
        ).labels(**scheduler).set_function(lambda: count(True))
        self._http = Counter(
            "sglang:http_requests",
            "Total number of HTTP requests by endpoint and method",
            ["endpoint", "method"],
            registry=registry,
        )
        self._responses = Counter(
            "sglang:http_responses",
            "Total number of HTTP responses by endpoint and status code",
            ["endpoint", "status_code", "method"],
            registry=registry,
        )

    def ended(
        self, route: str, status: int, seconds: float | None, served: bool, sequences: int, tokens: int, queue: float
    ) -> None:
        self._http.labels(route, "POST").inc()
        self._responses.labels(route, str(status), "POST").inc()
        if seconds is None or not served:
            return
        self._requests.inc(sequences)
        self._tokens.inc(tokens)
        for _ in range(sequences):
            self._e2e.observe(seconds)
            self._queue.observe(queue)

    def text(self) -> bytes:
        return generate_latest(self.registry)


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


class TEIWriter:
    def __init__(self, model: str, count: Count) -> None:
        self._count_waiting = count
        self._requests: dict[str, int] = {}
        self._success: dict[str, int] = {}
        self._failure: dict[str, int] = {}
        self._input_length = _Hist(TEI_INPUT_LENGTH_BUCKETS)
        self._durations = {
            name: _Hist(TEI_DURATION_BUCKETS)
            for name in ("duration", "queue_duration", "tokenization_duration", "inference_duration")
        }

    def ended(
        self, route: str, status: int, seconds: float | None, served: bool, sequences: int, tokens: int, queue: float
    ) -> None:
        # TEI's `method` says whether `inputs` was one input or a list; the mock knows only how many it had.
        method = "single" if sequences == 1 else "batch"
        self._requests[method] = self._requests.get(method, 0) + 1
        if seconds is None:
            return
        if not served:
            err = "validation" if 400 <= status < 500 else "backend"
            self._failure[err] = self._failure.get(err, 0) + 1
            return
        self._success[method] = self._success.get(method, 0) + 1
        for length in _split(tokens, sequences) if sequences else ():
            self._input_length.observe(length)
        for name, value in (
            ("duration", seconds),
            ("queue_duration", queue),
            ("tokenization_duration", 0.0),
            ("inference_duration", max(seconds - queue, 0.0)),
        ):
            self._durations[name].observe(value)

    def text(self) -> bytes:
        lines: list[str] = []
        for name, label, values in (
            ("te_request_count", "method", self._requests),
            ("te_request_success", "method", self._success),
            ("te_request_failure", "err", self._failure),
        ):
            if values:
                lines.append(f"# TYPE {name} counter")
                lines += [f'{name}{{{label}="{key}"}} {n}' for key, n in sorted(values.items())]
        waiting = self._count_waiting(True)
        if self._requests or waiting or self._count_waiting(False):  # made at the first input queued, as TEI's
            lines += ["# TYPE te_queue_size gauge", f"te_queue_size {waiting:g}"]
        if self._success:  # the exporter writes a histogram once it has an observation
            lines += self._input_length.lines("te_request_input_length")
            for name, hist in self._durations.items():
                lines += hist.lines(f"te_request_{name}")
        return ("\n".join(lines) + "\n").encode()


class LlamaCppWriter:
    def __init__(self, model: str, count: Count) -> None:
        self._count = count
        self._prompt_tokens = 0
        self._prompt_seconds = 0.0
        self._decodes = 0
        self._longest = 0

    def ended(
        self, route: str, status: int, seconds: float | None, served: bool, sequences: int, tokens: int, queue: float
    ) -> None:
        if seconds is None or not served:
            return
        self._prompt_tokens += tokens
        self._prompt_seconds += max(seconds - queue, 0.0)
        self._decodes += 1
        self._longest = max(self._longest, max(_split(tokens, sequences)) if sequences else 0)

    def text(self) -> bytes:
        seconds = self._prompt_seconds
        counters = (
            ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens", self._prompt_tokens),
            ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", 0),
            ("prompt_seconds_total", "Total time spent processing prompts", seconds),
            ("tokens_predicted_total", "Number of generation tokens processed", 0),
            ("tokens_predicted_seconds_total", "Total time spent generating tokens", 0),
            ("n_decode_total", "Total number of llama_decode() calls", self._decodes),
            ("n_tokens_max", "Largest observed sequence length (prompt + generation)", self._longest),
        )
        gauges = (
            (
                "prompt_tokens_seconds",
                "Average prompt throughput in tokens/s",
                self._prompt_tokens / seconds if seconds else 0,
            ),
            ("predicted_tokens_seconds", "Average generation throughput in tokens/s", 0),
            ("requests_processing", "Number of requests processing", self._count(False)),
            ("requests_deferred", "Number of requests deferred", self._count(True)),
            (
                "n_busy_slots_per_decode",
                "Average number of busy slots per llama_decode() call",
                1 if self._decodes else 0,
            ),
        )
        lines = []
        for kind, items in (("counter", counters), ("gauge", gauges)):
            for name, about, value in items:
                # as `prometheus << double` writes it: %g, six significant digits
                lines += [
                    f"# HELP llamacpp:{name} {about}",
                    f"# TYPE llamacpp:{name} {kind}",
                    f"llamacpp:{name} {value:g}",
                ]
        return ("\n".join(lines) + "\n").encode()


WRITERS: dict[str, Callable[[str, Count], Writer]] = {
    "tei": TEIWriter,
    "sglang": SGLangWriter,
    "llamacpp": LlamaCppWriter,
}
"""Flavors that have metrics of their own; every other flavor writes vLLM's."""


class Metrics:
    def __init__(self, model: str, flavor: str = "vllm") -> None:
        self._in_progress: dict[int, tuple[float, int]] = {}
        """Request number -> when its wait before the headers ends (monotonic), and what it weighs in the
        gauges: 1 for vLLM (requests, as the mock always counted them), its inputs for the others."""
        self._numbers = itertools.count()
        self._per_input = flavor in WRITERS
        self._writer: Writer = WRITERS.get(flavor, VllmWriter)(model, self._count_in_progress)

    def _count_in_progress(self, waiting: bool) -> float:
        now = time.monotonic()
        return float(sum(weight for ends, weight in self._in_progress.values() if (now < ends) == waiting))

    def began(self, arrived: float, ttfb_ms: float, sequences: int = 1) -> int:
        number = next(self._numbers)
        self._in_progress[number] = (arrived + ttfb_ms / 1000, max(sequences, 1) if self._per_input else 1)
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
    ) -> None:
        """One pooling request is over; `served`: completed, 2xx, no fault (what the servers' engines count)."""
        self._in_progress.pop(number, None)
        seconds = None if done is None else done - arrived
        self._writer.ended(route, status, seconds, served, sequences, tokens, ttfb_ms / 1000)

    def text(self) -> bytes:
        return self._writer.text()
