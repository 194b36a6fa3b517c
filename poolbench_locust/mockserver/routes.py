"""What each route answers (WIRE.md), as vLLM, Infinity or TEI would, with token counts by the word rule.

Handlers turn a parsed request into an `AnswerDraft` (a JSON document whose vectors are pre-serialised
`orjson.Fragment`s, or a raw body with its metadata); `render` makes the `Reply` the writer sends.
"""

from __future__ import annotations

import gzip
import itertools
import re
import time
import zlib
from collections.abc import Mapping
from typing import Any

import orjson

from poolbench_locust.mockserver import (
    faults,
    image_inputs,
    kserve_routes,
    ollama_routes,
    packed,
    token_routes,
    vectors,
)
from poolbench_locust.mockserver.calls import AnswerDraft, BadRequest, Call, Handler
from poolbench_locust.mockserver.calls import dim as _dim
from poolbench_locust.mockserver.calls import kept as _kept
from poolbench_locust.mockserver.calls import kind as _kind
from poolbench_locust.mockserver.calls import model as _model
from poolbench_locust.mockserver.calls import required as _required
from poolbench_locust.mockserver.reply import Reply, error_reply
from poolbench_locust.wire import (
    BINARY_ENCODINGS,
    COHERE_INPUT_TYPES,
    COHERE_NO_INPUT_TYPE,
    DTYPE_SIZES,
    ENCODINGS,
    ENDIANNESS,
    METADATA_HEADER,
    OCTET_STREAM,
    TEI_TOKENS_HEADER,
    cohere_needs_input_type,
    count_prompt,
    count_prompts,
    count_words,
)

MAX_MODEL_LEN = 8192
MAX_ANSWER = 1 << 30
"""Bytes of vectors one answer may hold: a typo in a batch size must not take the machine's memory."""
LABELS = ("LABEL_0", "LABEL_1")
TEI_MAX_CLIENT_BATCH_SIZE = 32
"""TEI's default --max-client-batch-size: a larger batch is refused with 422 "Validation" (TEI 1.9)."""
TEI_MAX_BATCH_TOKENS = 16384
TEI_MAX_INPUT_LENGTH = 512
"""The longest input TEI's /info says it takes (a BERT-sized model's); a longer one is refused when the
request asks TEI not to truncate (`truncate: false`); the mock's TEI truncates by default, as TEI does
when started with --auto-truncate."""


_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}-{next(_ids):016x}"


def _usage(tokens: int) -> dict[str, int]:
    return {"prompt_tokens": tokens, "total_tokens": tokens}


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(t) is int for t in value)


