"""Hugging Face text-embeddings-inference (TEI) routes (WIRE.md, "TEI").

TEI answers bare JSON lists without usage; its token count and timings come in headers, which
the engine reads for every endpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from poolbench_locust.endpoints.spec import (
    NO_TOKENS,
    TEI_TRUNCATION,
    AnswerError,
    Endpoint,
    Inputs,
    ParsedAnswer,
    Shape,
    Values,
    dimensions_field,
    finite_number,
    item_values,
    label_scores,
    label_values,
    ranking_values,
    whole_index,
)
from poolbench_locust.lazyjson import ARRAY
from poolbench_locust.options import Settings

CANNOT_SEND = {
    "--model": "TEI's request has no model: it serves the one it was started with; leave --model out",
    # TEI's /tokenize takes {"inputs"} and answers token lists, not vLLM's {"prompt"} -> {"count"}.
    "--count-tokens-with-server": "TEI's /tokenize is not vLLM's; count with --tokenizer instead",
}


def _rerank_answer(doc: Any) -> ParsedAnswer:
    """/rerank answers a bare list of `{"index", "score"}`, sorted by score."""
    if not isinstance(doc, list):
        raise AnswerError("answer is not a JSON list")
    return ParsedAnswer(len(doc), values=ranking_values(doc, "score", "answer"))


def _bare_vectors(doc: Any) -> ParsedAnswer:
    """/embed answers a bare list of embeddings."""
    if not isinstance(doc, ARRAY):
        raise AnswerError("answer is not a JSON list")
    return ParsedAnswer(len(doc), None, doc)


def _tei(route: str, shape: Shape, body: Callable[[Inputs, Settings], Any], answer: Any, **declared: Any) -> Endpoint:
    """A TEI route: its request has no model, its JSON no count (x-compute-tokens has it), and it takes
    TEI's truncation fields, unless `declared` says otherwise."""
    defaults: dict[str, Any] = {"tokens": NO_TOKENS, "cannot_send": CANNOT_SEND, "truncation": TEI_TRUNCATION}
    return Endpoint(route=route, shape=shape, server="tei", body=body, answer=answer, **(defaults | declared))


TEI_EMBED = _tei(
    "/embed",
    "texts",
    lambda x, s: {"inputs": list(x.texts), **dimensions_field(s)},
    _bare_vectors,
    vectors=True,
)

TEI_RERANK = _tei(
    "/rerank",
    "pairs",
    lambda x, s: {"query": x.query, "texts": list(x.texts)},
    _rerank_answer,
)


def _predict_answer(doc: Any) -> ParsedAnswer:
    """One input: `[{"score", "label"}]`; a batch: one such list per input."""
    if not isinstance(doc, list):
        raise AnswerError("answer is not a JSON list")
    if doc and all(isinstance(item, Mapping) for item in doc):
        label_scores(doc, "answer")  # the one-input form: one result
        return ParsedAnswer(1, None, values=item_values([doc], label_values, "answer"))
    for i, scores in enumerate(doc):
        label_scores(scores, f"prediction {i}")
    return ParsedAnswer(len(doc), None, values=item_values(doc, label_values, "prediction"))


SPARSE_INDEX_LIMIT = 1 << 24
"""A sparse entry's index is a vocabulary id: the largest vocabularies (Gemma's 262,144) are far below this
bound; an index at or past it is not one."""


def _sparse_answer(doc: Any) -> ParsedAnswer:
    """`[[{"index", "value"}]]`: one list of non-zero entries per input, each index a vocabulary id."""
    if not isinstance(doc, list):
        raise AnswerError("answer is not a JSON list")
    for i, entries in enumerate(doc):
        if not isinstance(entries, list):
            raise AnswerError(f"sparse embedding {i} is not a list")
        for j, entry in enumerate(entries):
            if not isinstance(entry, Mapping):
                raise AnswerError(f"sparse embedding {i} entry {j} is not an object")
            where = f"sparse embedding {i} entry {j} index"
            if whole_index(entry.get("index"), where) >= SPARSE_INDEX_LIMIT:
                raise AnswerError(f"{where} is not a vocabulary id (>= {SPARSE_INDEX_LIMIT})")
            finite_number(entry.get("value"), f"sparse embedding {i} entry {j} value")
    return ParsedAnswer(len(doc), None, values=item_values(doc, _sparse_values, "sparse embedding"))


def _sparse_values(entries: Any, where: str) -> Values:
    """One sparse embedding as vocabulary id -> value (checked by the reader; an id given twice: AnswerError)."""
    found = {entry["index"]: float(entry["value"]) for entry in entries}
    if len(found) != len(entries):
        raise AnswerError(f"{where} gives an index twice")
    return Values("sparse", found)


def _embed_all_answer(doc: Any) -> ParsedAnswer:
    """`number[][][]`: per input a matrix of one row per token. Its rows (one width, numbers, one per token
    against `x-compute-tokens`) are the engine's token-row checks' (TEI_EMBED_ALL is `token_rows`)."""
    if not isinstance(doc, list):
        raise AnswerError("answer is not a JSON list")
    for i, matrix in enumerate(doc):
        if not isinstance(matrix, list) or not matrix or not isinstance(matrix[0], ARRAY):
            raise AnswerError(f"embedding {i} is not a non-empty list of token rows")
    return ParsedAnswer(len(doc), None, doc)


def _similarity_answer(doc: Any) -> ParsedAnswer:
    """`number[]`: one similarity per sentence."""
    if not isinstance(doc, list):
        raise AnswerError("answer is not a JSON list")
    scores = [finite_number(value, f"similarity {i}") for i, value in enumerate(doc)]
    return ParsedAnswer(len(doc), None, values=lambda position, _body: _whole(scores, position))


def _whole(scores: list[float], position: int) -> Values:
    if position >= 0:
        raise AnswerError("a similarity answer holds its sentences' scores, not items")
    return Values("scores", scores)


# A batch is a list of one-text lists: a bare list of two strings would be one pair to classify.
TEI_PREDICT = _tei(
    "/predict",
    "texts",
    lambda x, s: {"inputs": [[text] for text in x.texts]},
    _predict_answer,
    compared_as="labels",
)

TEI_EMBED_SPARSE = _tei(
    "/embed_sparse",
    "texts",
    lambda x, s: {"inputs": list(x.texts)},
    _sparse_answer,
    compared_as="sparse",
)

TEI_EMBED_ALL = _tei(
    "/embed_all",
    "texts",
    lambda x, s: {"inputs": list(x.texts)},
    _embed_all_answer,
    vectors=True,
    token_rows=True,
    cannot_send={**CANNOT_SEND, "--dimensions": "TEI's /embed_all has no dimensions: it answers the model's own"},
)

TEI_SIMILARITY = _tei(
    "/similarity",
    "pairs",
    lambda x, s: {"inputs": {"source_sentence": x.query, "sentences": list(x.texts)}},
    _similarity_answer,
    # /similarity takes its truncation under "parameters" (router/src/http/types.rs, SimilarityParameters).
    truncation={name: {"parameters": dict(fields)} for name, fields in TEI_TRUNCATION.items()},
)
