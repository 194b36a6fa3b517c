"""SGLang 0.5.23's pooling routes in its own form: /v1/score (`query` + `items`) and
/v1/rerank (a bare list, each result with its own `meta_info`); neither answer carries usage.
"""

from __future__ import annotations

from poolbench_locust.mockserver.answers import Ranking, flipped, new_id, pair_words, score, text, texts
from poolbench_locust.mockserver.calls import AnswerDraft, BadRequest, Call, kept, model, required
from poolbench_locust.mockserver.metrics import (
    MODEL,
    Metric,
    Page,
    each_request,
    never,
    running,
    served_queue_per_input,
    served_seconds_per_input,
    served_sequences,
    served_tokens,
    waiting,
)
from poolbench_locust.wire import count_words


def score_items(call: Call) -> AnswerDraft:
    """SGLang's /v1/score: `query` + `items`, one row per item (one score per label token, or one).

    serving_score.py builds its answer "without usage info": `usage` is null."""
    query = text(required(call, "query"), "query")
    items = texts(required(call, "items"), "items")
    labels = call.body.get("label_token_ids")
    if labels is not None and (not isinstance(labels, list) or not labels or not all(type(t) is int for t in labels)):
        raise BadRequest("label_token_ids must be a non-empty list of integers")
    width = len(labels) if labels else 1
    tokens = pair_words(query, items)
    rows = kept(call, flipped(call, [[score(query, item, k) for k in range(width)] for item in items], lambda r: r[0]))
    doc = {"scores": rows, "model": model(call), "usage": None, "object": "scoring"}
    return AnswerDraft(doc, tokens=tokens, sequences=len(items))


def rerank(call: Call, ranking: Ranking) -> AnswerDraft:
    """SGLang's /v1/rerank (serving_rerank.py): a bare list, each result with its own `meta_info`, no usage."""
    top_n = call.body.get("top_n")
    if top_n is not None and (type(top_n) is not int or top_n < 1):
        raise BadRequest("top_n must be a positive integer")
    with_docs = call.body.get("return_documents", True) is not False
    doc = []
    tokens = 0
    for i, d, s in ranking.ranked:
        pair = count_words(ranking.query) + count_words(d)
        tokens += pair
        meta = {"id": new_id("rerank"), "prompt_tokens": pair, "e2e_latency": 0.0}
        doc.append({"score": s, "document": d if with_docs else None, "index": i, "meta_info": meta})
    return AnswerDraft(doc, tokens=tokens, sequences=len(ranking.ranked))


_TOKENIZER = {"model_name": MODEL, "is_streaming": "false"}
_SCHEDULER = {"model_name": MODEL, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
METRICS = Page(
    "prometheus_client",
    (
        Metric("counter", "sglang:num_requests", "Number of requests processed.", served_sequences, labels=_TOKENIZER),
        Metric(
            "counter", "sglang:prompt_tokens", "Number of prefill tokens processed.", served_tokens, labels=_TOKENIZER
        ),
        Metric(
            "counter", "sglang:generation_tokens", "Number of generation tokens processed.", never, labels=_TOKENIZER
        ),
        Metric(
            "histogram",
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            served_seconds_per_input,
            labels=_TOKENIZER,
        ),
        Metric(
            "histogram",
            "sglang:queue_time_seconds",
            "Histogram of queueing time in seconds.",
            served_queue_per_input,
            labels=_SCHEDULER,
        ),
        Metric("gauge", "sglang:num_running_reqs", "The number of running requests.", running, labels=_SCHEDULER),
        Metric(
            "gauge", "sglang:num_queue_reqs", "The number of requests in the waiting queue.", waiting, labels=_SCHEDULER
        ),
        Metric(
            "counter",
            "sglang:http_requests",
            "Total number of HTTP requests by endpoint and method",
            each_request,
            per_request=(("endpoint", "method"), lambda e: (e.route, "POST")),
        ),
        Metric(
            "counter",
            "sglang:http_responses",
            "Total number of HTTP responses by endpoint and status code",
            each_request,
            per_request=(("endpoint", "status_code", "method"), lambda e: (e.route, str(e.status), "POST")),
        ),
    ),
    per_input=True,
)
"""SGLang 0.5.23's /metrics (srt/observability/metrics_collector.py, http_request_metrics.py), as it writes them
with prometheus_client: `sglang:num_requests_total`, `sglang:prompt_tokens_total`,
`sglang:generation_tokens_total` and `sglang:e2e_request_latency_seconds` per input (the tokenizer manager
finishes one request per input), `sglang:queue_time_seconds`, the gauges `sglang:num_running_reqs` and
`sglang:num_queue_reqs` (inputs), and `sglang:http_requests_total{endpoint,method}`,
`sglang:http_responses_total{endpoint,status_code,method}`."""
