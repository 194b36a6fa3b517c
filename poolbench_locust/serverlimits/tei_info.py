"""TEI's `GET /info` (WIRE.md): the largest batch a client may send, and the longest input it takes.

Read from TEI 1.9.3's source: a batch above `max_client_batch_size` is refused whole (422 "Validation",
router/src/http/server.rs). `max_batch_tokens` refuses no request: TEI queues every input on its own
and cuts batches at it (core/src/queue.rs); what it refuses is one input above `max_input_length`
(the model's length, capped at `max_batch_tokens`, router/src/lib.rs) when it does not truncate
(core/src/tokenization.rs: "`inputs` must have less than N tokens"), that is when the request says
`truncate: false`, or says nothing and TEI runs with `--auto-truncate false`.

The answer is untrusted: each field is read only when it is of its type and in range; a field that is
not is left unknown, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from poolbench_locust.servermetrics.scrape import ScrapeError, fetch

INFO_TIMEOUT_S = 5.0
INFO_LIMIT = 1 << 20
"""Bytes of /info read at most (TEI's is under 2 kB): a hostile answer costs no more."""
MAX_BATCH = 1 << 24
MAX_LENGTH = 1 << 30
"""Tokens: above this, a length is a server's garbage."""


@dataclass(frozen=True)
class TeiLimits:
    max_client_batch_size: int
    max_input_length: int | None = None
    """The longest input, in TEI's tokens: `max_input_length`, else `max_batch_tokens` (never smaller)."""
    auto_truncate: bool | None = None
    length_field: str = "max_input_length"
    """Which field of /info gave `max_input_length`."""


def _whole(doc: dict[str, Any], key: str, top: int) -> int | None:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
        return None
    return value


def read_info(body: bytes) -> TeiLimits | str:
    """The limits in an /info answer, or why there are none (one line, safe to show)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "not JSON"
    if not isinstance(doc, dict):
        return "not a JSON object"
    size = _whole(doc, "max_client_batch_size", MAX_BATCH)
    if size is None:
        return f"no max_client_batch_size in 1..{MAX_BATCH}"
    given = _whole(doc, "max_input_length", MAX_LENGTH) or not _whole(doc, "max_batch_tokens", MAX_LENGTH)
    field = "max_input_length" if given else "max_batch_tokens"
    truncates = doc.get("auto_truncate")
    return TeiLimits(size, _whole(doc, field, MAX_LENGTH), truncates if isinstance(truncates, bool) else None, field)


def tei_limits(host: str) -> TeiLimits | str:
    """GET host/info, bounded in time and size: the limits, or why there are none."""
    try:
        body = fetch(host.rstrip("/") + "/info", timeout=INFO_TIMEOUT_S, limit=INFO_LIMIT)
    except ScrapeError as e:
        return str(e)
    return read_info(body)
