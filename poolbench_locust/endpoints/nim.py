"""NVIDIA NIM's ranking route (WIRE.md, "NVIDIA NIM"); NIM's /v1/embeddings is vLLM's EMBEDDINGS."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from poolbench_locust.endpoints.spec import (
    NAMED_TRUNCATION,
    NO_TOKENS,
    AnswerError,
    Endpoint,
    ParsedAnswer,
    finite_number,
    model_field,
    ranking_values,
    whole_index,
)


def _ranking_answer(doc: Any) -> ParsedAnswer:
    """`{"rankings": [{"index", "logit"}]}`, sorted; NIM sends no token count."""
    rankings = doc.get("rankings") if isinstance(doc, Mapping) else None
    if not isinstance(rankings, list):
        raise AnswerError("answer has no 'rankings' list")
    for i, ranking in enumerate(rankings):
        if not isinstance(ranking, Mapping):
            raise AnswerError(f"ranking {i} is not an object")
        whole_index(ranking.get("index"), f"ranking {i} index")
        finite_number(ranking.get("logit"), f"ranking {i} logit")
    return ParsedAnswer(len(rankings), None, values=ranking_values(rankings, "logit", "rankings"))


NIM_RANKING = Endpoint(
    route="/v1/ranking",
    shape="pairs",
    server="nim",
    body=lambda x, s: {
        **model_field(s),
        "query": {"text": x.query},
        "passages": [{"text": text} for text in x.texts],
    },
    answer=_ranking_answer,
    tokens=NO_TOKENS,
    cannot_send={"--count-tokens-with-server": "NIM has no /tokenize route; count with --tokenizer instead"},
    truncation=NAMED_TRUNCATION,
)
