"""Packed embeddings as each server writes them: vLLM's and Cohere's /v2/embed `embedding_types`, Voyage's
`output_dtype`, Infinity started with --embedding-dtype; and the faults that spoil them.

The values are the mock's one vector (vectors.VALUES repeated) quantized: int8 as round(254 v), uint8
that plus 128, binary and ubinary its signs packed 8 a byte, the first dimension in the high bit (numpy's
packbits, as vLLM and sentence-transformers pack them), binary less 128. A zero vector packs as one value
repeated; a NaN one is written as NaN tokens, which no JSON reader takes.

Faults (faults.py; they apply to packed types only, elsewhere the answer is normal):
- packed-short: the last embedding one value short (a base64 one four characters, three bytes, short).
- packed-out-of-range: the last embedding's first value one past its type's range (int8 128, uint8 256).
"""

from __future__ import annotations

import base64
import itertools
import struct
import time
from functools import lru_cache, partial
from typing import Any

import orjson

from poolbench_locust.mockserver import vectors
from poolbench_locust.mockserver.calls import AnswerDraft, BadRequest, Call, dim, each_of, kept, kinds, model, per_input
from poolbench_locust.mockserver.reply import Reply, error_reply
from poolbench_locust.wire import BIT_PACKED, PACKED_RANGES

VLLM_TYPES = frozenset({"float", "binary", "ubinary", "base64"})
"""vLLM 0.34's /v2/embed CohereEmbeddingType."""
COHERE_TYPES = frozenset({"float", "int8", "uint8", "binary", "ubinary", "base64"})
VOYAGE_TYPES = frozenset({"float", "int8", "uint8", "binary", "ubinary"})
PACKED_FAULTS = frozenset({"packed-short", "packed-out-of-range"})


def _floats(size: int, vector_kind: vectors.Kind) -> list[float]:
    if vector_kind == "zero":
        return [0.0] * size
    return vectors.floats(size, vector_kind)


@lru_cache(maxsize=64)
def packed_values(size: int, name: str, vector_kind: vectors.Kind = "values") -> tuple[int, ...]:
    """One embedding of `size` dimensions as the whole numbers of type `name` (int8, uint8, binary, ubinary)."""
    floats = _floats(size, vector_kind)
    if name not in BIT_PACKED:
        signed = [round(254 * v) for v in floats]
        return tuple(signed if name == "int8" else [v + 128 for v in signed])
    # vLLM's _pack_binary_embeddings and numpy's packbits: bit 1 for a value >= 0, first dimension high
    packed = [
        sum((1 << (7 - k)) for k, v in enumerate(floats[start : start + 8]) if v >= 0)
        for start in range(0, size - size % 8, 8)
    ]
    return tuple(packed if name == "ubinary" else [b - 128 for b in packed])


@lru_cache(maxsize=64)
def json_vector(size: int, name: str, vector_kind: vectors.Kind = "values", as_floats: bool = False) -> bytes:
    """One embedding's JSON text in type `name`; `as_floats`: whole numbers written as floats (Infinity's -14.0)."""
    if name == "float":
        return vectors.json_floats(size, vector_kind)
    if name == "base64":  # little-endian float32 (vLLM's _encode_base64_embeddings)
        return vectors.json_base64(size, "float32", "little", vector_kind)
    values = packed_values(size, name, vector_kind)
    if vector_kind == "nan":
        return b"[" + b",".join([b"NaN"] * len(values)) + b"]"
    return orjson.dumps([float(v) for v in values] if as_floats else list(values))


def _spoiled(text: bytes, name: str, fault: str) -> bytes:
    if name == "base64":  # a string: four characters are three bytes
        return text[:-5] + b'"' if fault == "packed-short" else text
    values = orjson.loads(text)
    if fault == "packed-short":
        return orjson.dumps(values[:-1])
    values[0] = PACKED_RANGES[name][1] + 1
    return orjson.dumps(values)


def embeddings_of(call: Call, texts: list[bytes], name: str) -> list[Any]:
    """The embeddings of their JSON texts, the last spoiled where the call's fault is a packed one."""
    fragments = [orjson.Fragment(text) for text in texts]
    if texts and name != "float" and call.fault in PACKED_FAULTS:
        spoiled = _spoiled(texts[-1], name, call.fault)
        fragments[-1] = orjson.Fragment(spoiled)
    return fragments


def types_asked(call: Call, offered: frozenset[str], size: int, field: str) -> list[str]:
    """The types a request asks for, each one its server offers; a bit-packed one needs size % 8 == 0."""
    types = call.body.get(field) or ["float"]
    if isinstance(types, str):
        types = [types]
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types) or not set(types) <= offered:
        raise BadRequest(f"{field}: Input should be {', '.join(sorted(offered))}")
    if size % 8 and set(types) & BIT_PACKED:
        raise BadRequest(f"Embedding dimension must be a multiple of 8 for binary embedding types, but got {size}.")
    return types


def cohere_embeddings(call: Call, inputs: list[Any]) -> dict[str, list[Any]]:
    """/v2/embed's `embeddings` of the inputs answered, by type: vLLM offers four types, Cohere's API (its
    flavor) six."""
    size = dim(call, "output_dimension")
    offered = COHERE_TYPES if call.controls.flavor == "cohere" else VLLM_TYPES
    types = types_asked(call, offered, size, "embedding_types")
    each = kinds(call, inputs)  # once: every type answers the same inputs
    return {name: embeddings_of(call, each_of(each, partial(json_vector, size, name)), name) for name in types}


def infinity_embeddings(call: Call, prompts: list[Any], tokens: int) -> AnswerDraft | Reply:
    """Infinity started with a packed --embedding-dtype: whole numbers written as floats, binary and ubinary
    packed at dimension / 8; `dimensions` cuts the packed values (its matryoshka slice comes after the
    packing); base64 is float32 of the values, and refused (500) for the bit-packed dtypes."""
    dtype = call.config.infinity_dtype
    size = call.controls.dim
    values = len(packed_values(size, dtype))
    cut = call.body.get("dimensions")
    if cut is not None and (type(cut) is not int or not 1 <= cut <= values):
        raise BadRequest(f"matryoshka_dim={cut} is not in a valid range. Select between 1 and {values}.")
    encoding = call.body.get("encoding_format") or "float"
    if encoding == "base64" and dtype in BIT_PACKED:
        message = f"model {model(call)} does not support base64 encoding, as it uses uint8-bitpacking"
        return error_reply(500, f"InternalServerError: {message} with EmbeddingDtype.{dtype}", "InternalServerError")
    b64 = encoding == "base64"
    texts = per_input(call, kept(call, prompts), lambda k: _infinity_text(size, dtype, k, cut, b64))
    answered = embeddings_of(call, texts, "base64" if b64 else dtype)
    doc = {
        "object": "list",
        "data": [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(answered)],
        "model": model(call),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        "id": f"infinity-{next(_ids):016x}",
        "created": int(time.time()),
    }
    return AnswerDraft(doc, tokens=tokens, sequences=len(prompts))


_ids = itertools.count(1)


@lru_cache(maxsize=64)
def _infinity_text(size: int, dtype: str, vector_kind: vectors.Kind, cut: int | None, b64: bool) -> bytes:
    """One embedding as Infinity writes it: the packed values cut to `cut`, as floats or base64 of float32."""
    if vector_kind == "nan":
        return json_vector(size, dtype, "nan")
    whole = packed_values(size, dtype, vector_kind)[:cut]
    if b64:
        return b'"' + base64.b64encode(struct.pack(f"={len(whole)}f", *whole)) + b'"'
    return orjson.dumps([float(v) for v in whole])
