"""Voyage AI's API: /v1/embeddings (`output_dtype`, `output_dimension`, usage only total_tokens, no id) and
/v1/rerank with its results under `data`.
"""

from __future__ import annotations

from functools import partial

from poolbench_locust.mockserver.answers import Ranking
from poolbench_locust.mockserver.calls import AnswerDraft, BadRequest, Call, dim, kept, model, per_input
from poolbench_locust.mockserver.packed import VOYAGE_TYPES, embeddings_of, json_vector, types_asked
from poolbench_locust.wire import count_prompts


def embeddings(call: Call) -> AnswerDraft:
    """Voyage's /v1/embeddings: `output_dtype`, `output_dimension`, usage only total_tokens, no id.

    It also takes what an OpenAI-form client sends (`dimensions`, `encoding_format` float or base64)."""
    texts = call.body.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise BadRequest("'input' must be a string or a non-empty list of strings")
    if call.body.get("input_type") not in (None, "query", "document"):
        raise BadRequest("input_type must be query, document or null")
    if not isinstance(call.body.get("truncation", True), bool):
        raise BadRequest("truncation must be a boolean")
    size = dim(call, "output_dimension") if "output_dimension" in call.body else dim(call)
    (name,) = types_asked(call, VOYAGE_TYPES, size, "output_dtype")
    encoding = call.body.get("encoding_format") or "float"
    if encoding not in ("float", "base64") or (encoding == "base64" and name != "float"):
        raise BadRequest("encoding_format must be null or base64 (of float embeddings)")
    written = partial(json_vector, size, "base64" if encoding == "base64" else name)
    answered = embeddings_of(call, per_input(call, kept(call, texts), written), name)
    data = [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(answered)]
    tokens = count_prompts(texts)
    doc = {"object": "list", "data": data, "model": model(call), "usage": {"total_tokens": tokens}}
    return AnswerDraft(doc, tokens=tokens, sequences=len(texts))


def rerank(call: Call, ranking: Ranking) -> AnswerDraft:
    """/v1/rerank in Voyage's form: the results under `data`, usage only total_tokens."""
    data = [{"relevance_score": s, "index": i} for i, _, s in ranking.ranked]
    doc = {"object": "list", "data": data, "model": model(call), "usage": {"total_tokens": ranking.tokens}}
    return AnswerDraft(doc, tokens=ranking.tokens, sequences=len(ranking.docs))
