"""Infinity's routes: /embeddings (text or images, float or its packed
--embedding-dtype), and /rerank and /classify in Infinity's form; its usage counts characters unless it was
started to count tokens.
"""

from __future__ import annotations

import time
from typing import Any

from poolbench_locust.mockserver import image_inputs, packed
from poolbench_locust.mockserver.answers import Ranking, chars, embed, label_scores, new_id, prompts, usage
from poolbench_locust.mockserver.calls import AnswerDraft, BadRequest, Call, drifting, kept, model, required
from poolbench_locust.mockserver.reply import Reply
from poolbench_locust.wire import count_prompts


def _tokens(call: Call, inputs: list[Any]) -> int:
    """Infinity's usage counts characters unless it was started to count tokens."""
    if call.config.infinity_usage == "tokens":
        return count_prompts(inputs)
    return sum(chars(p) for p in inputs)


def embeddings(call: Call) -> AnswerDraft | Reply:
    inputs = prompts(required(call, "input"), "input")
    modality = call.body.get("modality", "text")
    if modality == "image":  # each input an image URL or data URI, decoded; its usage: one per image
        for i, url in enumerate(inputs):
            image_inputs.image(url, f"input[{i}]")
        tokens = len(inputs)
    elif modality != "text":
        raise BadRequest(f"modality {str(modality)[:20]!r} is not served by the mock: text or image")
    else:
        tokens = _tokens(call, inputs)
    if call.config.infinity_dtype != "float32":  # started with a packed --embedding-dtype
        return packed.infinity_embeddings(call, inputs, tokens)
    return embed(call, inputs, tokens, "embedding", "embedding", ("float", "base64"))


def rerank(call: Call, ranking: Ranking) -> AnswerDraft:
    query, docs, tokens = ranking.query, ranking.docs, ranking.tokens
    if call.config.infinity_usage == "chars":
        tokens = sum(len(query) + len(d) for d in docs)
    with_docs = bool(call.body.get("return_documents"))
    # Infinity 0.0.78 writes the key either way: `"document": null` when the documents were not asked back
    results = [{"relevance_score": s, "index": i, "document": d if with_docs else None} for i, d, s in ranking.ranked]
    doc = {
        "object": "rerank",
        "results": results,
        "model": model(call),
        "usage": usage(tokens),
        "id": new_id("infinity"),
        "created": int(time.time()),
    }
    return AnswerDraft(doc, tokens=tokens, sequences=len(docs))


def classify(call: Call) -> AnswerDraft:
    inputs = prompts(required(call, "input"), "input")
    tokens = _tokens(call, inputs)
    answered = kept(call, inputs)
    doc = {
        "object": "classify",
        "data": [label_scores(p, d) for p, d in zip(answered, drifting(call, answered), strict=True)],
        "model": model(call),
        "usage": usage(tokens),
        "id": new_id("infinity"),
        "created": int(time.time()),
    }
    return AnswerDraft(doc, tokens=tokens, sequences=len(inputs))
