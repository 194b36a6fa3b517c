"""NVIDIA NIM's text reranking route: /v1/ranking, rankings by logit and no usage."""

from __future__ import annotations

from collections.abc import Mapping

from poolbench_locust.mockserver.answers import flipped, pair_words, score, text
from poolbench_locust.mockserver.calls import AnswerDraft, BadRequest, Call, kept, required


def ranking(call: Call) -> AnswerDraft:
    """NIM's /v1/ranking: `{"query": {"text"}, "passages": [{"text"}]}` -> rankings by logit, no usage."""
    query, passages = required(call, "query"), required(call, "passages")
    if not isinstance(query, Mapping) or not isinstance(query.get("text"), str):
        raise BadRequest("'query' must be an object with a 'text' string")
    if not isinstance(passages, list) or not passages or not all(isinstance(p, Mapping) for p in passages):
        raise BadRequest("'passages' must be a non-empty list of objects with a 'text' string")
    truncate = call.body.get("truncate", "NONE")
    if truncate not in ("NONE", "START", "END"):
        raise BadRequest("'truncate' must be one of NONE, START, END")
    query_text, docs = query["text"], [text(p, "passages") for p in passages]
    logits = flipped(call, [score(query_text, d) * 20 - 10 for d in docs])
    ranked = sorted(enumerate(logits), key=lambda r: -r[1])
    doc = {"rankings": [{"index": i, "logit": logit} for i, logit in kept(call, ranked)]}
    return AnswerDraft(doc, tokens=pair_words(query_text, docs), sequences=len(docs))