def _prompts(value: Any, name: str) -> list[Any]:
    """vLLM's `input`: a text, texts, one token-id list, or token-id lists; one prompt per sequence."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value):
            return value
        if _is_ids(value):
            return [value]
        if all(_is_ids(v) for v in value):
            return value
    raise BadRequest(f"{name!r} must be a string, a non-empty list of strings, token ids or token-id lists")


def _text(value: Any, name: str) -> str:
    if isinstance(value, Mapping) and isinstance(value.get("text"), str):
        return value["text"]  # Cohere-style {"text": ...} documents
    if not isinstance(value, str) and (text := image_inputs.document(value, name, image_inputs.Seen())) is not None:
        return text  # a document with images: vLLM's {"content": [parts]}, SGLang's [parts]
    if not isinstance(value, str):
        raise BadRequest(f"{name!r} must hold strings")
    return value


def _texts(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise BadRequest(f"{name!r} must be a string or a list of strings")
    return [_text(v, name) for v in value]


def _vllm_refused_fields(call: Call) -> None:
    """What vLLM 0.34 refuses in any /v1/embeddings, /pooling or /classify body."""
    if call.controls.flavor == "vllm" and "normalize" in call.body:
        raise BadRequest("Parameter `normalize` was removed; use `use_activation` instead.")


def _vllm_tokens(call: Call, counts: list[int]) -> int:
    """vLLM's count of the prompts (each one's tokens in `counts`) after its length check (_vllm_counts)."""
    return sum(_vllm_counts(call, counts))


def _vllm_counts(call: Call, counts: list[int]) -> list[int]:
    """Each prompt's tokens as vLLM runs it: a prompt past max_model_len is refused (400) unless
    truncate_prompt_tokens (-1: the model's limit) cuts it; other servers count every token."""
    if call.controls.flavor != "vllm":
        return counts
    cut = call.body.get("truncate_prompt_tokens")
    if cut is not None and (type(cut) is not int or cut < -1):
        raise BadRequest("truncate_prompt_tokens: Input should be greater than or equal to -1")
    if call.body.get("truncation_side") not in (None, "left", "right"):
        raise BadRequest("truncation_side: Input should be 'left' or 'right'")
    if cut is None:
        if (longest := max(counts, default=0)) > MAX_MODEL_LEN:
            raise BadRequest(
                f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, your prompt contains "
                f"{longest} input tokens, which exceeds this limit even without any output tokens. "
                "Please reduce the length of the input prompt."
            )
        return counts
    if cut > MAX_MODEL_LEN:
        raise BadRequest(
            "truncate_prompt_tokens value is greater than max_model_len. Please request a smaller truncation size."
        )
    limit = MAX_MODEL_LEN if cut == -1 else cut
    return [min(n, limit) for n in counts]


def _chars(prompt: Any) -> int:
    return len(prompt) if isinstance(prompt, str | list) else count_prompt(prompt)


def _infinity_tokens(call: Call, prompts: list[Any]) -> int:
    """Infinity's usage counts characters unless it was started to count tokens."""
    if call.config.infinity_usage == "tokens":
        return count_prompts(prompts)
    return sum(_chars(p) for p in prompts)


def _score(*parts: Any) -> float:
    """A deterministic score in [0, 1) per input, so sorting and top_n mean something."""
    text = "\x00".join(p if isinstance(p, str) else orjson.dumps(p).decode() for p in parts)
    return zlib.crc32(text.encode()) / 2**32


def _tei_headers(call: Call, tokens: int, chars: int) -> dict[str, str]:
    # The mock does no compute: its whole server-side time is the injected wait before the headers.
    queue = str(round(call.controls.ttfb_ms))
    return {
        "x-compute-time": "0",
        "x-total-time": queue,
        "x-tokenization-time": "0",
        "x-queue-time": queue,
        "x-inference-time": "0",
        TEI_TOKENS_HEADER: str(tokens),
        "x-compute-characters": str(chars),
    }


def _encoding(call: Call, allowed: tuple[str, ...]) -> tuple[str, str, str]:
    encoding = call.body.get("encoding_format") or "float"
    if encoding not in allowed:
        raise BadRequest(f"encoding_format {encoding!r} is not supported; use one of {', '.join(allowed)}")
    dtype = call.body.get("embed_dtype") or "float32"
    if dtype not in DTYPE_SIZES:
        raise BadRequest(f"embed_dtype {dtype!r} is not supported; use one of {', '.join(DTYPE_SIZES)}")
    endianness = call.body.get("endianness") or "native"
    if endianness not in ENDIANNESS:
        raise BadRequest(f"endianness {endianness!r} is not supported; use one of {', '.join(ENDIANNESS)}")
    return encoding, dtype, endianness


def _embed(call: Call, prompts: list[Any], tokens: int, item: str, key: str, allowed: tuple[str, ...]) -> AnswerDraft:
    """The OpenAI-shaped embeddings answer shared by /v1/embeddings, /pooling and Infinity's /embeddings."""
    encoding, dtype, endianness = _encoding(call, allowed)
    dim, kind, model = _dim(call), _kind(call), _model(call)
    indices = _kept(call, list(range(len(prompts))))
    if len(prompts) * dim * DTYPE_SIZES[dtype] > MAX_ANSWER:
        raise BadRequest(f"{len(prompts)} x {dim} x {dtype} is more than the mock's {MAX_ANSWER} byte limit")
    head = {"id": _id("embd"), "created": int(time.time()), "model": model}
    if encoding in BINARY_ENCODINGS:
        vector = vectors.raw(dim, dtype, endianness, kind)
        width = len(vector)
        metadata = None
        if encoding == "bytes":
            data = [
                {
                    "index": i,
                    "embed_dtype": dtype,
                    "endianness": endianness,
                    "start": i * width,
                    "end": (i + 1) * width,
                    "shape": [dim],
                }
                for i in indices
            ]
            metadata = {**head, "data": data, "usage": _usage(tokens)}
        return AnswerDraft(raw=vector * len(indices), metadata=metadata, tokens=tokens, sequences=len(prompts))
    text = vectors.json_floats(dim, kind) if encoding == "float" else vectors.json_base64(dim, dtype, endianness, kind)
    fragment = orjson.Fragment(text)
    data = [{"index": i, "object": item, key: fragment} for i in indices]
    if call.controls.flavor == "voyage":  # Voyage: no id or created, and usage holds only total_tokens
        doc = {"object": "list", "data": data, "model": model, "usage": {"total_tokens": tokens}}
    else:
        doc = {**head, "object": "list", "data": data, "usage": _usage(tokens)}
    return AnswerDraft(doc, tokens=tokens, sequences=len(prompts))


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
        if call.controls.flavor == "voyage" and key == "embedding":
            return packed.voyage_embeddings(call)
        _vllm_refused_fields(call)
        if key == "data" and call.body.get("dimensions") is not None:  # vLLM 0.34's /pooling
            raise BadRequest("dimensions is currently not supported")
        if "input" not in call.body and "messages" in call.body:
            conversations = _conversations(call, call.body["messages"], batches=key == "embedding")
            seen = image_inputs.Seen()
            for conversation in conversations:
                seen.messages(conversation)
            # A conversation is one sequence: one embedding for all its messages.
            counts = [count_prompts(c) for c in conversations]
            return _embed(call, conversations, _vllm_tokens(call, counts), item, key, ENCODINGS)
        prompts = _prompts(_required(call, "input"), "input")
        if key == "data":  # /pooling runs the task it names, or the model's
            task = token_routes.pooling_task(call)
        elif token_routes.token_embed_model(call):
            token_routes.check_token_embeddings_request(call)
            task = "token_embed"
        else:
            task = "embed"
        if task != "embed":
            chunk = token_routes.late_chunk(call, task)
            counts = _vllm_counts(call, [count_prompt(p) for p in prompts])
            return token_routes.answer(call, counts, task, item, key, _encoding(call, ENCODINGS), chunk)
        return _embed(call, prompts, _vllm_tokens(call, [count_prompt(p) for p in prompts]), item, key, ENCODINGS)

    return handle


def infinity_embeddings(call: Call) -> AnswerDraft | Reply:
    prompts = _prompts(_required(call, "input"), "input")
    modality = call.body.get("modality", "text")
    if modality == "image":  # each input an image URL or data URI, decoded; its usage: one per image
        for i, url in enumerate(prompts):
            image_inputs.image(url, f"input[{i}]")
        tokens = len(prompts)
    elif modality != "text":
        raise BadRequest(f"modality {str(modality)[:20]!r} is not served by the mock: text or image")
    else:
        tokens = _infinity_tokens(call, prompts)
    if call.config.infinity_dtype != "float32":  # started with a packed --embedding-dtype
        return packed.infinity_embeddings(call, prompts, tokens)
    return _embed(call, prompts, tokens, "embedding", "embedding", ("float", "base64"))


def cohere_embed(call: Call) -> AnswerDraft | Reply:
    """/v2/embed as vLLM answers it, or (cohere flavor) as Cohere's API does."""
    texts = call.body.get("texts") or call.body.get("inputs") or call.body.get("images")
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str | Mapping) for t in texts):
        raise BadRequest("'texts' (or 'inputs', or 'images') must be a non-empty list")
    seen = image_inputs.Seen()
    if "images" in call.body and "texts" not in call.body and "inputs" not in call.body:
        for i, url in enumerate(texts):
            seen.add(url, f"images[{i}]")
        texts = [""] * len(texts)  # no text to count
    for i, item in enumerate(texts):
        if isinstance(item, Mapping):  # an input of content parts: text and images
            seen.parts(item.get("content"), f"inputs[{i}]")
    if call.body.get("truncate", "END") not in ("NONE", "START", "END"):
        raise BadRequest("truncate: Input should be 'NONE', 'START' or 'END'")
    input_type = call.body.get("input_type")
    if input_type is not None and input_type not in COHERE_INPUT_TYPES:
        raise BadRequest(f"Unsupported input_type {input_type!r}. Supported values: {', '.join(COHERE_INPUT_TYPES)}")
    if call.controls.flavor == "cohere" and input_type is None and cohere_needs_input_type(_model(call)):
        return Reply(400, orjson.dumps({"message": COHERE_NO_INPUT_TYPE}))
    tokens = count_prompts(texts)
    embeddings = packed.cohere_embeddings(call, len(_kept(call, texts)))  # by embedding_types
    doc = {
        "id": _id("embed"),
        "embeddings": embeddings,
        "texts": [t for t in texts if isinstance(t, str) and t],
        "meta": {"api_version": {"version": "2"}, "billed_units": {"input_tokens": tokens}},
    }
    if call.controls.flavor == "cohere" and seen.images:  # Cohere bills image tokens apart
        doc["meta"]["billed_units"]["image_tokens"] = seen.tokens()
    return AnswerDraft(doc, tokens=tokens, sequences=len(texts))


