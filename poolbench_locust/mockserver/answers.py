"""What several families' routes read and answer alike: prompts and texts, ids and usage, the mock's scores,
the OpenAI-shaped embeddings list (vLLM's, Infinity's, Voyage's) and a ranking of documents."""

from __future__ import annotations

import itertools
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar, cast

import orjson

from poolbench_locust.mockserver import image_inputs, vectors
from poolbench_locust.mockserver.calls import AnswerDraft, BadRequest, Call, dim, kept, model, per_input, required
from poolbench_locust.mockserver.reply import Reply
from poolbench_locust.wire import BINARY_ENCODINGS, DTYPE_SIZES, ENDIANNESS, count_prompt, count_words

MAX_ANSWER = 1 << 30
"""Bytes of vectors one answer may hold: a typo in a batch size must not take the machine's memory."""
LABELS = ("LABEL_0", "LABEL_1")
T = TypeVar("T")


_ids = itertools.count(1)


def new_id(prefix: str) -> str:
    return f"{prefix}-{next(_ids):016x}"


def usage(tokens: int) -> dict[str, int]:
    return {"prompt_tokens": tokens, "total_tokens": tokens}


def is_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(t) is int for t in value)


def prompts(value: Any, name: str) -> list[Any]:
    """vLLM's `input`: a text, texts, one token-id list, or token-id lists; one prompt per sequence."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value):
            return value
        if is_ids(value):
            return [value]
        if all(is_ids(v) for v in value):
            return value
    raise BadRequest(f"{name!r} must be a string, a non-empty list of strings, token ids or token-id lists")


def text(value: Any, name: str) -> str:
    if isinstance(value, Mapping) and isinstance(cohere := value.get("text"), str):
        return cohere  # Cohere-style {"text": ...} documents
    if not isinstance(value, str) and (found := image_inputs.document(value, name, image_inputs.Seen())) is not None:
        return found  # a document with images: vLLM's {"content": [parts]}, SGLang's [parts]
    if not isinstance(value, str):
        raise BadRequest(f"{name!r} must hold strings")
    return value


def texts(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise BadRequest(f"{name!r} must be a string or a list of strings")
    return [text(v, name) for v in value]


def chars(prompt: Any) -> int:
    return len(prompt) if isinstance(prompt, str | list) else count_prompt(prompt)


def score(*parts: Any) -> float:
    """A deterministic score in [0, 1) per input, so sorting and top_n mean something."""
    joined = "\x00".join(p if isinstance(p, str) else orjson.dumps(p).decode() for p in parts)
    return zlib.crc32(joined.encode()) / 2**32


def flipped(call: Call, scores: list[T], key: Callable[[T], float] | None = None) -> list[T]:
    """--flip-above under load: the two highest scores (by `key`) trade places, so the top document changes
    while the answer holds the same scores; otherwise `scores` as they are."""
    if not call.flip or len(scores) < 2:
        return scores
    # without a key, the scores are floats themselves
    by = key if key else cast("Callable[[T], float]", lambda score: score)
    first, second = sorted(range(len(scores)), key=lambda i: by(scores[i]), reverse=True)[:2]
    swapped = list(scores)
    swapped[first], swapped[second] = scores[second], scores[first]
    call.flipped += 1
    return swapped


def label_scores(prompt: Any, drift: bool = False) -> list[dict[str, Any]]:
    """The labels' scores of a prompt, highest first; `drift`: the two probabilities swapped (the label
    changes, the largest probability difference is |1 - 2p|)."""
    p = 1 - score(prompt) if drift else score(prompt)
    return sorted(({"score": p, "label": LABELS[1]}, {"score": 1 - p, "label": LABELS[0]}), key=lambda r: -r["score"])


def encoding(call: Call, allowed: tuple[str, ...]) -> tuple[str, str, str]:
    asked = call.body.get("encoding_format") or "float"
    if asked not in allowed:
        raise BadRequest(f"encoding_format {asked!r} is not supported; use one of {', '.join(allowed)}")
    dtype = call.body.get("embed_dtype") or "float32"
    if dtype not in DTYPE_SIZES:
        raise BadRequest(f"embed_dtype {dtype!r} is not supported; use one of {', '.join(DTYPE_SIZES)}")
    endianness = call.body.get("endianness") or "native"
    if endianness not in ENDIANNESS:
        raise BadRequest(f"endianness {endianness!r} is not supported; use one of {', '.join(ENDIANNESS)}")
    return asked, dtype, endianness


def embed(call: Call, inputs: list[Any], tokens: int, item: str, key: str, allowed: tuple[str, ...]) -> AnswerDraft:
    """The OpenAI-shaped embeddings answer shared by /v1/embeddings, /pooling and Infinity's /embeddings."""
    how, dtype, endianness = encoding(call, allowed)
    size, name = dim(call), model(call)
    indices = kept(call, list(range(len(inputs))))
    if len(inputs) * size * DTYPE_SIZES[dtype] > MAX_ANSWER:
        raise BadRequest(f"{len(inputs)} x {size} x {dtype} is more than the mock's {MAX_ANSWER} byte limit")
    answered = [inputs[i] for i in indices]
    head = {"id": new_id("embd"), "created": int(time.time()), "model": name}
    if how in BINARY_ENCODINGS:
        arrays = per_input(call, answered, lambda k: vectors.raw(size, dtype, endianness, k))
        width = size * DTYPE_SIZES[dtype]
        metadata = None
        if how == "bytes":
            data = [
                {
                    "index": i,
                    "embed_dtype": dtype,
                    "endianness": endianness,
                    "start": i * width,
                    "end": (i + 1) * width,
                    "shape": [size],
                }
                for i in indices
            ]
            metadata = {**head, "data": data, "usage": usage(tokens)}
        return AnswerDraft(raw=b"".join(arrays), metadata=metadata, tokens=tokens, sequences=len(inputs))
    if how == "float":
        written = partial(vectors.json_floats, size)
    else:
        written = partial(vectors.json_base64, size, dtype, endianness)
    fragments = per_input(call, answered, lambda k: orjson.Fragment(written(k)))
    data = [{"index": i, "object": item, key: f} for i, f in zip(indices, fragments, strict=True)]
    if call.controls.flavor == "voyage":  # Voyage: no id or created, and usage holds only total_tokens
        doc: dict[str, object] = {"object": "list", "data": data, "model": name, "usage": {"total_tokens": tokens}}
    else:
        doc = {**head, "object": "list", "data": data, "usage": usage(tokens)}
    return AnswerDraft(doc, tokens=tokens, sequences=len(inputs))


