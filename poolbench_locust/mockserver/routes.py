"""The route table: which family's handler answers each path (one module per server family, as the client's
endpoints/ has: vllm, infinity, tei, sglang, nim, cohere, voyage, ollama, kserve), which family's page
GET /metrics writes for each flavor, and `render`.

Handlers turn a parsed request into an `AnswerDraft` (a JSON document whose vectors are pre-serialised
`orjson.Fragment`s, or a raw body with its metadata); `render` makes the `Reply` the writer sends. A path
several families serve (/rerank, /score, /classify, /v1/embeddings) is answered in the form of the family
the call's flavor names, or vLLM's.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable, Mapping

import orjson

from poolbench_locust.mockserver import (
    cohere,
    faults,
    infinity,
    kserve,
    llamacpp,
    nim,
    ollama,
    sglang,
    tei,
    vllm,
    voyage,
)
from poolbench_locust.mockserver.answers import Ranking, health
from poolbench_locust.mockserver.calls import AnswerDraft, Call, Handler
from poolbench_locust.mockserver.metrics import Page
from poolbench_locust.mockserver.reply import Reply
from poolbench_locust.wire import METADATA_HEADER, OCTET_STREAM


def _by_flavor(default: Handler, **families: Handler) -> Handler:
    """A path several families serve, each in its own form: the call's flavor picks (any other: `default`)."""

    def handle(call: Call) -> AnswerDraft | Reply:
        return families.get(call.controls.flavor, default)(call)

    return handle


RERANK_FORMS: Mapping[str, Callable[[Call, Ranking], AnswerDraft | Reply]] = {
    "tei": tei.rerank,
    "sglang": sglang.rerank,
    "voyage": voyage.rerank,
    "infinity": infinity.rerank,
}
"""/rerank's answer by flavor; any other flavor answers in vLLM's form."""


def rerank(call: Call) -> AnswerDraft | Reply:
    """/rerank and /v1/rerank: the body read alike, answered in the flavor's form; a TEI body (`texts`) in TEI's."""
    ranking = Ranking.of(call)
    return RERANK_FORMS.get("tei" if ranking.tei_body else call.controls.flavor, vllm.rerank)(call, ranking)


POOLING: Mapping[str, Handler] = {
    "/v1/embeddings": _by_flavor(vllm.embeddings, voyage=voyage.embeddings),
    "/pooling": vllm.pooling,
    "/v2/embed": cohere.embed,
    "/rerank": rerank,
    "/v1/rerank": rerank,
    "/v2/rerank": _by_flavor(rerank, cohere=cohere.rerank),
    "/score": _by_flavor(vllm.score_pairs, sglang=sglang.score_items),
    "/v1/score": _by_flavor(vllm.score_pairs, sglang=sglang.score_items),
    "/classify": _by_flavor(vllm.classify, infinity=infinity.classify),
    "/embeddings": infinity.embeddings,
    "/embed": tei.embed,
    "/predict": tei.predict,
    "/embed_sparse": tei.embed_sparse,
    "/embed_all": tei.embed_all,
    "/similarity": tei.similarity,
    "/v1/ranking": nim.ranking,
    "/api/embed": ollama.embed,
}
"""Routes that are counted in the stats and take faults; all POST with a JSON object body."""

POOLING_PATTERNS: tuple[tuple[re.Pattern[str], Handler], ...] = ((kserve.INFER_PATH, kserve.infer),)
"""Pooling routes whose path names something (KServe's /v2/models/{model}/infer): its named groups are the
call's `params`."""

SERVICE: Mapping[tuple[str, str], Handler] = {
    ("POST", "/tokenize"): vllm.tokenize,
    ("GET", "/health"): health,
    ("GET", "/info"): tei.info,
    ("GET", "/v1/models"): vllm.models,
    ("GET", "/models"): vllm.models,
}


SERVICE_PATTERNS: tuple[tuple[str, re.Pattern[str], Handler], ...] = (("GET", kserve.MODEL_PATH, kserve.metadata),)


METRICS_PAGES: Mapping[str, Page] = {"tei": tei.METRICS, "sglang": sglang.METRICS, "llamacpp": llamacpp.METRICS}
"""GET /metrics: the page of each flavor that has one of its own; every other flavor writes vLLM's."""


def metrics_page(flavor: str) -> Page:
    return METRICS_PAGES.get(flavor, vllm.METRICS)


def pooling_route(path: str) -> tuple[Handler, dict[str, str]] | None:
    """The handler of a pooling route and the parts its path names, or None: not a pooling route."""
    if (handler := POOLING.get(path)) is not None:
        return handler, {}
    for pattern, handler in POOLING_PATTERNS:
        if (match := pattern.fullmatch(path)) is not None:
            return handler, match.groupdict()
    return None


def service_route(method: str, path: str) -> tuple[Handler, dict[str, str]] | None:
    if (handler := SERVICE.get((method, path))) is not None:
        return handler, {}
    for verb, pattern, handler in SERVICE_PATTERNS:
        if verb == method and (match := pattern.fullmatch(path)) is not None:
            return handler, match.groupdict()
    return None


def served_path(path: str) -> bool:
    """Whether some method of a service route answers `path` (another method is then 405, not 404)."""
    return any(p == path for _, p in SERVICE) or any(pattern.fullmatch(path) for _, pattern, _ in SERVICE_PATTERNS)


def render(answer: AnswerDraft | Reply, call: Call, accepts_gzip: bool) -> Reply:
    """Serialise an answer, with the faults that act on its content (see `faults`)."""
    if isinstance(answer, Reply):
        return answer
    fault = call.fault
    if answer.raw is not None:
        headers = dict(answer.headers)
        if (metadata := answer.metadata) is not None:
            if fault == "missing-usage":
                metadata.pop("usage", None)
            elif fault == "metadata-offsets":
                faults.stretch_offsets(metadata)
            headers[METADATA_HEADER] = orjson.dumps(metadata).decode()
        reply = Reply(200, answer.raw, OCTET_STREAM, headers, chunked=True)
    else:
        if fault == "missing-usage":
            faults.strip_usage(answer.doc)
        reply = Reply(200, orjson.dumps(answer.doc), headers=dict(answer.headers))
    reply.tokens, reply.sequences, reply.prompts = answer.tokens, answer.sequences, answer.prompts
    faults.mangle(reply, fault)
    compressible = answer.raw is None or answer.gzip_raw
    if compressible and call.controls.gzip and accepts_gzip and "content-encoding" not in reply.headers:
        reply.body = gzip.compress(reply.body, compresslevel=1, mtime=0)
        reply.headers["content-encoding"] = "gzip"
    return reply
