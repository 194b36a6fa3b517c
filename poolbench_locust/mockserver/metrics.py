"""GET /metrics of the mock: what it truly counted, in vLLM's Prometheus names, written by prometheus_client
(as vLLM's are, so the text has the same shape: `_total` counters, their `_created` timestamps).

What each series means here:
- `vllm:request_success_total`, `vllm:prompt_tokens_total`: sequences and the tokens their `usage`
  reported, of answers completed without a fault (vLLM counts one engine request per prompt);
- `vllm:e2e_request_latency_seconds`: each of those sequences' request time, from its request's last
  byte read to its answer's last byte written (the time /mock/timings gives);
- `vllm:request_queue_time_seconds`: the wait the mock put before the headers (`ttfb_ms`), which is
  also what its TEI `x-queue-time` header says;
- `vllm:num_requests_waiting` / `vllm:num_requests_running`: pooling requests in that wait now / past it;
- `http_requests_total{method,status,handler}` and `http_request_duration_seconds{method,handler}`:
  every pooling request answered, by route and status class, as vLLM's HTTP layer counts them.
The latency buckets are finer than vLLM's (whose first is 0.3 s), so that a test can read percentiles.
"""

from __future__ import annotations

import itertools
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    def __init__(self, model: str) -> None:
        self.registry = CollectorRegistry()
        self._labels = {"model_name": model, "engine": "0"}
        names = tuple(self._labels)
        registry = self.registry
        self._success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*names, "finished_reason"],
            registry=registry,
        ).labels(**self._labels, finished_reason="stop")
        self._tokens = Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", names, registry=registry
        ).labels(**self._labels)
        self._e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            names,
            buckets=LATENCY_BUCKETS,
            registry=registry,
        ).labels(**self._labels)
        self._queue = Histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            names,
            buckets=LATENCY_BUCKETS,
            registry=registry,
        ).labels(**self._labels)
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
        self._in_progress: dict[int, float] = {}
        """Request number -> when its wait before the headers ends (monotonic)."""
        self._numbers = itertools.count()
        Gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", names, registry=registry
        ).labels(**self._labels).set_function(lambda: self._count_in_progress(waiting=True))
        Gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", names, registry=registry
        ).labels(**self._labels).set_function(lambda: self._count_in_progress(waiting=False))

    def _count_in_progress(self, waiting: bool) -> float:
        now = time.monotonic()
        return float(sum((now < ends) == waiting for ends in self._in_progress.values()))

    def began(self, arrived: float, ttfb_ms: float) -> int:
        number = next(self._numbers)
        self._in_progress[number] = arrived + ttfb_ms / 1000
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
        """One pooling request is over; `served`: completed, 2xx, no fault (what vLLM's engine counts)."""
        self._in_progress.pop(number, None)
        self._http.labels("POST", f"{status // 100}xx", route).inc()
        if done is None:
            return
        seconds = done - arrived
        self._http_time.labels("POST", route).observe(seconds)
        if not served:
            return
        self._success.inc(sequences)
        self._tokens.inc(tokens)
        for _ in range(sequences):
            self._e2e.observe(seconds)
            self._queue.observe(ttfb_ms / 1000)

    def text(self) -> bytes:
        return generate_latest(self.registry)