def _ranked(call: Call, query: str, docs: list[str]) -> list[tuple[int, str, float]]:
    """Documents by score, highest first, cut to top_n (0 or absent: all)."""
    top_n = call.body.get("top_n") or 0
    if type(top_n) is not int or top_n < 0:
        raise BadRequest("'top_n' must be a non-negative integer")
    ranked = sorted(((i, d, _score(query, d)) for i, d in enumerate(docs)), key=lambda r: -r[2])
    return _kept(call, ranked[:top_n] if top_n else ranked)


def _pair_words(query: str, docs: list[str]) -> int:
    return sum(count_words(query) + count_words(d) for d in docs)


def rerank(call: Call) -> AnswerDraft | Reply:
    """/rerank and /v1/rerank: vLLM's form, or TEI's (a `texts` body or tei flavor), Infinity's or Voyage's."""
    query = _text(_required(call, "query"), "query")
    tei = "texts" in call.body or call.controls.flavor == "tei"
    docs = _texts(call.body.get("texts") if "texts" in call.body else _required(call, "documents"), "documents")
    ranked, tokens = _ranked(call, query, docs), _pair_words(query, docs)
    if tei:
        if (refused := _tei_batch_refused(len(docs))) is not None:
            return refused
        with_text = bool(call.body.get("return_text"))
        doc: Any = [{"index": i, "score": s, **({"text": d} if with_text else {})} for i, d, s in ranked]
        chars = sum(len(query) + len(d) for d in docs)
        return AnswerDraft(doc, headers=_tei_headers(call, tokens, chars), tokens=tokens, sequences=len(docs))
    if call.controls.flavor == "sglang":
        return _sglang_rerank(call, query, ranked)
    if call.controls.flavor == "voyage":  # results under data, usage only total_tokens
        data = [{"relevance_score": s, "index": i} for i, _, s in ranked]
        doc = {"object": "list", "data": data, "model": _model(call), "usage": {"total_tokens": tokens}}
        return AnswerDraft(doc, tokens=tokens, sequences=len(docs))
    if call.controls.flavor == "infinity":
        if call.config.infinity_usage == "chars":
            tokens = sum(len(query) + len(d) for d in docs)
        with_docs = bool(call.body.get("return_documents"))
        results = [{"relevance_score": s, "index": i, **({"document": d} if with_docs else {})} for i, d, s in ranked]
        doc = {
            "object": "rerank",
            "results": results,
            "model": _model(call),
            "usage": _usage(tokens),
            "id": _id("infinity"),
            "created": int(time.time()),
        }
        return AnswerDraft(doc, tokens=tokens, sequences=len(docs))
    results = [{"index": i, "document": {"text": d}, "relevance_score": s} for i, d, s in ranked]
    doc = {"id": _id("rerank"), "model": _model(call), "usage": _usage(tokens), "results": results}
    return AnswerDraft(doc, tokens=tokens, sequences=len(docs))


