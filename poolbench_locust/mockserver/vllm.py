"""vLLM 0.34's pooling routes: /v1/embeddings (texts, token ids or chat conversations), /pooling and its
tasks, /classify, /score, /rerank in vLLM's form, /tokenize and the model list; its length check
(max_model_len, truncate_prompt_tokens) and the fields it refuses.

Pooling tasks: /pooling's `task` (embed, classify, token_embed, token_classify) and a token_embed model's
/v1/embeddings, whose answers hold one row per input token (WIRE.md). The model's task is the mock's `task`
(--task, `x-mock-task`); without one, /pooling answers whichever task it is asked. Rows are the mock's word
count of each input (as its usage), or one per chunk of `late_chunking_params.chunk_size` of them;
token_classify rows hold one logit per label.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from poolbench_locust.mockserver import config, image_inputs, vectors
from poolbench_locust.mockserver.answers import (
    LABELS,
    Ranking,
    embed,
    encoding,
    flipped,
    is_ids,
    listed,
    new_id,
    prompts,
    score,
    texts,
    usage,
)
from poolbench_locust.mockserver.calls import (
    AnswerDraft,
    BadRequest,
    Call,
    Handler,
    dim,
    drifting,
    kept,
    model,
    per_input,
    required,
)
from poolbench_locust.mockserver.metrics import (
    MODEL,
    Metric,
    Page,
    each_request,
    running,
    served_cached_tokens,
    served_queue_per_input,
    served_seconds_per_input,
    served_sequences,
    served_tokens,
    server_seconds,
    waiting,
)
from poolbench_locust.mockserver.reply import Reply
from poolbench_locust.wire import (
    BINARY_ENCODINGS,
    DTYPE_SIZES,
    EMBED_AND_TOKEN_CLASSIFY_REFUSED,
    ENCODINGS,
    POOLING_TASKS,
    count_prompt,
    count_prompts,
    count_words,
)

MAX_MODEL_LEN = config.MAX_MODEL_LEN
"""The default; a mock started with --max-model-len serves its own (`call.config.max_model_len`)."""
CLASSES = len(LABELS)
"""Classes of the mock's classifier: /classify's LABEL_0 and LABEL_1."""
REMOVED_TASKS: Mapping[str, str] = {
    "score": "`score` task was removed; use `classify` instead.",
    "encode": "`encode` task was removed; use `token_embed` or `token_classify` instead.",
}
"""vLLM 0.34's words for a task it no longer takes (vllm/tasks.py)."""
MAX_ROWS_BYTES = 1 << 30
"""Bytes of rows one answer may hold: a typo in a batch size must not take the machine's memory."""


def _pooling_task(call: Call) -> str:
    """The task a /pooling request runs: its `task`, else the model's; vLLM's 400 for one it cannot."""
    asked = call.body.get("task")
    model_task = call.controls.task
    if asked is None:
        asked = model_task or "embed"
    if not isinstance(asked, str):
        raise BadRequest("task: Input should be a string")
    if asked in REMOVED_TASKS:
        raise BadRequest(REMOVED_TASKS[asked])
    if asked == "embed&token_classify":  # BGE-M3's combined task: only through its IO processor plugin
        raise BadRequest(EMBED_AND_TOKEN_CLASSIFY_REFUSED)
    if asked not in POOLING_TASKS or (model_task is not None and asked != model_task):
        supported = (model_task,) if model_task is not None else POOLING_TASKS
        raise BadRequest(f"Unsupported task: {asked!r} Supported tasks: {supported}")
    return asked


def _late_chunk(call: Call, task: str) -> int | None:
    """`late_chunking_params.chunk_size`: one row per chunk of that many tokens, a token_embed model's only."""
    params = call.body.get("late_chunking_params")
    if params is None:
        return None
    if task != "token_embed":
        raise BadRequest("late_chunking_params is only supported for the token_embed task")
    size = params.get("chunk_size") if isinstance(params, Mapping) else None
    if type(size) is not int or size < 1:
        raise BadRequest("late_chunking_params.chunk_size must be a positive integer")
    if call.body.get("truncate_prompt_tokens") is not None:
        raise BadRequest("Late chunking does not support input padding, truncation or renderer text normalization")
    return size


def _token_embed_model(call: Call) -> bool:
    """Whether /v1/embeddings is a token_embed model's: another router, one row per token."""
    return call.controls.task == "token_embed"


