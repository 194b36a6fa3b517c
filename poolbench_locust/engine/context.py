"""The `context` of the engine's request event: what a measured request carries beyond Locust's own
fields. engine/user.py writes it; the pooling stats (metrics/collector.py) and goodput read it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Required, TypedDict

if TYPE_CHECKING:
    from poolbench_locust.endpoints.spec import Values


class RequestContext(TypedDict, total=False):
    sequences: Required[int]
    """Inputs in the request (texts, pairs, documents)."""
    request_bytes: int
    """Bytes of the request body sent (an image workload is upload-heavy)."""
    vectors: int
    """Vectors (rows) the answer held where it is not one per sequence: token-level and multi-vector answers."""
    image_tokens: int
    """The server's count of image tokens, where its usage gives one (Cohere's billed_units.image_tokens)."""
    retried: bool
    """Resent once on a fresh connection after a stale keep-alive one failed."""
    ttfb_ms: float
    queue_ms: float
    """Open loop: how late the request left after its scheduled time (counted in its E2E)."""
    input_tokens: int
    token_source: str
    """Where input_tokens came from: server, metadata, body-size (a token-level raw body's size, its row learnt
    at start), client-estimate, client-tokenizer, client-tokenize."""
    client_tokens: int
    """The client's count beside a server's one, for the token gap."""
    client_token_source: str
    server_queue_ms: float
    server_inference_ms: float
    """The server's own timing headers, when it sends them."""
    answers: tuple[tuple[int, Values], ...]
    """(reference id, the values answered for it) of each reference input the request carried
    (PreparedRequest.refs; engine/answer_values.py), tagged with their kind: a vector's floats, or a rerank's or
    score's scores in the documents' order. Only on a request that carries one and was answered well
    (docs/consistency.md)."""
    answers_unread: str
    """Why the values of a request's reference inputs could not be read (an answer the checks let through with
    --no-validate, a binary body larger than --max-body-mb): not compared, counted as skipped."""