def _sglang_rerank(call: Call, query: str, ranked: list[tuple[int, str, float]]) -> AnswerDraft:
    """SGLang's /v1/rerank (serving_rerank.py): a bare list, each result with its own `meta_info`, no usage."""
    top_n = call.body.get("top_n")
    if top_n is not None and (type(top_n) is not int or top_n < 1):
        raise BadRequest("top_n must be a positive integer")
    with_docs = call.body.get("return_documents", True) is not False
    doc = []
    tokens = 0
    for i, d, s in ranked:
        pair = count_words(query) + count_words(d)
        tokens += pair
        meta = {"id": _id("rerank"), "prompt_tokens": pair, "e2e_latency": 0.0}
        doc.append({"score": s, "document": d if with_docs else None, "index": i, "meta_info": meta})
    return AnswerDraft(doc, tokens=tokens, sequences=len(ranked))


def cohere_rerank(call: Call) -> AnswerDraft | Reply:
    """/v2/rerank: vLLM answers it in its own form (WIRE.md); Cohere bills search units, which are not
    tokens, and its optional `meta.tokens` is left out: the answer has no token count."""
    if call.controls.flavor != "cohere":
        return rerank(call)
    query = _text(_required(call, "query"), "query")
    docs = _texts(_required(call, "documents"), "documents")
    doc = {
        "id": _id("rerank"),
        "results": [{"index": i, "relevance_score": s} for i, _, s in _ranked(call, query, docs)],
        "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}},
    }
    return AnswerDraft(doc, tokens=_pair_words(query, docs), sequences=len(docs))


