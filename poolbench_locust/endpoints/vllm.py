"""vLLM's pooling routes (WIRE.md, "vLLM pooling routes"), including its Cohere-style /v2 routes."""

from __future__ import annotations

from typing import Any

from poolbench_locust.endpoints import image_parts, packed, vllm_bytes
from poolbench_locust.endpoints.spec import (
    COHERE_TOKENS,
    NAMED_TRUNCATION,
    RERANK_TOKENS,
    VLLM_TRUNCATION,
    Endpoint,
    Inputs,
    ParsedAnswer,
    data_answer,
    dimensions_field,
    item_values,
    items_of,
    model_field,
    probability_values,
    results_answer,
)
from poolbench_locust.options import Settings
from poolbench_locust.wire import COHERE_INPUT_TYPES, ENCODINGS, cohere_needs_input_type


def _encoding_fields(settings: Settings) -> dict[str, Any]:
    fields: dict[str, Any] = {"encoding_format": settings.encoding_format}
    if settings.encoding_format != "float":
        fields["embed_dtype"] = settings.embed_dtype
        fields["endianness"] = settings.endianness
    return fields | dimensions_field(settings)


OPENAI_INPUT_TYPES = ("query", "passage", "document")
"""The input_type of /v1/embeddings on the servers that take one: NIM (query, passage), Voyage (query,
document). vLLM's /v1/embeddings ignores it."""


def _input_body(inputs: Inputs, settings: Settings) -> dict[str, Any]:
    """The body /v1/embeddings and /pooling share."""
    fields = {**_encoding_fields(settings), **_late_chunking(settings)}
    return {**model_field(settings), "input": list(inputs.texts), **fields}


def _late_chunking(settings: Settings) -> dict[str, Any]:
    """A token_embed model's late chunking: one row per chunk of chunk_size tokens instead of one per token."""
    return {"late_chunking_params": {"chunk_size": settings.late_chunk_size}} if settings.late_chunk_size else {}


def _chat_body(inputs: Inputs, settings: Settings) -> dict[str, Any]:
    """The chat form of /v1/embeddings and /pooling: one conversation, its images as content parts."""
    return {**model_field(settings), "messages": _messages(inputs), **_encoding_fields(settings)}


def _messages(inputs: Inputs) -> list[Any]:
    """`messages`: one conversation, or a batch's list of conversations (vLLM 0.34: one embedding each),
    each with its images beside its last user message."""
    if not inputs.conversations:
        return image_parts.chat_messages(inputs)
    return [
        image_parts.with_images(list(conversation), image_parts.images_of(inputs, i))
        for i, conversation in enumerate(inputs.conversations)
    ]


def _pooling_body(inputs: Inputs, settings: Settings) -> dict[str, Any]:
    """/pooling takes images only in its chat form (`messages`): one conversation, one vector. It names its
    task only when --pooling-task gives one: vLLM's default is the model's own."""
    task = {"task": settings.pooling_task} if settings.pooling_task else {}
    return {**(_chat_body(inputs, settings) if inputs.images else _input_body(inputs, settings)), **task}


EMBEDDINGS = Endpoint(
    route="/v1/embeddings",
    shape="texts",
    body=_input_body,
    answer=data_answer("embedding"),
    encodings=frozenset(ENCODINGS),
    forms=vllm_bytes.forms,
    vectors=True,
    truncation=VLLM_TRUNCATION,
    input_types=OPENAI_INPUT_TYPES,
    # A token_embed model's /v1/embeddings is another router: float only, no dimensions (WIRE.md).
    pooling_tasks=frozenset({"token_embed"}),
    token_encodings=frozenset({"float"}),
)


EMBEDDINGS_CHAT = Endpoint(
    route="/v1/embeddings",
    shape="chat",
    body=_chat_body,
    answer=data_answer("embedding"),
    encodings=frozenset(ENCODINGS),
    forms=vllm_bytes.forms,
    vectors=True,
    truncation=VLLM_TRUNCATION,
    images="parts",
)

POOLING = Endpoint(
    route="/pooling",
    shape="texts",
    body=_pooling_body,
    answer=data_answer("data"),
    encodings=frozenset(ENCODINGS),
    forms=vllm_bytes.forms,
    vectors=True,
    truncation=VLLM_TRUNCATION,
    # embed&token_classify is answered only through an IO processor plugin (wire.EMBED_AND_TOKEN_CLASSIFY_REFUSED).
    pooling_tasks=frozenset({"embed", "classify", "token_embed", "token_classify"}),
    token_encodings=frozenset(ENCODINGS),
    images="chat",
    cannot_send={
        "--dimensions": "vLLM's /pooling refuses it (400 'dimensions is currently not supported'); "
        "use EmbeddingsUser for Matryoshka dimensions",
    },
)

RERANK = Endpoint(
    route="/rerank",
    shape="pairs",
    body=lambda x, s: {**model_field(s), "query": x.query, "documents": image_parts.vllm_documents(x)},
    answer=results_answer,
    tokens=RERANK_TOKENS,
    images="parts",
    routes=("/v1/rerank", "/v2/rerank"),
    truncation=VLLM_TRUNCATION,
)

# text_1/text_2 is the form every vLLM release with /score accepts.
SCORE = Endpoint(
    route="/score",
    shape="pairs",
    body=lambda x, s: {**model_field(s), "text_1": x.query, "text_2": image_parts.vllm_documents(x)},
    answer=data_answer(None),
    images="parts",
    routes=("/v1/score",),
    truncation=VLLM_TRUNCATION,
)


def _classify_answer(doc: Any) -> ParsedAnswer:
    """`{"data": [{"index", "label", "probs", "num_classes"}], "usage"}`: one item per input, in order."""
    data = items_of(doc, "data")
    return ParsedAnswer(len(data), values=item_values(data, probability_values, "data"))


CLASSIFY = Endpoint(
    route="/classify",
    shape="texts",
    body=lambda x, s: {**model_field(s), "input": list(x.texts)},
    answer=_classify_answer,
    compared_as="labels",
    truncation=VLLM_TRUNCATION,
)

COHERE_EMBED = Endpoint(
    route="/v2/embed",
    shape="texts",
    body=lambda x, s: {
        **model_field(s),
        # input_type only with --input-type: vLLM refuses every one (400) for a model that defines no task
        # instructions, and Cohere's own API every request without one for its v3+ models.
        **({"inputs": image_parts.cohere_inputs(x)} if x.images else {"texts": list(x.texts)}),
        **packed.embedding_types_field(s),
        **dimensions_field(s, "output_dimension"),
    },
    answer=packed.cohere_answer("float"),
    tokens=COHERE_TOKENS,
    vectors=True,
    images="parts",
    truncation=NAMED_TRUNCATION,  # vLLM's /v2/embed too: truncate NONE, START or END (its default)
    input_types=COHERE_INPUT_TYPES,
    input_type_required=cohere_needs_input_type,
    embedding_types=packed.cohere_types,
    settle=packed.settle_cohere,  # reads embeddings.<--embedding-type>
)
