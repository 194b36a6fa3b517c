"""TEI's `GET /info` (WIRE.md): the largest batch a client may send. Its answer is untrusted: read only
when it is a JSON object whose `max_client_batch_size` is a whole number in range."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from poolbench_locust.servermetrics.scrape import ScrapeError, fetch

INFO_TIMEOUT_S = 5.0
INFO_LIMIT = 1 << 20
"""Bytes of /info read at most (TEI's is under 2 kB): a hostile answer costs no more."""
MAX_BATCH = 1 << 24


@dataclass(frozen=True)
class TeiLimits:
    max_client_batch_size: int


def read_info(body: bytes) -> TeiLimits | str:
    """The limits in an /info answer, or why there are none (one line, safe to show)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "not JSON"
    if not isinstance(doc, dict):
        return "not a JSON object"
    size = doc.get("max_client_batch_size")
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_BATCH:
        return f"no max_client_batch_size in 1..{MAX_BATCH}"
    return TeiLimits(max_client_batch_size=size)


def tei_limits(host: str) -> TeiLimits | str:
    """GET host/info, bounded in time and size: the limits, or why there are none."""
    try:
        body = fetch(host.rstrip("/") + "/info", timeout=INFO_TIMEOUT_S, limit=INFO_LIMIT)
    except ScrapeError as e:
        return str(e)
    return read_info(body)