_SCORE_FIELDS = (("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2"))


def score(call: Call) -> AnswerDraft:
    if call.controls.flavor == "sglang":
        return _sglang_score(call)
    for left_name, right_name in _SCORE_FIELDS:
        if left_name in call.body and right_name in call.body:
            break
    else:
        raise BadRequest("expected one of queries+documents, queries+items, data_1+data_2, text_1+text_2")
    left, right = _texts(call.body[left_name], left_name), _texts(call.body[right_name], right_name)
    if len(left) == 1:
        pairs = [(left[0], r) for r in right]
    elif len(left) == len(right):
        pairs = list(zip(left, right, strict=True))
    else:
        raise BadRequest(f"{left_name!r} must hold one item or as many as {right_name!r}")
    tokens = sum(count_words(q) + count_words(d) for q, d in pairs)
    data = [{"index": i, "object": "score", "score": _score(q, d)} for i, (q, d) in enumerate(_kept(call, pairs))]
    doc = {
        "id": _id("score"),
        "object": "list",
        "created": int(time.time()),
        "model": _model(call),
        "data": data,
        "usage": _usage(tokens),
    }
    return AnswerDraft(doc, tokens=tokens, sequences=len(pairs))


def _sglang_score(call: Call) -> AnswerDraft:
    """SGLang's /v1/score: `query` + `items`, one row per item (one score per label token, or one).

    serving_score.py builds its answer "without usage info": `usage` is null."""
    query = _text(_required(call, "query"), "query")
    items = _texts(_required(call, "items"), "items")
    labels = call.body.get("label_token_ids")
    if labels is not None and (not isinstance(labels, list) or not labels or not all(type(t) is int for t in labels)):
        raise BadRequest("label_token_ids must be a non-empty list of integers")
    width = len(labels) if labels else 1
    tokens = _pair_words(query, items)
    rows = [[_score(query, item, k) for k in range(width)] for item in _kept(call, items)]
    doc = {"scores": rows, "model": _model(call), "usage": None, "object": "scoring"}
    return AnswerDraft(doc, tokens=tokens, sequences=len(items))


def nim_ranking(call: Call) -> AnswerDraft:
    """NIM's /v1/ranking: `{"query": {"text"}, "passages": [{"text"}]}` -> rankings by logit, no usage."""
    query, passages = _required(call, "query"), _required(call, "passages")
    if not isinstance(query, Mapping) or not isinstance(query.get("text"), str):
        raise BadRequest("'query' must be an object with a 'text' string")
    if not isinstance(passages, list) or not passages or not all(isinstance(p, Mapping) for p in passages):
        raise BadRequest("'passages' must be a non-empty list of objects with a 'text' string")
    truncate = call.body.get("truncate", "NONE")
    if truncate not in ("NONE", "START", "END"):
        raise BadRequest("'truncate' must be one of NONE, START, END")
    text, docs = query["text"], [_text(p, "passages") for p in passages]
    ranked = sorted(((i, _score(text, d) * 20 - 10) for i, d in enumerate(docs)), key=lambda r: -r[1])
    doc = {"rankings": [{"index": i, "logit": logit} for i, logit in _kept(call, ranked)]}
    return AnswerDraft(doc, tokens=_pair_words(text, docs), sequences=len(docs))


