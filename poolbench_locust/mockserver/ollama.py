"""Ollama's POST /api/embed, as ollama/ollama's server/routes.go EmbedHandler answers it (WIRE.md, "Ollama").

Its errors are `{"error": str}`; a request without a model is 404 "model '' not found" (the model reference
is checked before anything else); Go leaves out a zero duration or count (`omitempty`).
"""

from __future__ import annotations

import orjson

from poolbench_locust.mockserver import vectors
from poolbench_locust.mockserver.calls import AnswerDraft, Call, kept, per_input
from poolbench_locust.mockserver.reply import Reply
from poolbench_locust.wire import count_words

CONTEXT_LENGTH = 8192
"""The mock model's context, in words (the mock's tokens)."""


def _error(status: int, message: str) -> Reply:
    return Reply(status, orjson.dumps({"error": message}))


def _no_zero(doc: dict[str, object]) -> dict[str, object]:
    """Go's `omitempty`: a zero duration or count is not written."""
    return {k: v for k, v in doc.items() if v != 0 or k in ("model", "embeddings")}


def embed(call: Call) -> AnswerDraft | Reply:
    model = call.body.get("model", "")
    if not isinstance(model, str):
        return _error(400, "json: cannot unmarshal into Go struct field EmbedRequest.model of type string")
    if not model.strip():
        return _error(404, f"model '{model}' not found")
    value = call.body.get("input")
    if isinstance(value, str):
        texts = [value] if value else []
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        texts = value
    elif value is None:
        texts = []
    else:
        return _error(400, "invalid input type")
    truncate = call.body.get("truncate")
    if truncate is not None and not isinstance(truncate, bool):
        return _error(400, "json: cannot unmarshal into Go struct field EmbedRequest.truncate of type bool")
    dimensions = call.body.get("dimensions", 0)
    if isinstance(dimensions, bool) or not isinstance(dimensions, int):
        return _error(400, "json: cannot unmarshal into Go struct field EmbedRequest.dimensions of type int")
    if not texts:
        return AnswerDraft({"model": model, "embeddings": []})
    words = [count_words(t) for t in texts]
    if truncate is False and max(words) > CONTEXT_LENGTH:
        return _error(400, "the input length exceeds the context length")
    tokens = sum(min(w, CONTEXT_LENGTH) for w in words)
    dim = dimensions if 0 < dimensions < call.controls.dim else call.controls.dim  # larger: the model's own
    # The mock does no compute: its whole server-side time is the injected wait before the headers, which
    # it reports as the time until the model was ready for the request (as its TEI form reports queueing).
    wait_ns = round(call.controls.ttfb_ms * 1_000_000)
    doc = {
        "model": model,
        "embeddings": per_input(call, kept(call, texts), lambda k: orjson.Fragment(vectors.json_floats(dim, k))),
        "total_duration": wait_ns,
        "load_duration": wait_ns,
        "prompt_eval_count": tokens,
    }
    return AnswerDraft(_no_zero(doc), tokens=tokens, sequences=len(texts))
