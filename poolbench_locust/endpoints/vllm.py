"""vLLM's pooling routes (WIRE.md, "vLLM pooling routes"), including its Cohere-style /v2 routes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from poolbench_locust.endpoints.spec import (
    COHERE_TOKENS,
    NAMED_TRUNCATION,
    RERANK_TOKENS,
    VLLM_TRUNCATION,
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
from poolbench_locust.wire import COHERE_INPUT_TYPES, ENCODINGS, cohere_needs_input_type


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


OPENAI_INPUT_TYPES = ("query", "passage", "document")
"""The input_type of /v1/embeddings on the servers that take one: NIM (query, passage), Voyage (query,
document). vLLM's /v1/embeddings ignores it."""


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
    truncation=VLLM_TRUNCATION,
    input_types=OPENAI_INPUT_TYPES,
)


def chat_messages(inputs: Inputs) -> list[Any]:
    """`messages`: one conversation, or a batch's list of conversations (vLLM 0.34: one embedding each)."""
    if inputs.conversations:
        return [list(conversation) for conversation in inputs.conversations]
    return list(inputs.messages) or [{"role": "user", "content": text} for text in inputs.texts]


EMBEDDINGS_CHAT = Endpoint(
    route="/v1/embeddings",
    shape="chat",
    body=lambda x, s: {**model_field(s), "messages": chat_messages(x), **_encoding_fields(s)},
    answer=data_answer("embedding"),
    encodings=frozenset(ENCODINGS),
    vectors=True,
    truncation=VLLM_TRUNCATION,
)

POOLING = Endpoint(
    route="/pooling",
    shape="texts",
    body=_input_body,
    answer=data_answer("data"),
    encodings=frozenset(ENCODINGS),
    vectors=True,
    truncation=VLLM_TRUNCATION,
    cannot_send={
        "--dimensions": "vLLM's /pooling refuses it (400 'dimensions is currently not supported'); "
        "use EmbeddingsUser for Matryoshka dimensions",
    },
)

RERANK = Endpoint(
    route="/rerank",
    shape="pairs",
    body=lambda x, s: {**model_field(s), "query": x.query, "documents": list(x.texts)},
    answer=results_answer,
    tokens=RERANK_TOKENS,
    routes=("/v1/rerank", "/v2/rerank"),
    truncation=VLLM_TRUNCATION,
)

# text_1/text_2 is the form every vLLM release with /score accepts.
SCORE = Endpoint(
    route="/score",
    shape="pairs",
    body=lambda x, s: {**model_field(s), "text_1": x.query, "text_2": list(x.texts)},
    answer=data_answer(None),
    routes=("/v1/score",),
    truncation=VLLM_TRUNCATION,
)

CLASSIFY = Endpoint(
    route="/classify",
    shape="texts",
    body=lambda x, s: {**model_field(s), "input": list(x.texts)},
    answer=data_answer(None),
    truncation=VLLM_TRUNCATION,
)

COHERE_EMBED = Endpoint(
    route="/v2/embed",
    shape="texts",
    body=lambda x, s: {
        **model_field(s),
        # input_type only with --input-type: vLLM refuses every one (400) for a model that defines no task
        # instructions, and Cohere's own API every request without one for its v3+ models.
        "texts": list(x.texts),
        "embedding_types": ["float"],
        **dimensions_field(s, "output_dimension"),
    },
    answer=_cohere_embed_answer,
    tokens=COHERE_TOKENS,
    vectors=True,
    truncation=NAMED_TRUNCATION,  # vLLM's /v2/embed too: truncate NONE, START or END (its default)
    input_types=COHERE_INPUT_TYPES,
    input_type_required=cohere_needs_input_type,
)