def _label_scores(prompt: Any) -> list[dict[str, Any]]:
    p = _score(prompt)
    return sorted(({"score": p, "label": LABELS[1]}, {"score": 1 - p, "label": LABELS[0]}), key=lambda r: -r["score"])


def classify(call: Call) -> AnswerDraft:
    _vllm_refused_fields(call)
    prompts = _prompts(_required(call, "input"), "input")
    kept = _kept(call, prompts)
    if call.controls.flavor == "infinity":
        tokens = _infinity_tokens(call, prompts)
        doc = {
            "object": "classify",
            "data": [_label_scores(p) for p in kept],
            "model": _model(call),
            "usage": _usage(tokens),
            "id": _id("infinity"),
            "created": int(time.time()),
        }
        return AnswerDraft(doc, tokens=tokens, sequences=len(prompts))
    tokens = _vllm_tokens(call, [count_prompt(p) for p in prompts])
    data = []
    for i, prompt in enumerate(kept):
        p = _score(prompt)
        data.append({"index": i, "label": LABELS[p >= 0.5], "probs": [1 - p, p], "num_classes": len(LABELS)})
    doc = {
        "id": _id("classify"),
        "object": "list",
        "created": int(time.time()),
        "model": _model(call),
        "data": data,
        "usage": _usage(tokens),
    }
    return AnswerDraft(doc, tokens=tokens, sequences=len(prompts))


def _tei_batch_refused(inputs: int) -> Reply | None:
    """TEI's answer to a batch above its cap (router/src/lib.rs's validation), or None."""
    if inputs <= TEI_MAX_CLIENT_BATCH_SIZE:
        return None
    error = f"batch size {inputs} > maximum allowed batch size {TEI_MAX_CLIENT_BATCH_SIZE}"
    return Reply(422, orjson.dumps({"error": error, "error_type": "Validation"}))


def _tei_refused(call: Call, prompts: list[Any]) -> Reply | None:
    """TEI's answer to a batch above its cap, or to an input above max_input_length that it was asked
    not to truncate (router/src/infer.rs's validation), or None."""
    if (refused := _tei_batch_refused(len(prompts))) is not None:
        return refused
    if call.body.get("truncate") is not False:
        return None
    longest = max((count_prompt(p) for p in prompts), default=0)
    if longest <= TEI_MAX_INPUT_LENGTH:
        return None
    error = f"`inputs` must have less than {TEI_MAX_INPUT_LENGTH} tokens. Given: {longest}"
    return Reply(422, orjson.dumps({"error": error, "error_type": "Validation"}))


def tei_embed(call: Call) -> AnswerDraft | Reply:
    prompts = _prompts(_required(call, "inputs"), "inputs")
    if (refused := _tei_refused(call, prompts)) is not None:
        return refused
    tokens = count_prompts(prompts)
    fragment = orjson.Fragment(vectors.json_floats(_dim(call), _kind(call)))
    headers = _tei_headers(call, tokens, sum(_chars(p) for p in prompts))
    return AnswerDraft([fragment] * len(_kept(call, prompts)), headers=headers, tokens=tokens, sequences=len(prompts))


def _predict_sequence(value: Any) -> list[str]:
    """One /predict sequence: a text, or a pair of texts (router/src/http/types.rs, PredictInput)."""
    if not isinstance(value, list) or not 1 <= len(value) <= 2 or not all(isinstance(v, str) for v in value):
        raise BadRequest("'inputs' must be a string, a pair of strings or a batch of [string] and [string, string]")
    return value