def _check_token_embeddings(call: Call) -> None:
    """What a token_embed model's /v1/embeddings refuses (WIRE.md): an encoding other than float, dimensions."""
    if (call.body.get("encoding_format") or "float") != "float":
        raise BadRequest("encoding_format must be 'float' for token embedding (token_embed) models")
    if call.body.get("dimensions") is not None:
        raise BadRequest("dimensions is not supported for token embedding (token_embed) models")


def _task_answer(
    call: Call,
    inputs: Sequence[Any],
    counts: Sequence[int],
    task: str,
    item: str,
    key: str,
    how: tuple[str, str, str],
    chunk: int | None = None,
) -> AnswerDraft:
    """The answer of a task to inputs of `counts` tokens each (after any cut): token_embed and token_classify
    a matrix per input, classify a vector of label probabilities; in the encoding `how` (format, dtype, endianness)."""
    encoding, dtype, endianness = how
    tokens = sum(counts)
    if task == "classify":
        rows: list[int] | None = None
        width = CLASSES
    else:
        rows = [-(-n // chunk) if chunk else n for n in counts]
        width = CLASSES if task == "token_classify" else dim(call)
    indices = kept(call, list(range(len(counts))))
    answered = [inputs[i] for i in indices]
    per_item = [1 if rows is None else rows[i] for i in indices]
    if sum(per_item) * width * DTYPE_SIZES[dtype] > MAX_ROWS_BYTES:
        raise BadRequest(f"{sum(per_item)} rows x {width} is more than the mock's {MAX_ROWS_BYTES} byte limit")
    head = {"id": f"pool-{time.time_ns():x}", "created": int(time.time()), "model": model(call)}
    counted = usage(tokens)
    if encoding in BINARY_ENCODINGS:
        row_of = per_input(call, answered, lambda k: vectors.raw(width, dtype, endianness, k))
        raw = b"".join(row * n for row, n in zip(row_of, per_item, strict=True))
        metadata = None
        if encoding == "bytes":
            data, start = [], 0
            for i, n in zip(indices, per_item, strict=True):
                shape = [width] if rows is None else [n, width]
                data.append({"index": i, "embed_dtype": dtype, "endianness": endianness, "start": start})
                start += n * width * DTYPE_SIZES[dtype]
                data[-1] |= {"end": start, "shape": shape}
            metadata = {**head, "data": data, "usage": counted}
        return AnswerDraft(raw=raw, metadata=metadata, tokens=tokens, sequences=len(counts))
    if encoding == "float":
        ones = per_input(call, answered, lambda k: orjson.Fragment(vectors.json_floats(width, k)))
        values: list[Any] = [one if rows is None else [one] * n for one, n in zip(ones, per_item, strict=True)]
    else:  # base64 of each input's whole array
        row_of = per_input(call, answered, lambda k: vectors.raw(width, dtype, endianness, k))
        values = [base64.b64encode(row * n).decode() for row, n in zip(row_of, per_item, strict=True)]
    data = [{"index": i, "object": item, key: value} for i, value in zip(indices, values, strict=True)]
    return AnswerDraft({**head, "object": "list", "data": data, "usage": counted}, tokens=tokens, sequences=len(counts))


def _refused_fields(call: Call) -> None:
    """What vLLM 0.34 refuses in any /v1/embeddings, /pooling or /classify body."""
    if call.controls.flavor == "vllm" and "normalize" in call.body:
        raise BadRequest("Parameter `normalize` was removed; use `use_activation` instead.")


def _tokens(call: Call, counts: list[int]) -> int:
    """vLLM's count of the prompts (each one's tokens in `counts`) after its length check (_counts)."""
    return sum(_counts(call, counts))


def _counts(call: Call, counts: list[int]) -> list[int]:
    """Each prompt's tokens as vLLM runs it: a prompt past max_model_len is refused (400) unless
    truncate_prompt_tokens (-1: the model's limit) cuts it; other servers count every token."""
    if call.controls.flavor != "vllm":
        return counts
    cut = call.body.get("truncate_prompt_tokens")
    if cut is not None and (type(cut) is not int or cut < -1):
        raise BadRequest("truncate_prompt_tokens: Input should be greater than or equal to -1")
    if call.body.get("truncation_side") not in (None, "left", "right"):
        raise BadRequest("truncation_side: Input should be 'left' or 'right'")
    most = call.config.max_model_len
    if cut is None:
        if (longest := max(counts, default=0)) > most:
            raise BadRequest(
                f"This model's maximum context length is {most} tokens. However, your prompt contains "
                f"{longest} input tokens, which exceeds this limit even without any output tokens. "
                "Please reduce the length of the input prompt."
            )
        return counts
    if cut > most:
        raise BadRequest(
            "truncate_prompt_tokens value is greater than max_model_len. Please request a smaller truncation size."
        )
    limit = most if cut == -1 else cut
    return [min(n, limit) for n in counts]


def _is_conversation(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, Mapping) for m in value)


def _conversations(call: Call, messages: Any, batches: bool) -> list[list[Any]]:
    """`messages`: one conversation, or (vLLM 0.34's /v1/embeddings) a list of conversations."""
    if _is_conversation(messages):
        return [messages]
    if batches and call.controls.flavor == "vllm" and isinstance(messages, list) and messages:
        if all(_is_conversation(c) for c in messages):
            return messages
        raise BadRequest("'messages' must be a list of chat messages, or a list of non-empty lists of them")
    raise BadRequest("'messages' must be a non-empty list of chat messages")


def _embedding_route(item: str, key: str) -> Handler:
    def handle(call: Call) -> AnswerDraft:
        _refused_fields(call)
        if key == "data" and call.body.get("dimensions") is not None:  # vLLM 0.34's /pooling
            raise BadRequest("dimensions is currently not supported")
        if "input" not in call.body and "messages" in call.body:
            conversations = _conversations(call, call.body["messages"], batches=key == "embedding")
            seen = image_inputs.Seen()
            for conversation in conversations:
                seen.messages(conversation)
            # A conversation is one sequence: one embedding for all its messages.
            counts = [count_prompts(c) for c in conversations]
            return embed(call, conversations, _tokens(call, counts), item, key, ENCODINGS)
        inputs = prompts(required(call, "input"), "input")
        if key == "data":  # /pooling runs the task it names, or the model's
            task = _pooling_task(call)
        elif _token_embed_model(call):
            _check_token_embeddings(call)
            task = "token_embed"
        else:
            task = "embed"
        if task != "embed":
            chunk = _late_chunk(call, task)
            counts = _counts(call, [count_prompt(p) for p in inputs])
            return _task_answer(call, inputs, counts, task, item, key, encoding(call, ENCODINGS), chunk)
        counts = _counts(call, [count_prompt(p) for p in inputs])
        draft = embed(call, inputs, sum(counts), item, key, ENCODINGS)
        draft.prompts = tuple(zip(map(_prompt_key, inputs), counts, strict=True))
        return draft

    return handle


def _prompt_key(prompt: Any) -> Any:
    """A prompt as the prefix cache keys it: a text, or token ids (a list) as a tuple."""
    return tuple(prompt) if isinstance(prompt, list) else prompt


embeddings = _embedding_route("embedding", "embedding")
"""/v1/embeddings: texts, token ids or conversations; a token_embed model's rows per token."""
pooling = _embedding_route("pooling", "data")
"""/pooling: the task the body names, or the model's."""


def classify(call: Call) -> AnswerDraft:
    _refused_fields(call)
    inputs = prompts(required(call, "input"), "input")
    tokens = _tokens(call, [count_prompt(p) for p in inputs])
    data = []
    answered = kept(call, inputs)
    for i, (prompt, drift) in enumerate(zip(answered, drifting(call, answered), strict=True)):
        p = 1 - score(prompt) if drift else score(prompt)  # a drifted classifier: the probabilities swapped
        data.append({"index": i, "label": LABELS[p >= 0.5], "probs": [1 - p, p], "num_classes": len(LABELS)})
    return listed(call, "classify", data, tokens, len(inputs))


_SCORE_FIELDS = (("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2"))


def score_pairs(call: Call) -> AnswerDraft:
    """/score and /v1/score: one score per pair, the pairs from any of vLLM's four field couples."""
    for left_name, right_name in _SCORE_FIELDS:
        if left_name in call.body and right_name in call.body:
            break
    else:
        raise BadRequest("expected one of queries+documents, queries+items, data_1+data_2, text_1+text_2")
    left, right = texts(call.body[left_name], left_name), texts(call.body[right_name], right_name)
    if len(left) == 1:
        pairs = [(left[0], r) for r in right]
    elif len(left) == len(right):
        pairs = list(zip(left, right, strict=True))
    else:
        raise BadRequest(f"{left_name!r} must hold one item or as many as {right_name!r}")
    counts = [count_words(q) + count_words(d) for q, d in pairs]
    scores = kept(call, flipped(call, [score(q, d) for q, d in pairs]))
    data = [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)]
    draft = listed(call, "score", data, sum(counts), len(pairs))
    draft.prompts = tuple(zip(pairs, counts, strict=True))  # a cross-encoder's prompt: the query, then the document
    return draft


