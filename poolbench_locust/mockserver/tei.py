"""Text Embeddings Inference 1.9's routes: /embed, /predict, /embed_sparse, /embed_all,
/similarity, GET /info, and /rerank in TEI's form; its 422 "Validation" refusals, its timing headers.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from typing import Any, cast

import orjson

from poolbench_locust.mockserver import vectors
from poolbench_locust.mockserver.answers import (
    MAX_ANSWER,
    Ranking,
    chars,
    flipped,
    label_scores,
    prompts,
    score,
)
from poolbench_locust.mockserver.calls import (
    AnswerDraft,
    BadRequest,
    Call,
    Handler,
    dim,
    drifting,
    kept,
    per_input,
    required,
)
from poolbench_locust.mockserver.metrics import Ended, Metric, Page, each_request, waiting
from poolbench_locust.mockserver.reply import Reply, error_reply
from poolbench_locust.wire import TEI_TOKENS_HEADER, count_prompt, count_prompts, count_words

TEI_MAX_CLIENT_BATCH_SIZE = 32
"""TEI's default --max-client-batch-size: a larger batch is refused with 422 "Validation" (TEI 1.9)."""
TEI_MAX_BATCH_TOKENS = 16384
TEI_MAX_INPUT_LENGTH = 512
"""The longest input TEI's /info says it takes (a BERT-sized model's); a longer one is refused when the
request asks TEI not to truncate (`truncate: false`); the mock's TEI truncates by default, as TEI does
when started with --auto-truncate."""
TEI_DURATION_BUCKETS = tuple(0.00001 * 1.5 ** (i + 1) for i in range(35))
"""TEI's own (router/src/prometheus.rs): 35 bounds, each 1.5 times the last, from 15 µs."""
TEI_INPUT_LENGTH_BUCKETS = tuple(float(2**i) for i in range(20) if 2**i <= 16384)
"""Powers of two up to TEI's max_input_length (the mock's max_batch_tokens, 16384)."""
SPARSE_ENTRIES = 8
"""Non-zero entries per sparse embedding the mock answers (at most; one per word below it)."""


def _headers(call: Call, tokens: int, characters: int) -> dict[str, str]:
    # The mock does no compute: its whole server-side time is the injected wait before the headers.
    queue = str(round(call.controls.ttfb_ms))
    return {
        "x-compute-time": "0",
        "x-total-time": queue,
        "x-tokenization-time": "0",
        "x-queue-time": queue,
        "x-inference-time": "0",
        TEI_TOKENS_HEADER: str(tokens),
        "x-compute-characters": str(characters),
    }


def _batch_refused(inputs: int) -> Reply | None:
    """TEI's answer to a batch above its cap (router/src/lib.rs's validation), or None."""
    if inputs <= TEI_MAX_CLIENT_BATCH_SIZE:
        return None
    error = f"batch size {inputs} > maximum allowed batch size {TEI_MAX_CLIENT_BATCH_SIZE}"
    return Reply(422, orjson.dumps({"error": error, "error_type": "Validation"}))


def _refused(call: Call, inputs: list[Any]) -> Reply | None:
    """TEI's answer to a batch above its cap, or to an input above max_input_length that it was asked
    not to truncate (router/src/infer.rs's validation), or None."""
    if (refused := _batch_refused(len(inputs))) is not None:
        return refused
    if call.body.get("truncate") is not False:
        return None
    longest = max((count_prompt(p) for p in inputs), default=0)
    if longest <= TEI_MAX_INPUT_LENGTH:
        return None
    error = f"`inputs` must have less than {TEI_MAX_INPUT_LENGTH} tokens. Given: {longest}"
    return Reply(422, orjson.dumps({"error": error, "error_type": "Validation"}))


def _inputs_route(answer: Callable[[Call, list[Any]], tuple[Any, int]]) -> Handler:
    """A route whose `inputs` are one sequence each: TEI's refusals first, then `answer`'s document and
    token count, with TEI's headers."""

    def handle(call: Call) -> AnswerDraft | Reply:
        inputs = prompts(required(call, "inputs"), "inputs")
        if (refused := _refused(call, inputs)) is not None:
            return refused
        doc, tokens = answer(call, inputs)
        headers = _headers(call, tokens, sum(chars(p) for p in inputs))
        return AnswerDraft(doc, headers=headers, tokens=tokens, sequences=len(inputs))

    return handle


