"""SGLang's own rerank and score routes (WIRE.md, "SGLang"); its /v1/embeddings is vLLM's EMBEDDINGS.

SGLang's /v1/rerank and /v1/score share vLLM's paths but not its answers: a bare list of results, and a
`scores` matrix. Its rerank answer carries no usage: tokens come from each result's `meta_info`, where present.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from poolbench_locust.endpoints import image_parts
from poolbench_locust.endpoints.spec import (
    AnswerError,
    Endpoint,
    ParsedAnswer,
    TokenPaths,
    Values,
    finite_number,
    model_field,
    ranking_values,
    whole_index,
)

NO_TOKENIZE = "SGLang's /tokenize is not vLLM's; count with --tokenizer instead"


def _rerank_answer(doc: Any) -> ParsedAnswer:
    """`[{"score", "document"?, "index", "meta_info"?}]`; its tokens are SGLANG_RERANK's `tokens`."""
    if not isinstance(doc, list):
        raise AnswerError("answer is not a JSON list of rerank results")
    for i, result in enumerate(doc):
        if not isinstance(result, Mapping):
            raise AnswerError(f"result {i} is not an object")
        finite_number(result.get("score"), f"result {i} score")
        whole_index(result.get("index"), f"result {i} index")
    return ParsedAnswer(len(doc), values=ranking_values(doc, "score", "result"))


def _score_answer(doc: Any) -> ParsedAnswer:
    """`{"scores": [[...]], "model", "usage", "object": "scoring"}`: one row of numbers per item.

    SGLang 0.5 leaves `usage` null (serving_score.py); a count is read should a release send one."""
    scores = doc.get("scores") if isinstance(doc, Mapping) else None
    if not isinstance(scores, list):
        raise AnswerError("answer has no 'scores' list")
    for i, row in enumerate(scores):
        if not isinstance(row, list) or not row:
            raise AnswerError(f"scores[{i}] is not a non-empty list of numbers")
        for j, value in enumerate(row):
            finite_number(value, f"scores[{i}][{j}]")
    return ParsedAnswer(len(scores), values=lambda position, _body: _first_scores(scores, position))


def _first_scores(rows: list[Any], position: int) -> Values:
    """Each item's score: the first of its row (the first label token's; the answer is checked: numbers)."""
    if position >= 0:
        raise AnswerError("a score answer holds its items' scores, not items")
    return Values("scores", [float(row[0]) for row in rows])


SGLANG_RERANK = Endpoint(
    route="/v1/rerank",
    shape="pairs",
    server="sglang",
    # return_documents defaults to true: the documents back would only add bytes the test did not ask for.
    body=lambda x, s: {
        **model_field(s),
        "query": x.query,
        "documents": image_parts.sglang_documents(x),
        "return_documents": False,
    },
    answer=_rerank_answer,
    images="parts",
    tokens=TokenPaths("[].meta_info.prompt_tokens"),
    cannot_send={"--count-tokens-with-server": NO_TOKENIZE},
)

# A cross-encoder scores without label_token_ids; a decoder model needs them (send them with --extra-body).
SGLANG_SCORE = Endpoint(
    route="/v1/score",
    shape="pairs",
    server="sglang",
    body=lambda x, s: {**model_field(s), "query": x.query, "items": list(x.texts)},
    answer=_score_answer,
    cannot_send={"--count-tokens-with-server": NO_TOKENIZE},
)