def rerank(call: Call, ranking: Ranking) -> AnswerDraft:
    """/rerank in vLLM's form: the results with their document, relevance_score and usage."""
    results = [{"index": i, "document": {"text": d}, "relevance_score": s} for i, d, s in ranking.ranked]
    doc = {"id": new_id("rerank"), "model": model(call), "usage": usage(ranking.tokens), "results": results}
    prompts = tuple(((ranking.query, d), count_words(ranking.query) + count_words(d)) for d in ranking.docs)
    return AnswerDraft(doc, tokens=ranking.tokens, sequences=len(ranking.docs), prompts=prompts)


def tokenize(call: Call) -> Reply:
    prompt = call.body.get("prompt")
    if prompt is None and isinstance(call.body.get("messages"), list):
        count = count_prompts(call.body["messages"])
    elif isinstance(prompt, str) or is_ids(prompt):
        count = count_prompt(prompt)
    else:
        raise BadRequest("'prompt' must be a string or token ids (or give 'messages')")
    doc = {"count": count, "max_model_len": call.config.max_model_len, "tokens": list(range(1000, 1000 + count))}
    return Reply(200, orjson.dumps(doc))


def models(call: Call) -> Reply:
    """GET /v1/models (and Infinity's /models): the one model the mock serves."""
    card = {
        "id": call.config.model,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "poolbench-mock",
        "root": call.config.model,
        "max_model_len": call.config.max_model_len,
    }
    return Reply(200, orjson.dumps({"object": "list", "data": [card]}))