@_inputs_route
def embed(call: Call, inputs: list[Any]) -> tuple[Any, int]:
    tokens, size = count_prompts(inputs), dim(call)
    return per_input(call, kept(call, inputs), lambda k: orjson.Fragment(vectors.json_floats(size, k))), tokens


def _predict_sequence(value: Any) -> list[str]:
    """One /predict sequence: a text, or a pair of texts (router/src/http/types.rs, PredictInput)."""
    if not isinstance(value, list) or not 1 <= len(value) <= 2 or not all(isinstance(v, str) for v in value):
        raise BadRequest("'inputs' must be a string, a pair of strings or a batch of [string] and [string, string]")
    return value


def predict(call: Call) -> AnswerDraft | Reply:
    """TEI answers one input with its labels' scores, and a batch with one such list per input.

    A bare list of strings is one pair, not a batch: a batch is a list of one- or two-text lists."""
    inputs = required(call, "inputs")
    if isinstance(inputs, str) or (isinstance(inputs, list) and inputs and isinstance(inputs[0], str)):
        sequence = [inputs] if isinstance(inputs, str) else _predict_sequence(inputs)
        sequences = [sequence]
        doc: Any = kept(call, label_scores("\x00".join(sequence), drifting(call, [sequence])[0]))
    else:
        if not isinstance(inputs, list) or not inputs:
            raise BadRequest("'inputs' must not be empty")
        sequences = [_predict_sequence(v) for v in inputs]
        if (refused := _batch_refused(len(sequences))) is not None:
            return refused
        answered = kept(call, sequences)
        doc = [label_scores("\x00".join(q), d) for q, d in zip(answered, drifting(call, answered), strict=True)]
    texts = [t for q in sequences for t in q]
    tokens = sum(count_words(t) for t in texts)
    headers = _headers(call, tokens, sum(len(t) for t in texts))
    return AnswerDraft(doc, headers=headers, tokens=tokens, sequences=len(sequences))


@_inputs_route
def embed_sparse(call: Call, inputs: list[Any]) -> tuple[Any, int]:
    tokens = count_prompts(inputs)
    doc = []
    answered = kept(call, inputs)
    for prompt, drift in zip(answered, drifting(call, answered), strict=True):
        seed = zlib.crc32(orjson.dumps(prompt))
        entries = max(1, min(SPARSE_ENTRIES, count_prompt(prompt)))
        entry = [{"index": (seed + 7919 * k) % 30522, "value": 0.125 * (k + 1)} for k in range(entries)]
        if drift:  # turned away: its first value negated, as the drifted dense vector's
            entry[0]["value"] = -entry[0]["value"]
        doc.append(entry)
    if doc and call.fault == "sparse-bad-index":
        doc[-1][-1]["index"] = -1
    return doc, tokens


@_inputs_route
def embed_all(call: Call, inputs: list[Any]) -> tuple[Any, int]:
    """One matrix per input: a row per token of it, all of the model's dimension."""
    counts = [max(1, count_prompt(p)) for p in inputs]
    size = dim(call)
    if sum(counts) * size * 4 > MAX_ANSWER:
        raise BadRequest(f"{sum(counts)} token rows x {size} is more than the mock's {MAX_ANSWER} byte limit")
    row_of = per_input(call, kept(call, inputs), lambda k: orjson.Fragment(vectors.json_floats(size, k)))
    tokens = count_prompts(inputs)
    doc = [[row] * n for row, n in zip(row_of, kept(call, counts), strict=True)]
    return doc, tokens