def tei_predict(call: Call) -> AnswerDraft | Reply:
    """TEI answers one input with its labels' scores, and a batch with one such list per input.

    A bare list of strings is one pair, not a batch: a batch is a list of one- or two-text lists."""
    inputs = _required(call, "inputs")
    if isinstance(inputs, str) or (isinstance(inputs, list) and inputs and isinstance(inputs[0], str)):
        sequence = [inputs] if isinstance(inputs, str) else _predict_sequence(inputs)
        sequences = [sequence]
        doc: Any = _kept(call, _label_scores("\x00".join(sequence)))
    else:
        if not isinstance(inputs, list) or not inputs:
            raise BadRequest("'inputs' must not be empty")
        sequences = [_predict_sequence(v) for v in inputs]
        if (refused := _tei_batch_refused(len(sequences))) is not None:
            return refused
        doc = [_label_scores("\x00".join(q)) for q in _kept(call, sequences)]
    texts = [t for q in sequences for t in q]
    tokens = sum(count_words(t) for t in texts)
    headers = _tei_headers(call, tokens, sum(len(t) for t in texts))
    return AnswerDraft(doc, headers=headers, tokens=tokens, sequences=len(sequences))


SPARSE_ENTRIES = 8
"""Non-zero entries per sparse embedding the mock answers (at most; one per word below it)."""


def tei_embed_sparse(call: Call) -> AnswerDraft | Reply:
    prompts = _prompts(_required(call, "inputs"), "inputs")
    if (refused := _tei_refused(call, prompts)) is not None:
        return refused
    tokens = count_prompts(prompts)
    doc = []
    for prompt in _kept(call, prompts):
        seed = zlib.crc32(orjson.dumps(prompt))
        entries = max(1, min(SPARSE_ENTRIES, count_prompt(prompt)))
        doc.append([{"index": (seed + 7919 * k) % 30522, "value": 0.125 * (k + 1)} for k in range(entries)])
    if doc and call.fault == "sparse-bad-index":
        doc[-1][-1]["index"] = -1
    headers = _tei_headers(call, tokens, sum(_chars(p) for p in prompts))
    return AnswerDraft(doc, headers=headers, tokens=tokens, sequences=len(prompts))


def tei_embed_all(call: Call) -> AnswerDraft | Reply:
    """One matrix per input: a row per token of it, all of the model's dimension."""
    prompts = _prompts(_required(call, "inputs"), "inputs")
    if (refused := _tei_refused(call, prompts)) is not None:
        return refused
    counts = [max(1, count_prompt(p)) for p in prompts]
    dim = _dim(call)
    if sum(counts) * dim * 4 > MAX_ANSWER:
        raise BadRequest(f"{sum(counts)} token rows x {dim} is more than the mock's {MAX_ANSWER} byte limit")
    row = orjson.Fragment(vectors.json_floats(dim, _kind(call)))
    tokens = count_prompts(prompts)
    doc = [[row] * n for n in _kept(call, counts)]
    headers = _tei_headers(call, tokens, sum(_chars(p) for p in prompts))
    return AnswerDraft(doc, headers=headers, tokens=tokens, sequences=len(prompts))


def tei_similarity(call: Call) -> AnswerDraft | Reply:
    """`{"inputs": {"source_sentence", "sentences"}}` -> one similarity per sentence."""
    inputs = _required(call, "inputs")
    if not isinstance(inputs, Mapping) or not isinstance(inputs.get("source_sentence"), str):
        raise BadRequest("'inputs' must hold a 'source_sentence' string and a 'sentences' list")
    source = inputs["source_sentence"]
    sentences = inputs.get("sentences")
    if not isinstance(sentences, list) or not sentences or not all(isinstance(t, str) for t in sentences):
        raise BadRequest("'inputs.sentences' must be a non-empty list of strings")
    # TEI's server.rs: "+1 because of the source sentence"
    if (refused := _tei_batch_refused(len(sentences) + 1)) is not None:
        return refused
    # TEI embeds the source sentence once and each sentence once.
    tokens = count_words(source) + sum(count_words(t) for t in sentences)
    doc = [_score(source, t) for t in _kept(call, sentences)]
    headers = _tei_headers(call, tokens, len(source) + sum(len(t) for t in sentences))
    return AnswerDraft(doc, headers=headers, tokens=tokens, sequences=len(sentences))


def tokenize(call: Call) -> Reply:
    prompt = call.body.get("prompt")
    if prompt is None and isinstance(call.body.get("messages"), list):
        count = count_prompts(call.body["messages"])
    elif isinstance(prompt, str) or _is_ids(prompt):
        count = count_prompt(prompt)
    else:
        raise BadRequest("'prompt' must be a string or token ids (or give 'messages')")
    doc = {"count": count, "max_model_len": MAX_MODEL_LEN, "tokens": list(range(1000, 1000 + count))}
    return Reply(200, orjson.dumps(doc))


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