_ENGINE = {"model_name": MODEL, "engine": "0"}
METRICS = Page(
    "prometheus_client",
    (
        Metric(
            "counter",
            "vllm:request_success",
            "Count of successfully processed requests.",
            served_sequences,  # vLLM counts one engine request per prompt
            labels={**_ENGINE, "finished_reason": "stop"},
        ),
        Metric("counter", "vllm:prompt_tokens", "Number of prefill tokens processed.", served_tokens, labels=_ENGINE),
        Metric(
            "counter",
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            served_tokens,
            labels=_ENGINE,
        ),
        Metric(
            "counter",
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            served_cached_tokens,
            labels=_ENGINE,
        ),
        Metric(
            "histogram",
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            served_seconds_per_input,
            labels=_ENGINE,
        ),
        Metric(
            "histogram",
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            served_queue_per_input,
            labels=_ENGINE,
        ),
        Metric(
            "counter",
            "http_requests",
            "Total number of requests by method, status and handler.",
            each_request,
            per_request=(("method", "status", "handler"), lambda e: ("POST", f"{e.status // 100}xx", e.route)),
        ),
        Metric(
            "histogram",
            "http_request_duration_seconds",
            "Latency with only few buckets by handler.",
            server_seconds,
            per_request=(("method", "handler"), lambda e: ("POST", e.route)),
        ),
        Metric(
            "gauge", "vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting, labels=_ENGINE
        ),
        Metric(
            "gauge",
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            running,
            labels=_ENGINE,
        ),
    ),
    per_input=False,
)
"""vLLM's /metrics, as it writes them with prometheus_client: `vllm:request_success_total` and
`vllm:prompt_tokens_total` (sequences and usage tokens of the requests served), `vllm:prefix_cache_queries_total`
(those tokens again) and `vllm:prefix_cache_hits_total` (of them, the tokens of prompts it served before: texts of
/v1/embeddings and /pooling's embed, query-document pairs of /score and /rerank; metrics.PrefixCache),
`vllm:e2e_request_latency_seconds`
(each such sequence's time on the server, as /mock/timings gives it), `vllm:request_queue_time_seconds` (the
wait the mock put before the headers, also what its TEI `x-queue-time` header says),
`vllm:num_requests_waiting`/`_running` (pooling requests in that wait now / past it), and vLLM's HTTP layer's
`http_requests_total{method,status,handler}` and `http_request_duration_seconds{method,handler}` (every pooling
request answered, by route and status class). Every flavor without a page of its own writes this one."""