def listed(call: Call, prefix: str, data: list[Any], tokens: int, sequences: int) -> AnswerDraft:
    """vLLM's list answer of /score and /classify: an id, its data rows and the usage."""
    doc = {
        "id": new_id(prefix),
        "object": "list",
        "created": int(time.time()),
        "model": model(call),
        "data": data,
        "usage": usage(tokens),
    }
    return AnswerDraft(doc, tokens=tokens, sequences=sequences)


def pair_words(query: str, docs: list[str]) -> int:
    return sum(count_words(query) + count_words(d) for d in docs)


def ranked(call: Call, query: str, docs: list[str]) -> list[tuple[int, str, float]]:
    """Documents by score, highest first, cut to top_n (0 or absent: all)."""
    top_n = call.body.get("top_n") or 0
    if type(top_n) is not int or top_n < 0:
        raise BadRequest("'top_n' must be a non-negative integer")
    scores = flipped(call, [score(query, d) for d in docs])
    order = sorted(zip(range(len(docs)), docs, scores, strict=True), key=lambda r: -r[2])
    return kept(call, order[:top_n] if top_n else order)


@dataclass(frozen=True, slots=True)
class Ranking:
    """What a /rerank body asks, read the same for every family: each family writes its own answer of it."""

    query: str
    docs: list[str]
    ranked: list[tuple[int, str, float]]
    tokens: int
    tei_body: bool
    """TEI's form of the body (`texts`, not `documents`): answered in TEI's form whatever the flavor."""

    @classmethod
    def of(cls, call: Call) -> Ranking:
        query = text(required(call, "query"), "query")
        tei_body = "texts" in call.body
        docs = texts(call.body["texts"] if tei_body else required(call, "documents"), "documents")
        return cls(query, docs, ranked(call, query, docs), pair_words(query, docs), tei_body)


def health(call: Call) -> Reply:
    return Reply(200, b"")
