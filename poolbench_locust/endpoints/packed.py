"""Packed embeddings on the wire (--embedding-type): which server answers which type, the request fields
that ask for one, and Cohere's answer read under the type asked for. engine/packed.py checks the answers.

Read from the servers' own source (WIRE.md): vLLM 0.34's /v2/embed offers float, binary, ubinary and
base64 (little-endian float32), and refuses int8 and uint8; Cohere's API offers all six to its embed v3+
models; Voyage's `output_dtype` float, int8, uint8, binary, ubinary; Infinity 0.0.78 answers in the
--embedding-dtype it was started with (float32, int8, uint8, binary, ubinary), whatever the request says.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from poolbench_locust.endpoints.spec import COHERE_IMAGE_TOKENS, AnswerError, Endpoint, ParsedAnswer, ServerAsk
from poolbench_locust.lazyjson import ARRAY
from poolbench_locust.options import Settings
from poolbench_locust.wire import BIT_PACKED, cohere_needs_input_type

VLLM_V2_EMBED_TYPES = frozenset({"float", "binary", "ubinary", "base64"})
"""vLLM 0.34's CohereEmbeddingType: int8 and uint8 are refused (400)."""
COHERE_TYPES = frozenset({"float", "int8", "uint8", "binary", "ubinary", "base64"})
"""Cohere's API, for its embed v3.0 and newer models."""
VOYAGE_TYPES = frozenset({"float", "int8", "uint8", "binary", "ubinary"})
"""Voyage's output_dtype."""
INFINITY_TYPES = frozenset({"float", "int8", "uint8", "binary", "ubinary"})
"""Infinity's --embedding-dtype (float being its float32): what the server was started with."""


def cohere_types(model: str) -> frozenset[str]:
    """What a /v2/embed server answers for --model: Cohere's API its six types to its embed v3+ models (the
    models whose name says so, as for input_type), vLLM's /v2/embed four to any other model it serves."""
    return COHERE_TYPES if cohere_needs_input_type(model) else VLLM_V2_EMBED_TYPES


def embedding_types_field(settings: Settings) -> dict[str, list[str]]:
    """Cohere's `embedding_types`: the one type asked for, float when none is."""
    return {"embedding_types": [settings.embedding_type or "float"]}


def cohere_answer(kind: str) -> Callable[[Any], ParsedAnswer]:
    """Reader of a /v2/embed answer's `embeddings.<kind>` list (one embedding per input) and of the image
    tokens Cohere bills beside its input tokens."""
    where = f"embeddings.{kind}"

    def read(doc: Any) -> ParsedAnswer:
        embeddings = doc.get("embeddings") if isinstance(doc, Mapping) else None
        vectors = embeddings.get(kind) if isinstance(embeddings, Mapping) else None
        if not isinstance(vectors, ARRAY):
            raise AnswerError(f"answer has no {where!r} list")
        return ParsedAnswer(len(vectors), None, vectors, image_tokens=COHERE_IMAGE_TOKENS.read(doc))

    return read


def settle_cohere(endpoint: Endpoint, settings: Settings, _ask: ServerAsk | None) -> Endpoint:
    """The /v2/embed endpoint reading its answers under the type asked for (float: as declared)."""
    kind = settings.embedding_type or "float"
    return endpoint if kind == "float" else dataclasses.replace(endpoint, answer=cohere_answer(kind))


def infinity_dimensions_field(settings: Settings) -> dict[str, int]:
    """Infinity's `dimensions`: it cuts the answer after packing it (batch_handler's matryoshka slice of the
    packed bytes), so a binary server is asked for --dimensions / 8 bytes, which hold the first --dimensions
    dimensions, as every other server answers them. A bigger value is refused (400: 'not in a valid range')."""
    dims = settings.dimensions
    if not dims:
        return {}
    return {"dimensions": dims // 8 if settings.embedding_type in BIT_PACKED else dims}


def voyage_fields(settings: Settings) -> dict[str, Any]:
    """Voyage's `output_dtype` and `output_dimension`, each only when asked for."""
    fields: dict[str, Any] = {}
    if settings.embedding_type is not None:
        fields["output_dtype"] = settings.embedding_type
    if settings.dimensions:
        fields["output_dimension"] = settings.dimensions
    return fields