def similarity(call: Call) -> AnswerDraft | Reply:
    """`{"inputs": {"source_sentence", "sentences"}}` -> one similarity per sentence."""
    inputs = required(call, "inputs")
    if not isinstance(inputs, Mapping) or not isinstance(inputs.get("source_sentence"), str):
        raise BadRequest("'inputs' must hold a 'source_sentence' string and a 'sentences' list")
    source = inputs["source_sentence"]
    sentences = inputs.get("sentences")
    if not isinstance(sentences, list) or not sentences or not all(isinstance(t, str) for t in sentences):
        raise BadRequest("'inputs.sentences' must be a non-empty list of strings")
    # TEI's server.rs: "+1 because of the source sentence"
    if (refused := _batch_refused(len(sentences) + 1)) is not None:
        return refused
    # TEI embeds the source sentence once and each sentence once.
    tokens = count_words(source) + sum(count_words(t) for t in sentences)
    doc = kept(call, flipped(call, [score(source, t) for t in sentences]))
    headers = _headers(call, tokens, len(source) + sum(len(t) for t in sentences))
    return AnswerDraft(doc, headers=headers, tokens=tokens, sequences=len(sentences))


def rerank(call: Call, ranking: Ranking) -> AnswerDraft | Reply:
    """/rerank in TEI's form: a bare list of {index, score}, the texts when `return_text` asks."""
    query, docs, tokens = ranking.query, ranking.docs, ranking.tokens
    if (refused := _batch_refused(len(docs))) is not None:
        return refused
    with_text = bool(call.body.get("return_text"))
    doc = [{"index": i, "score": s, **({"text": d} if with_text else {})} for i, d, s in ranking.ranked]
    characters = sum(len(query) + len(d) for d in docs)
    return AnswerDraft(doc, headers=_headers(call, tokens, characters), tokens=tokens, sequences=len(docs))


def info(call: Call) -> Reply:
    """TEI's GET /info: what a client may ask of it. vLLM and Infinity have no such route."""
    if call.controls.flavor != "tei":
        return error_reply(404, "Not Found: /info", "NotFoundError")
    doc = {
        "model_id": call.config.model,
        "max_client_batch_size": TEI_MAX_CLIENT_BATCH_SIZE,
        "max_input_length": TEI_MAX_INPUT_LENGTH,
        "max_batch_tokens": TEI_MAX_BATCH_TOKENS,
        "auto_truncate": True,
    }
    return Reply(200, orjson.dumps(doc))


def _method(e: Ended) -> tuple[str]:
    # TEI's `method` says whether `inputs` was one input or a list; the mock knows only how many it had.
    return ("single" if e.sequences == 1 else "batch",)


def _duration(name: str, of: Callable[[Ended], float]) -> Metric:
    """A histogram of one duration per request served, in TEI's buckets."""
    return Metric("histogram", name, "", lambda e: [of(e)] if e.served else [], buckets=TEI_DURATION_BUCKETS)


METRICS = Page(
    "rust",
    (
        Metric("counter", "te_request_count", "", each_request, per_request=(("method",), _method)),
        Metric("counter", "te_request_success", "", lambda e: int(e.served), per_request=(("method",), _method)),
        Metric(
            "counter",
            "te_request_failure",
            "",
            lambda e: int(e.seconds is not None and not e.served),
            per_request=(("err",), lambda e: ("validation" if 400 <= e.status < 500 else "backend",)),
        ),
        Metric("gauge", "te_queue_size", "", waiting),
        Metric(
            "histogram",
            "te_request_input_length",
            "",
            lambda e: e.input_tokens() if e.served else [],
            buckets=TEI_INPUT_LENGTH_BUCKETS,
        ),
        # `_duration` measures a served request alone: completed, so its seconds are set
        _duration("te_request_duration", lambda e: cast(float, e.seconds)),
        _duration("te_request_queue_duration", lambda e: e.queue),
        _duration("te_request_tokenization_duration", lambda e: 0.0),
        _duration("te_request_inference_duration", lambda e: max(cast(float, e.seconds) - e.queue, 0.0)),
    ),
    per_input=True,
)
"""TEI 1.9's /metrics (router/src/lib.rs, router/src/http/server.rs, core/src/queue.rs, core/src/tokenization.rs),
as its Rust exporter writes them: `te_request_count`/`te_request_success{method}`, `te_request_failure{err}`,
the histograms `te_request_input_length` (one observation per input: its tokens), `te_request_duration`,
`te_request_queue_duration`, `te_request_tokenization_duration`, `te_request_inference_duration` (one per
request), and the gauge `te_queue_size` (inputs in the wait). No gauge of what runs: TEI has none."""
