"""Cohere's v2 API: /v2/embed as vLLM answers it or (flavor `cohere`) as Cohere does, and /v2/rerank in
Cohere's form (flavor `cohere`; vLLM answers /v2/rerank as its /rerank).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from poolbench_locust.mockserver import image_inputs, packed
from poolbench_locust.mockserver.answers import new_id, pair_words, ranked, text, texts
from poolbench_locust.mockserver.calls import AnswerDraft, BadRequest, Call, kept, model, required
from poolbench_locust.mockserver.reply import Reply
from poolbench_locust.wire import COHERE_INPUT_TYPES, COHERE_NO_INPUT_TYPE, cohere_needs_input_type, count_prompts


def embed(call: Call) -> AnswerDraft | Reply:
    """/v2/embed as vLLM answers it, or (cohere flavor) as Cohere's API does."""
    inputs = call.body.get("texts") or call.body.get("inputs") or call.body.get("images")
    if not isinstance(inputs, list) or not inputs or not all(isinstance(t, str | Mapping) for t in inputs):
        raise BadRequest("'texts' (or 'inputs', or 'images') must be a non-empty list")
    seen = image_inputs.Seen()
    answered = kept(call, inputs)  # before images are counted as empty texts: --cache-drift tells them apart
    if "images" in call.body and "texts" not in call.body and "inputs" not in call.body:
        for i, url in enumerate(inputs):
            seen.add(url, f"images[{i}]")
        inputs = [""] * len(inputs)  # no text to count
    for i, item in enumerate(inputs):
        if isinstance(item, Mapping):  # an input of content parts: text and images
            seen.parts(item.get("content"), f"inputs[{i}]")
    if call.body.get("truncate", "END") not in ("NONE", "START", "END"):
        raise BadRequest("truncate: Input should be 'NONE', 'START' or 'END'")
    input_type = call.body.get("input_type")
    if input_type is not None and input_type not in COHERE_INPUT_TYPES:
        raise BadRequest(f"Unsupported input_type {input_type!r}. Supported values: {', '.join(COHERE_INPUT_TYPES)}")
    if call.controls.flavor == "cohere" and input_type is None and cohere_needs_input_type(model(call)):
        return Reply(400, orjson.dumps({"message": COHERE_NO_INPUT_TYPE}))
    tokens = count_prompts(inputs)
    embeddings = packed.cohere_embeddings(call, answered)  # by embedding_types
    doc: dict[str, Any] = {
        "id": new_id("embed"),
        "embeddings": embeddings,
        "texts": [t for t in inputs if isinstance(t, str) and t],
        "meta": {"api_version": {"version": "2"}, "billed_units": {"input_tokens": tokens}},
    }
    if call.controls.flavor == "cohere" and seen.images:  # Cohere bills image tokens apart
        doc["meta"]["billed_units"]["image_tokens"] = seen.tokens()
    return AnswerDraft(doc, tokens=tokens, sequences=len(inputs))


def rerank(call: Call) -> AnswerDraft:
    """/v2/rerank in Cohere's form: Cohere bills search units, which are not tokens, and its optional
    `meta.tokens` is left out: the answer has no token count."""
    query = text(required(call, "query"), "query")
    docs = texts(required(call, "documents"), "documents")
    doc = {
        "id": new_id("rerank"),
        "results": [{"index": i, "relevance_score": s} for i, _, s in ranked(call, query, docs)],
        "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}},
    }
    return AnswerDraft(doc, tokens=pair_words(query, docs), sequences=len(docs))
