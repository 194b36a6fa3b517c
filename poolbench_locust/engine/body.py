"""Reading a response body to its last byte, kept (JSON) or counted and dropped (binary).

geventhttpclient leaves the body on the socket when Locust is asked to `stream`; this module
reads it with `read(CHUNK)` and turns every way a body can go wrong into a `BadResponse` whose
text is stable (no byte counts that vary per request), so Locust's failures table groups it.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import gevent
from geventhttpclient.response import HTTPParseError

from poolbench_locust.engine.limits import MB
from poolbench_locust.engine.transport import BoundedResponse, Exchange, ProtocolError

CHUNK = 64 * 1024
"""Bytes asked of each read: one loopback segment. Larger chunks cost more, not less: at 256 KiB the
buffers of every read made glibc give memory back and take it again (a brk and page faults per read),
and 50 users streaming 64 MB bodies grew by 31 MB instead of 9 (bench/memory.py, issue 6)."""
YIELD_EVERY = 16
"""Chunks read, or inflated, between two checks of the deadline and yields to the hub: 1 MiB."""


class BadResponse(Exception):
    """The response is unusable; the text says what was wrong, `received` how far it got."""

    def __init__(self, message: str, received: int = 0) -> None:
        super().__init__(message)
        self.received = received


@dataclass(slots=True)
class Body:
    wire_bytes: int
    """Bytes received on the wire: Locust's response_length."""
    size: int
    """Bytes after Content-Encoding was undone: what the answer's byte checks compare."""
    data: bytes | None
    """The whole decoded body, when it was kept."""
    head: bytes
    """The first decoded bytes (up to the `head` asked for), for checks of the first vector."""
    ended: float
    """perf_counter() when the last byte had been read: where the request's clock stops, before any check."""


_GZIP = frozenset({"gzip", "x-gzip"})


def _decoder(resp: Any) -> Any:
    """The inflater of the body's Content-Encoding, or None. The header is a list of codings in the order
    applied (RFC 9110 8.4), spaces allowed around each, `identity` meaning none; it may come twice."""
    raw = resp.headers.get("content-encoding") or ""
    text = ",".join(raw) if isinstance(raw, list) else str(raw)
    codings = [c for c in (part.strip().lower() for part in text.split(",")) if c and c != "identity"]
    if not codings:
        return None
    if len(codings) == 1 and codings[0] in _GZIP:
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if codings == ["deflate"]:
        return zlib.decompressobj()
    raise BadResponse(f"unsupported Content-Encoding {text.strip()[:40]!r}")


def _truncated(resp: Any) -> str:
    if resp.headers.get("content-length") is not None:
        return "body truncated: connection closed before Content-Length bytes arrived"
    return "body truncated: connection closed in the middle of the chunked body"


def _declared_length(raw: BoundedResponse) -> int | None:
    try:
        return raw.content_length
    except ValueError:  # a Content-Length that is not a number: the parser refuses the body as it comes
        return None


def too_large(max_kept: int, inflated: bool) -> str:
    return f"JSON body larger than --max-body-mb ({max_kept // MB} MB){' once inflated' if inflated else ''}"


def read_body(
    resp: Any,
    exchange: Exchange,
    *,
    keep: bool,
    head: int = 0,
    limit: int | None = None,
    max_kept: int | None = None,
    spare: bool = False,
) -> Body:
    """Read the body of a streamed FastResponse to its end, then stop the clock.

    A kept body larger than `max_kept` (after inflating) fails; with `limit`, reading stops after that
    many bytes (after inflating) and the connection is dropped: enough of an error page for its message.
    `exchange` is the request's, whose deadline ends the read however fast the bytes come. `spare`: the body
    is kept only if it can be (a binary body kept for the consistency check): past `max_kept` it is dropped,
    `data` None, instead of a failure.
    """
    raw = exchange.response  # resp's own (transport.send), read without reaching into resp
    assert raw is not None  # resp has a head: its response is the exchange's
    parts: list[bytes] = []
    first = b""
    size = 0
    read = resp.read
    decoder = None
    try:
        decoder = _decoder(resp)
        declared = _declared_length(raw)
        if keep and max_kept is not None and declared is not None and decoder is None and declared > max_kept:
            if not spare:
                raise BadResponse(too_large(max_kept, False))
            keep = False
        if keep and decoder is None and limit is None and declared is not None:
            # A JSON body of a known, bounded length, to parse whole: one read() to the end, into
            # geventhttpclient's own buffer, saves a copy per chunk and the join (a third of the cost of 700 kB).
            data = read()
            return Body(raw.body_bytes, len(data), data, data[:head] if head else b"", perf_counter())
        if not keep and decoder is None and limit is None:
            first = raw.drain(head, CHUNK, YIELD_EVERY)
            return Body(raw.body_bytes, raw.body_bytes, None, first, perf_counter())
        reads = 0
        full = False
        while not full and (chunk := read(CHUNK)):
            reads += 1
            if reads % YIELD_EVERY == 0:  # a fast sender never lets a recv block: let the other users run
                exchange.check_deadline()
                gevent.idle()
            for piece in (chunk,) if decoder is None else _inflate(decoder, chunk, exchange):
                size += len(piece)
                if keep:
                    if max_kept is not None and size > max_kept:
                        if not spare:
                            raise BadResponse(too_large(max_kept, decoder is not None))
                        keep, parts = False, []  # kept for a comparison only: dropped, the request stands
                    else:
                        parts.append(piece)
                if len(first) < head:
                    first += piece[: head - len(first)]
                if limit is not None and size >= limit:
                    full = True
                    break
        if full:
            resp.release()  # the rest is not read, so the connection cannot be reused
        elif decoder is not None and not decoder.eof:
            raise BadResponse("corrupt compressed body: the gzip/deflate stream ends early")
    except BadResponse as e:  # a body left half-read must not go back to the connection pool
        resp.release()
        e.received = raw.body_bytes
        raise
    except gevent.Timeout as e:
        if e is not exchange.deadline:
            raise
        raise BadResponse("timeout: the body did not end within --request-timeout", raw.body_bytes) from None
    except ProtocolError as e:
        raise BadResponse(str(e), raw.body_bytes) from None
    except HTTPParseError as e:
        message = _truncated(resp) if "ncomplete" in str(e) else f"invalid HTTP body: {e}"
        raise BadResponse(message, raw.body_bytes) from None
    except ConnectionResetError:
        raise BadResponse("connection reset by the server in the middle of the body", raw.body_bytes) from None
    except TimeoutError:
        raise BadResponse("socket timeout in the middle of the body (--request-timeout)", raw.body_bytes) from None
    except OSError as e:
        raise BadResponse(f"socket error in the middle of the body: {e.strerror or e}", raw.body_bytes) from None
    ended = perf_counter()
    data = (parts[0] if len(parts) == 1 else b"".join(parts)) if keep else None
    return Body(raw.body_bytes, size, data, first, ended)


def _inflate(decoder: Any, chunk: bytes, exchange: Exchange) -> Iterator[bytes]:
    """Inflate one wire chunk in steps of CHUNK bytes out, yielding to the hub between a few: one 64 KiB
    chunk of a compressed run of zeros is 64 MB, which must neither sit in memory at once nor hold
    the process for the time it takes to inflate."""
    steps = 0
    while chunk:
        try:
            piece = decoder.decompress(chunk, CHUNK)
        except zlib.error as e:
            raise BadResponse(f"corrupt compressed body: {e}") from None
        chunk = decoder.unconsumed_tail
        yield piece
        steps += 1
        if steps % YIELD_EVERY == 0:
            exchange.check_deadline()
            gevent.idle()
