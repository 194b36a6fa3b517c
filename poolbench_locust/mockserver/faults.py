"""Fault injection: the ways a pooling server's answer can go wrong, on purpose.

A fault comes from the `x-mock-fault` header or is drawn from the configured rates; it applies
to pooling routes only (never to /health, /tokenize, /v1/models or /mock/*). Every injection is
counted once in `stats()["faults"]` and the request never counts as `ok`, even where the fault
does not apply and the answer is a normal one.

Every pooling route (all encodings) takes these:
- status-500, status-503: vLLM's error JSON `{"error": {...}}` with that status; status-429 adds
  `Retry-After: 1`; status-400 is the older form `{"object": "error", ...}`.
- html-error: a 502 `text/html` nginx page.
- reset-before-headers (RST: SO_LINGER 0, close), close-before-headers (FIN), stall-before-headers
  (nothing for `x-mock-stall-ms`, then FIN): no byte of the answer is sent.
- reset-mid-body, stall-mid-body: headers and about half the body, then RST, or a stall then FIN.
- short-content-length: the whole body under a larger Content-Length, then FIN (a bytes answer is
  framed with Content-Length instead of chunked for it).
- cut-chunk: chunked framing (JSON answers too) cut half-way through a chunk, then FIN.
- wrong-content-type: JSON labelled application/octet-stream, a binary body application/json.
- fewer-embeddings: one vector, result, score or class fewer than the inputs asked for.
- corrupt-gzip: `Content-Encoding: gzip` over a stream whose CRC/size trailer is wrong.

These apply where the answer has the part they spoil, and elsewhere answer normally:
- garbled-json: a 200 JSON body cut short and ended with non-JSON text (not bytes/bytes_only).
- missing-usage: JSON without `usage` (Cohere forms: without the `meta` token figures; Ollama: without
  `prompt_eval_count`); bytes:
  metadata without `usage`; TEI: no `x-compute-tokens` header (bytes_only: normal).
- no-metadata, garbled-metadata (header cut short), metadata-offsets (every `end` one byte too
  far): `bytes` answers of /v1/embeddings and /pooling only.
- zero-vectors, nan-vectors (float JSON writes the bare `NaN` token, as Python's json does):
  vector routes only (/v1/embeddings, /pooling, /v2/embed, /embeddings, /embed, /api/embed,
  /v2/models/{model}/infer), every encoding.
- packed-short, packed-out-of-range: the last embedding of a packed answer (int8, uint8, binary, ubinary,
  Cohere's base64) one value short, or its first value past its type's range (mockserver/packed.py).
- sparse-bad-index: the last input's sparse embedding (TEI /embed_sparse) with a negative index.

Wrong answers that stay well-formed, for a client's consistency check (config flags only, not `x-mock-fault`:
they depend on the load or on what came before, not on the request; not counted as faults, and the request
counts as `ok`, as the server it imitates would count it). In flight: the pooling requests read and not yet
answered to their last byte, the one being answered among them.
- --drift-above N: while more than N are in flight, every vector of a vector route's answer (the routes
  of zero-vectors, every encoding, /pooling's and /embed_all's token rows too) is the drifted one
  (vectors.py: cosine 1891/2080 with the honest one); N or fewer: the honest answer, byte for byte.
  Answers that hold no dense vector drift too: a classification's two probabilities swap (/classify,
  Infinity's /classify, TEI's /predict: its label changes), a sparse embedding's first value is negated
  (TEI's /embed_sparse); packed answers are the drifted vector packed.
- --cache-drift: an input answered before (the same text, token ids or conversation) gets the drifted
  vector; its first answer is honest. `Answered` remembers the last ANSWERED_KEPT inputs.
- --flip-above N: while more than N are in flight, the two highest scores of a ranking (/rerank in every
  form, /v2/rerank, NIM's /v1/ranking, /score, SGLang's /v1/score, TEI's /similarity) trade places: the
  top document changes, the scores stay the same set.
"""

from __future__ import annotations

import gzip
import hashlib
import random
from collections import OrderedDict
from collections.abc import Mapping
from itertools import accumulate
from typing import Any

import orjson

from poolbench_locust.mockserver.reply import Reply, error_reply
from poolbench_locust.wire import JSON, METADATA_HEADER, OCTET_STREAM, TEI_TOKENS_HEADER

FAULTS: tuple[str, ...] = (
    "status-500",
    "status-503",
    "status-429",
    "status-400",
    "html-error",
    "reset-before-headers",
    "close-before-headers",
    "reset-mid-body",
    "short-content-length",
    "cut-chunk",
    "stall-before-headers",
    "stall-mid-body",
    "wrong-content-type",
    "garbled-json",
    "missing-usage",
    "no-metadata",
    "garbled-metadata",
    "metadata-offsets",
    "fewer-embeddings",
    "corrupt-gzip",
    "zero-vectors",
    "nan-vectors",
    "packed-short",
    "packed-out-of-range",
    "sparse-bad-index",
)
BEFORE_HEADERS = frozenset({"reset-before-headers", "close-before-headers", "stall-before-headers"})
MID_BODY = frozenset({"reset-mid-body", "stall-mid-body", "cut-chunk"})
WIRE = BEFORE_HEADERS | MID_BODY | {"short-content-length"}
"""Faults the HTTP writer carries out; each leaves the connection closed."""

