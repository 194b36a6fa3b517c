"""Facts of the wire formats (see WIRE.md), shared by the client and the bundled mock server.

Kept in one place so that the mock server and the parsers cannot drift apart on what a
dtype weighs or how the documented client-side token rule counts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

ENCODINGS: Final = ("float", "base64", "bytes", "bytes_only")
BINARY_ENCODINGS: Final = frozenset({"bytes", "bytes_only"})

DTYPE_SIZES: Final[Mapping[str, int]] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}
ENDIANNESS: Final = ("native", "big", "little")

POOLING_TASKS: Final = ("embed", "classify", "token_embed", "token_classify", "embed&token_classify")
"""vLLM 0.34's /pooling `task` values a load can send (`plugin` takes another body; `score`/`encode` are refused)."""
TOKEN_POOLING_TASKS: Final = ("token_embed", "token_classify")
"""The tasks whose answer holds one row per input token (a matrix per input), not one vector."""
EMBED_AND_TOKEN_CLASSIFY_REFUSED: Final = (
    "The 'embed&token_classify' pooling task is only available through an IO processor plugin. Send a plugin "
    "request with a 'data' field, or select a concrete task with --pooler-config.task."
)
"""vLLM's 400 to a /pooling request of task embed&token_classify (BGE-M3's combined task) without its plugin."""
EMBEDDING_TYPES: Final = ("float", "int8", "uint8", "binary", "ubinary", "base64")
"""Packed answer types: Cohere's `embedding_types`, Voyage's `output_dtype`, Infinity's `--embedding-dtype`.
binary and ubinary pack 8 dimensions a byte (dimension / 8)."""
PACKED_RANGES: Final[Mapping[str, tuple[int, int]]] = {
    "int8": (-128, 127),
    "uint8": (0, 255),
    "binary": (-128, 127),
    "ubinary": (0, 255),
}
"""The whole numbers each packed type's values may be: binary is ubinary's bytes less 128 (offset binary)."""
BIT_PACKED: Final = frozenset({"binary", "ubinary"})
"""The types that pack 8 dimensions a byte, the first dimension in the high bit (numpy's packbits)."""
IMAGE_FORMATS: Final = ("png", "jpeg")

OCTET_STREAM: Final = "application/octet-stream"
JSON: Final = "application/json"

# Header names, lower-case as geventhttpclient's Headers match case-insensitively anyway.
METADATA_HEADER: Final = "metadata"
TEI_TIMING_HEADERS: Final[Mapping[str, str]] = {
    "x-compute-time": "server_compute_ms",
    "x-total-time": "server_total_ms",
    "x-tokenization-time": "server_tokenization_ms",
    "x-queue-time": "server_queue_ms",
    "x-inference-time": "server_inference_ms",
}
TEI_TOKENS_HEADER: Final = "x-compute-tokens"
TEI_PRESENCE_HEADER: Final = "x-compute-time"
"""TEI sends its timing and token headers together; where this one is missing, so are the rest."""


def count_words(text: str) -> int:
    """The documented client-side token rule: one token per whitespace-separated word.

    It is an estimate (real tokenizers split words into sub-words and add special tokens);
    every figure made with it is labelled `client`. The mock server counts with the same
    rule, so that tests can check sums exactly.
    """
    return len(text.split())


def count_prompt(prompt: Any) -> int:
    """Count one prompt as vLLM accepts it: text, a token-id list, or chat messages."""
    if isinstance(prompt, str):
        return count_words(prompt)
    if isinstance(prompt, Mapping):  # a chat message
        content = prompt.get("content", "")
        if isinstance(content, str):
            return count_words(content)
        return sum(count_words(part.get("text", "")) for part in content if isinstance(part, Mapping))
    if isinstance(prompt, Sequence) and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    raise TypeError(f"cannot count tokens of a {type(prompt).__name__} prompt")


def count_prompts(prompts: Iterable[Any]) -> int:
    return sum(count_prompt(p) for p in prompts)


COHERE_INPUT_TYPES: Final = ("search_document", "search_query", "classification", "clustering")
"""Cohere's /v2/embed input types for texts ("image" is for images, which a class of texts never sends)."""
COHERE_NO_INPUT_TYPE: Final = "invalid request: valid input_type must be provided with the provided model"
"""Cohere's 400 to a v3+ model asked without input_type."""
_COHERE_EMBED_MODEL = re.compile(r"(?:cohere[.-])?embed-(?:[a-z]+-)*v(\d+)(?:[.-]|$)", re.IGNORECASE)


def cohere_needs_input_type(model: str) -> bool:
    """Whether Cohere refuses every /v2/embed request for this model without input_type: its embed
    models from v3 on (embed-english-v3.0, embed-multilingual-light-v3.0, embed-v4.0; also as
    Bedrock's cohere.embed-english-v3 or Azure's Cohere-embed-v3-english names them)."""
    found = _COHERE_EMBED_MODEL.match(model)
    return found is not None and int(found.group(1)) >= 3
