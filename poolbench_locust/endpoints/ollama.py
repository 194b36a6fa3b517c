"""Ollama's native embedding route (ollama/ollama server/routes.go EmbedHandler, api/types.go; WIRE.md, "Ollama").

Its answer carries its own token count (`prompt_eval_count`) and its own timings in nanoseconds:
`total_duration` from the request's arrival to the answer, `load_duration` until its scheduler had the
model loaded and ready for it. They are shown beside the client's times as the server's own: Server
Queue is `load_duration`, Server Inference the rest of `total_duration`. Go omits a zero field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from poolbench_locust.endpoints.spec import (
    AnswerError,
    Endpoint,
    ParsedAnswer,
    TokenPaths,
    dimensions_field,
    items_of,
    server_duration,
)

OLLAMA_TRUNCATION: Mapping[str, Mapping[str, Any]] = {
    # Ollama's `truncate` (default true) cuts the end; it has no side to choose
    "end": {"truncate": True},
    "none": {"truncate": False},
}


def _embed_answer(doc: Any) -> ParsedAnswer:
    embeddings = items_of(doc, "embeddings")
    total = server_duration(doc.get("total_duration"), "total_duration")
    load = server_duration(doc.get("load_duration"), "load_duration")
    server_ms: dict[str, float] = {}
    if total is not None:
        load = load or 0.0  # omitted when zero
        if load > total:
            raise AnswerError("load_duration is longer than total_duration")
        server_ms = {"server_total_ms": total, "server_queue_ms": load, "server_inference_ms": total - load}
    elif load is not None:
        server_ms = {"server_queue_ms": load}
    return ParsedAnswer(len(embeddings), None, embeddings, server_ms)


OLLAMA_EMBED = Endpoint(
    route="/api/embed",
    shape="texts",
    server="ollama",
    body=lambda x, s: {"model": s.model.strip(), "input": list(x.texts), **dimensions_field(s)},
    answer=_embed_answer,
    tokens=TokenPaths("prompt_eval_count"),  # left out when zero (Go's omitempty): then the client's count
    vectors=True,
    model_required=True,
    truncation=OLLAMA_TRUNCATION,
    cannot_send={"--count-tokens-with-server": "Ollama has no vLLM /tokenize route; count with --tokenizer instead"},
)
