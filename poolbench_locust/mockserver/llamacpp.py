"""llama.cpp's server: the mock answers its OpenAI-compatible routes in vLLM's forms (the route table's, for
every flavor); what is llama.cpp's own is its /metrics page.
"""

from __future__ import annotations

from poolbench_locust.mockserver.metrics import Metric, Page, never, running, served_tokens, waiting

METRICS = Page(
    "cpp",
    (
        Metric(
            "counter",
            "llamacpp:prompt_tokens_total",
            "Number of prompt tokens processed, excluding cached tokens",
            served_tokens,
        ),
        Metric(
            "counter", "llamacpp:prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", never
        ),
        Metric(
            "counter",
            "llamacpp:prompt_seconds_total",
            "Total time spent processing prompts",
            lambda e: max(e.seconds - e.queue, 0.0) if e.served and e.seconds is not None else 0,
        ),
        Metric("counter", "llamacpp:tokens_predicted_total", "Number of generation tokens processed", never),
        Metric("counter", "llamacpp:tokens_predicted_seconds_total", "Total time spent generating tokens", never),
        Metric("counter", "llamacpp:n_decode_total", "Total number of llama_decode() calls", lambda e: int(e.served)),
        Metric(
            "counter",
            "llamacpp:n_tokens_max",
            "Largest observed sequence length (prompt + generation)",
            lambda e: max(e.input_tokens(), default=0) if e.served else 0,
            keep=max,
        ),
        Metric(
            "gauge",
            "llamacpp:prompt_tokens_seconds",
            "Average prompt throughput in tokens/s",
            lambda r: r["llamacpp:prompt_tokens_total"] / s if (s := r["llamacpp:prompt_seconds_total"]) else 0,
        ),
        Metric("gauge", "llamacpp:predicted_tokens_seconds", "Average generation throughput in tokens/s", lambda r: 0),
        Metric("gauge", "llamacpp:requests_processing", "Number of requests processing", running),
        Metric("gauge", "llamacpp:requests_deferred", "Number of requests deferred", waiting),
        Metric(
            "gauge",
            "llamacpp:n_busy_slots_per_decode",
            "Average number of busy slots per llama_decode() call",
            lambda r: 1 if r["llamacpp:n_decode_total"] else 0,
        ),
    ),
    per_input=True,
)
"""llama.cpp's /metrics (tools/server/server-task.cpp, `to_metrics`): unlabelled `llamacpp:*` counters and
gauges; `llamacpp:prompt_tokens_total` counts the prompt tokens served, `requests_processing`/`requests_deferred`
the inputs past the wait / in it (one slot per input). No request counter, no latency: llama.cpp has none."""