INJECTED = "injected by poolbench-mock"

_STATUS: Mapping[str, tuple[int, str, str]] = {
    "status-500": (500, "InternalServerError", "Internal server error"),
    "status-503": (503, "ServiceUnavailableError", "Service unavailable: the engine is overloaded"),
    "status-429": (429, "RateLimitError", "Too many requests"),
}
_HTML_502 = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    b"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n"
    b"<!-- " + INJECTED.encode() + b" -->\r\n</body>\r\n</html>\r\n"
)


class FaultDraw:
    """Draws at most one configured fault per request from one seeded stream."""

    def __init__(self, rates: Mapping[str, float], seed: int) -> None:
        self._rng = random.Random(seed)
        active = [(name, rate) for name, rate in rates.items() if rate > 0]
        self._names = [name for name, _ in active]
        # One uniform number per request against cumulative rates makes each fault's share exact.
        self._edges = list(accumulate(rate for _, rate in active))

    def draw(self) -> str | None:
        if not self._names:
            return None
        r = self._rng.random()
        for name, edge in zip(self._names, self._edges, strict=True):
            if r < edge:
                return name
        return None


def above(threshold: int | None, in_flight: int) -> bool:
    """Whether a load fault (--drift-above, --flip-above) acts at `in_flight` requests: more than its threshold."""
    return threshold is not None and in_flight > threshold


ANSWERED_KEPT = 65_536
"""Inputs --cache-drift remembers: about 10 MB of digests, more than a benchmark's set of repeated inputs."""


class Answered:
    """--cache-drift's memory: a digest of each input answered, the least recently answered forgotten first."""

    def __init__(self, kept: int = ANSWERED_KEPT) -> None:
        self._kept = kept
        self._digests: OrderedDict[bytes, None] = OrderedDict()

    def again(self, prompt: Any) -> bool:
        """Whether `prompt` was answered before; it is remembered from now on."""
        raw = prompt.encode() if isinstance(prompt, str) else orjson.dumps(prompt)
        digest = hashlib.blake2b(raw, digest_size=16).digest()
        seen = digest in self._digests
        if seen:
            self._digests.move_to_end(digest)
        else:
            self._digests[digest] = None
            if len(self._digests) > self._kept:
                self._digests.popitem(last=False)
        return seen

    def clear(self) -> None:
        self._digests.clear()


def error_answer(fault: str | None) -> Reply | None:
    """The error page a status fault answers with instead of the route's answer, else None."""
    if fault is not None and fault in _STATUS:
        status, kind, text = _STATUS[fault]
        reply = error_reply(status, f"{text} ({INJECTED}, fault {fault})", kind)
        if status == 429:
            reply.headers["retry-after"] = "1"
        return reply
    if fault == "status-400":
        doc = {"object": "error", "message": f"Bad request ({INJECTED}, fault {fault})", "type": "BadRequestError"}
        return Reply(400, orjson.dumps({**doc, "code": 400}))
    if fault == "html-error":
        return Reply(502, _HTML_502, "text/html")
    return None


def strip_usage(doc: Any) -> None:
    """missing-usage: remove every token figure the answer document carries."""
    if isinstance(doc, dict):
        doc.pop("usage", None)
        doc.pop("prompt_eval_count", None)  # Ollama's
        meta = doc.get("meta")
        if isinstance(meta, dict):
            meta.pop("billed_units", None)
            meta.pop("tokens", None)


def stretch_offsets(metadata: dict[str, Any]) -> None:
    """metadata-offsets: every item claims one byte more than the body holds for it."""
    for item in metadata["data"]:
        item["end"] += 1


def mangle(reply: Reply, fault: str | None) -> None:
    """Apply the faults that act on a serialised answer (see the module's table)."""
    binary = reply.content_type == OCTET_STREAM
    if fault == "missing-usage":
        reply.headers.pop(TEI_TOKENS_HEADER, None)
    elif fault == "garbled-json" and not binary:
        reply.body = reply.body[: max(len(reply.body) // 2, 1)] + f" <{INJECTED}: garbled>".encode()
    elif fault == "no-metadata":
        reply.headers.pop(METADATA_HEADER, None)
    elif fault == "garbled-metadata" and METADATA_HEADER in reply.headers:
        value = reply.headers[METADATA_HEADER]
        reply.headers[METADATA_HEADER] = value[: len(value) // 2]
    elif fault == "wrong-content-type":
        reply.content_type = JSON if binary else OCTET_STREAM
    elif fault == "corrupt-gzip":
        stream = bytearray(gzip.compress(reply.body, compresslevel=1, mtime=0))
        stream[-8:] = bytes(b ^ 0xFF for b in stream[-8:])  # CRC32 and size trailer: decoders must reject it
        reply.body = bytes(stream)
        reply.headers["content-encoding"] = "gzip"
