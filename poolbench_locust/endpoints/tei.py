"""Hugging Face text-embeddings-inference (TEI) routes (WIRE.md, "TEI").

TEI answers bare JSON lists without usage; its token count and timings come in headers, which
the engine reads for every endpoint.
"""

from __future__ import annotations

from typing import Any

from poolbench_locust.endpoints.spec import TEI_TRUNCATION, AnswerError, Endpoint, ParsedAnswer, dimensions_field
from poolbench_locust.lazyjson import ARRAY

CANNOT_SEND = {
    "--model": "TEI's request has no model: it serves the one it was started with; leave --model out",
    # TEI's /tokenize takes {"inputs"} and answers token lists, not vLLM's {"prompt"} -> {"count"}.
    "--count-tokens-with-server": "TEI's /tokenize is not vLLM's; count with --tokenizer instead",
}


def _bare_list(doc: Any) -> ParsedAnswer:
    if not isinstance(doc, list):
        raise AnswerError("answer is not a JSON list")
    return ParsedAnswer(len(doc), None)


def _bare_vectors(doc: Any) -> ParsedAnswer:
    """/embed answers a bare list of embeddings."""
    if not isinstance(doc, ARRAY):
        raise AnswerError("answer is not a JSON list")
    return ParsedAnswer(len(doc), None, doc)


TEI_EMBED = Endpoint(
    route="/embed",
    shape="texts",
    server="tei",
    body=lambda x, s: {"inputs": list(x.texts), **dimensions_field(s)},
    answer=_bare_vectors,
    usage_required=False,
    vectors=True,
    cannot_send=CANNOT_SEND,
    truncation=TEI_TRUNCATION,
)

TEI_RERANK = Endpoint(
    route="/rerank",
    shape="pairs",
    server="tei",
    body=lambda x, s: {"query": x.query, "texts": list(x.texts)},
    answer=_bare_list,
    usage_required=False,
    cannot_send=CANNOT_SEND,
    truncation=TEI_TRUNCATION,
)
