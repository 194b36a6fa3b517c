"""vLLM's pooling routes (WIRE.md, "vLLM pooling routes"), including its Cohere-style /v2 routes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from poolbench_locust.endpoints.spec import (
    COHERE_TOKENS,
    RERANK_TOKENS,
    AnswerError,
    Endpoint,
    Inputs,
    ParsedAnswer,
    data_answer,
    dimensions_field,
    model_field,
    results_answer,
)
from poolbench_locust.lazyjson import ARRAY
from poolbench_locust.options import Settings
from poolbench_locust.wire import ENCODINGS


def _encoding_fields(settings: Settings) -> dict[str, Any]:
    fields: dict[str, Any] = {"encoding_format": settings.encoding_format}
    if settings.encoding_format != "float":
        fields["embed_dtype"] = settings.embed_dtype
        fields["endianness"] = settings.endianness
    return fields | dimensions_field(settings)


def _cohere_embed_answer(doc: Any) -> ParsedAnswer:
    embeddings = doc.get("embeddings") if isinstance(doc, Mapping) else None
    floats = embeddings.get("float") if isinstance(embeddings, Mapping) else None
    if not isinstance(floats, ARRAY):
        raise AnswerError("answer has no 'embeddings.float' list")
    return ParsedAnswer(len(floats), None, floats)


def _input_body(inputs: Inputs, settings: Settings) -> dict[str, Any]:
    """The body /v1/embeddings and /pooling share."""
    return {**model_field(settings), "input": list(inputs.texts), **_encoding_fields(settings)}


EMBEDDINGS = Endpoint(
    route="/v1/embeddings",
    shape="texts",
    body=_input_body,
    answer=data_answer("embedding"),
    encodings=frozenset(ENCODINGS),
    vectors=True,
)

EMBEDDINGS_CHAT = Endpoint(
    route="/v1/embeddings",
    shape="chat",
    body=lambda x, s: {
        **model_field(s),
        "messages": list(x.messages) or [{"role": "user", "content": text} for text in x.texts],
        **_encoding_fields(s),
    },
    answer=data_answer("embedding"),
    encodings=frozenset(ENCODINGS),
    vectors=True,
)

POOLING = Endpoint(
    route="/pooling",
    shape="texts",
    body=_input_body,
    answer=data_answer("data"),
    encodings=frozenset(ENCODINGS),
    vectors=True,
)

RERANK = Endpoint(
    route="/rerank",
    shape="pairs",
    body=lambda x, s: {**model_field(s), "query": x.query, "documents": list(x.texts)},
    answer=results_answer,
    tokens=RERANK_TOKENS,
    routes=("/v1/rerank", "/v2/rerank"),
)

# text_1/text_2 is the form every vLLM release with /score accepts.
SCORE = Endpoint(
    route="/score",
    shape="pairs",
    body=lambda x, s: {**model_field(s), "text_1": x.query, "text_2": list(x.texts)},
    answer=data_answer(None),
    routes=("/v1/score",),
)

CLASSIFY = Endpoint(
    route="/classify",
    shape="texts",
    body=lambda x, s: {**model_field(s), "input": list(x.texts)},
    answer=data_answer(None),
)

COHERE_EMBED = Endpoint(
    route="/v2/embed",
    shape="texts",
    body=lambda x, s: {
        **model_field(s),
        # No input_type: vLLM rejects every one (400) for a model that defines no task instructions,
        # and leaving it out is valid for every model.
        "texts": list(x.texts),
        "embedding_types": ["float"],
        **dimensions_field(s, "output_dimension"),
    },
    answer=_cohere_embed_answer,
    tokens=COHERE_TOKENS,
    vectors=True,
)