def health(call: Call) -> Reply:
    return Reply(200, b"")


def models(call: Call) -> Reply:
    card = {
        "id": call.config.model,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "poolbench-mock",
        "root": call.config.model,
        "max_model_len": MAX_MODEL_LEN,
    }
    return Reply(200, orjson.dumps({"object": "list", "data": [card]}))


POOLING: Mapping[str, Handler] = {
    "/v1/embeddings": _embedding_route("embedding", "embedding"),
    "/pooling": _embedding_route("pooling", "data"),
    "/v2/embed": cohere_embed,
    "/rerank": rerank,
    "/v1/rerank": rerank,
    "/v2/rerank": cohere_rerank,
    "/score": score,
    "/v1/score": score,
    "/classify": classify,
    "/embeddings": infinity_embeddings,
    "/embed": tei_embed,
    "/predict": tei_predict,
    "/embed_sparse": tei_embed_sparse,
    "/embed_all": tei_embed_all,
    "/similarity": tei_similarity,
    "/v1/ranking": nim_ranking,
    "/api/embed": ollama_routes.embed,
}
"""Routes that are counted in the stats and take faults; all POST with a JSON object body."""

POOLING_PATTERNS: tuple[tuple[re.Pattern[str], Handler], ...] = (*kserve_routes.POOLING_PATTERNS,)
"""Pooling routes whose path names something (KServe's /v2/models/{model}/infer): its named groups are the
call's `params`."""

SERVICE: Mapping[tuple[str, str], Handler] = {
    ("POST", "/tokenize"): tokenize,
    ("GET", "/health"): health,
    ("GET", "/info"): info,
    ("GET", "/v1/models"): models,
    ("GET", "/models"): models,
}


SERVICE_PATTERNS: tuple[tuple[str, re.Pattern[str], Handler], ...] = (*kserve_routes.SERVICE_PATTERNS,)


def pooling_route(path: str) -> tuple[Handler, dict[str, str]] | None:
    """The handler of a pooling route and the parts its path names, or None: not a pooling route."""
    if (handler := POOLING.get(path)) is not None:
        return handler, {}
    for pattern, handler in POOLING_PATTERNS:
        if (match := pattern.fullmatch(path)) is not None:
            return handler, match.groupdict()
    return None


def service_route(method: str, path: str) -> tuple[Handler, dict[str, str]] | None:
    if (handler := SERVICE.get((method, path))) is not None:
        return handler, {}
    for verb, pattern, handler in SERVICE_PATTERNS:
        if verb == method and (match := pattern.fullmatch(path)) is not None:
            return handler, match.groupdict()
    return None


def served_path(path: str) -> bool:
    """Whether some method of a service route answers `path` (another method is then 405, not 404)."""
    return any(p == path for _, p in SERVICE) or any(pattern.fullmatch(path) for _, pattern, _ in SERVICE_PATTERNS)


def render(answer: AnswerDraft | Reply, call: Call, accepts_gzip: bool) -> Reply:
    """Serialise an answer, with the faults that act on its content (see `faults`)."""
    if isinstance(answer, Reply):
        return answer
    fault = call.fault
    if answer.raw is not None:
        headers = dict(answer.headers)
        if (metadata := answer.metadata) is not None:
            if fault == "missing-usage":
                metadata.pop("usage", None)
            elif fault == "metadata-offsets":
                faults.stretch_offsets(metadata)
            headers[METADATA_HEADER] = orjson.dumps(metadata).decode()
        reply = Reply(200, answer.raw, OCTET_STREAM, headers, chunked=True)
    else:
        if fault == "missing-usage":
            faults.strip_usage(answer.doc)
        reply = Reply(200, orjson.dumps(answer.doc), headers=dict(answer.headers))
    reply.tokens, reply.sequences = answer.tokens, answer.sequences
    faults.mangle(reply, fault)
    if answer.raw is None and call.controls.gzip and accepts_gzip and "content-encoding" not in reply.headers:
        reply.body = gzip.compress(reply.body, compresslevel=1, mtime=0)
        reply.headers["content-encoding"] = "gzip"
    return reply
