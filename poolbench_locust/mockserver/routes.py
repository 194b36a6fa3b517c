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

from poolbench_locust.mockserver import faults, kserve_routes, ollama_routes, vectors
from poolbench_locust.mockserver.calls import AnswerDraft, BadRequest, Call, Handler
from poolbench_locust.mockserver.calls import dim as _dim
from poolbench_locust.mockserver.calls import kept as _kept
from poolbench_locust.mockserver.calls import kind as _kind
from poolbench_locust.mockserver.calls import model as _model
from poolbench_locust.mockserver.calls import required as _required
from poolbench_locust.mockserver.reply import Reply, error_reply
from poolbench_locust.wire import (
    BINARY_ENCODINGS,
    DTYPE_SIZES,
    ENCODINGS,
    ENDIANNESS,
    METADATA_HEADER,
    OCTET_STREAM,
    TEI_TOKENS_HEADER,
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
    if not isinstance(value, str):
        raise BadRequest(f"{name!r} must hold strings")
    return value


def _texts(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise BadRequest(f"{name!r} must be a string or a list of strings")
    return [_text(v, name) for v in value]


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
    doc = {**head, "object": "list", "data": data, "usage": _usage(tokens)}
    return AnswerDraft(doc, tokens=tokens, sequences=len(prompts))


def _embedding_route(item: str, key: str) -> Handler:
    def handle(call: Call) -> AnswerDraft:
        if "input" not in call.body and "messages" in call.body:
            messages = call.body["messages"]
            if not isinstance(messages, list) or not messages or not all(isinstance(m, Mapping) for m in messages):
                raise BadRequest("'messages' must be a non-empty list of chat messages")
            # A conversation is one sequence: one embedding for all its messages.
            return _embed(call, [messages], count_prompts(messages), item, key, ENCODINGS)
        prompts = _prompts(_required(call, "input"), "input")
        return _embed(call, prompts, count_prompts(prompts), item, key, ENCODINGS)

    return handle


def infinity_embeddings(call: Call) -> AnswerDraft:
    prompts = _prompts(_required(call, "input"), "input")
    return _embed(call, prompts, _infinity_tokens(call, prompts), "embedding", "embedding", ("float", "base64"))


def cohere_embed(call: Call) -> AnswerDraft:
    texts = call.body.get("texts") or call.body.get("inputs")
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str | Mapping) for t in texts):
        raise BadRequest("'texts' (or 'inputs') must be a non-empty list")
    types = call.body.get("embedding_types") or ["float"]
    if not isinstance(types, list) or not set(types) <= {"float", "base64"}:
        raise BadRequest("embedding_types: the mock serves 'float' and 'base64'")
    dim, kind, tokens = _dim(call, "output_dimension"), _kind(call), count_prompts(texts)
    kept = len(_kept(call, texts))
    embeddings: dict[str, list[Any]] = {}
    for name in types:
        floats = name == "float"
        text = vectors.json_floats(dim, kind) if floats else vectors.json_base64(dim, "float32", "little", kind)
        embeddings[name] = [orjson.Fragment(text)] * kept
    doc = {
        "id": _id("embed"),
        "embeddings": embeddings,
        "texts": [t for t in texts if isinstance(t, str)],
        "meta": {"api_version": {"version": "2"}, "billed_units": {"input_tokens": tokens}},
    }
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
    """/rerank and /v1/rerank: vLLM's form, or TEI's (a `texts` body or tei flavor), or Infinity's."""
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


def cohere_rerank(call: Call) -> AnswerDraft:
    query = _text(_required(call, "query"), "query")
    docs = _texts(_required(call, "documents"), "documents")
    tokens = _pair_words(query, docs)
    doc = {
        "id": _id("rerank"),
        "results": [{"index": i, "relevance_score": s} for i, _, s in _ranked(call, query, docs)],
        "meta": {"billed_units": {"search_units": 1}, "tokens": {"input_tokens": tokens}},
    }
    return AnswerDraft(doc, tokens=tokens, sequences=len(docs))


_SCORE_FIELDS = (("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2"))


def score(call: Call) -> AnswerDraft:
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


def _label_scores(prompt: Any) -> list[dict[str, Any]]:
    p = _score(prompt)
    return sorted(({"score": p, "label": LABELS[1]}, {"score": 1 - p, "label": LABELS[0]}), key=lambda r: -r["score"])


def classify(call: Call) -> AnswerDraft:
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
    tokens = count_prompts(prompts)
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


def tei_embed(call: Call) -> AnswerDraft | Reply:
    prompts = _prompts(_required(call, "inputs"), "inputs")
    if (refused := _tei_batch_refused(len(prompts))) is not None:
        return refused
    tokens = count_prompts(prompts)
    fragment = orjson.Fragment(vectors.json_floats(_dim(call), _kind(call)))
    headers = _tei_headers(call, tokens, sum(_chars(p) for p in prompts))
    return AnswerDraft([fragment] * len(_kept(call, prompts)), headers=headers, tokens=tokens, sequences=len(prompts))


def tei_predict(call: Call) -> AnswerDraft:
    """TEI answers one input with its labels' scores, and a batch with one such list per input."""
    inputs = _required(call, "inputs")
    prompts = _texts(inputs, "inputs")
    tokens = count_prompts(prompts)
    if isinstance(inputs, str):
        doc: Any = _kept(call, _label_scores(inputs))
    else:
        doc = [_label_scores(p) for p in _kept(call, prompts)]
    headers = _tei_headers(call, tokens, sum(len(p) for p in prompts))
    return AnswerDraft(doc, headers=headers, tokens=tokens, sequences=len(prompts))


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
