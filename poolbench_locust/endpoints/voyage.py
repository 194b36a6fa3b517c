"""Voyage's embeddings route (its API reference; WIRE.md, "Voyage"). Its rerank is RerankUser's /v1/rerank."""

from __future__ import annotations

from poolbench_locust.endpoints import packed
from poolbench_locust.endpoints.spec import Endpoint, data_answer, model_field

VOYAGE_EMBEDDINGS = Endpoint(
    route="/v1/embeddings",
    shape="texts",
    server="voyage",
    # No encoding_format: Voyage's JSON lists hold floats or, with output_dtype, whole numbers.
    body=lambda x, s: {**model_field(s), "input": list(x.texts), **packed.voyage_fields(s)},
    answer=data_answer("embedding"),  # usage holds only total_tokens, which USAGE_TOKENS reads
    vectors=True,
    embedding_types=packed.VOYAGE_TYPES,
    # truncation: true (its default) cuts at the model's context length; false refuses a longer text
    truncation={"end": {"truncation": True}, "none": {"truncation": False}},
    input_types=("query", "document"),
    model_required=True,  # Voyage's request names its model: there is no default
)
