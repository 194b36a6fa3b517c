"""Reading a response body to its last byte, kept (JSON) or counted and dropped (binary).

geventhttpclient leaves the body on the socket when Locust is asked to `stream`; this module
reads it with `read(CHUNK)` and turns every way a body can go wrong into a `BadResponse` whose
text is stable (no byte counts that vary per request), so Locust's failures table groups it.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import gevent
from geventhttpclient.response import HTTPParseError

CHUNK = 64 * 1024
"""Bytes asked of each read: one loopback segment. Larger chunks cost more, not less: at 256 KiB the
buffers of every read made glibc give memory back and take it again (a brk and page faults per read),
and 50 users streaming 64 MB bodies grew by 31 MB instead of 9 (bench/memory.py, issue 6)."""


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


def _decoder(resp: Any) -> Any:
    encoding = (resp.headers.get("content-encoding") or "identity").lower()
    if encoding == "identity":
        return None
    if encoding == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    raise BadResponse(f"unsupported Content-Encoding {encoding!r}")


def _truncated(resp: Any) -> str:
    if resp.headers.get("content-length") is not None:
        return "body truncated: connection closed before Content-Length bytes arrived"
    return "body truncated: connection closed in the middle of the chunked body"


def read_body(
    resp: Any, *, keep: bool, head: int = 0, limit: int | None = None, deadline: gevent.Timeout | None = None
) -> Body:
    """Read the body of a streamed FastResponse to its end (or to `limit` bytes, then drop the connection).

    `deadline` is the request's own timer: when it fires mid-body, that is a timeout of this request.
    """
    decoder = _decoder(resp)
    parts: list[bytes] = []
    first = b""
    wire = size = 0
    read = resp.read
    try:
        if keep and decoder is None and limit is None and not head:
            # A JSON body to parse whole: one read() to the end, into geventhttpclient's own buffer,
            # saves a copy per chunk and the join (about a third of the reading cost of 700 kB).
            data = read()
            return Body(len(data), len(data), data, b"", perf_counter())
        while True:
            chunk = read(CHUNK)
            if not chunk:
                break
            wire += len(chunk)
            pieces = (chunk,) if decoder is None else _inflate(decoder, chunk)
            for piece in pieces:
                size += len(piece)
                if keep:
                    parts.append(piece)
                if len(first) < head:
                    first += piece[: head - len(first)]
            if limit is not None and wire >= limit:
                resp.release()  # the rest is not read, so the connection cannot be reused
                break
        if decoder is not None and not decoder.eof and limit is None:
            raise BadResponse("corrupt compressed body: the gzip/deflate stream ends early", wire)
    except BadResponse as e:  # a body left half-read must not go back to the connection pool
        resp.release()
        e.received = wire
        raise
    except gevent.Timeout as e:
        if e is not deadline:
            raise
        raise BadResponse("timeout: the body did not end within --request-timeout", wire) from None
    except HTTPParseError as e:
        message = _truncated(resp) if "ncomplete" in str(e) else f"invalid HTTP body: {e}"
        raise BadResponse(message, wire) from None
    except ConnectionResetError:
        raise BadResponse("connection reset by the server in the middle of the body", wire) from None
    except TimeoutError:
        raise BadResponse("socket timeout in the middle of the body (--request-timeout)", wire) from None
    except OSError as e:
        raise BadResponse(f"socket error in the middle of the body: {e.strerror or e}", wire) from None
    ended = perf_counter()
    data = (parts[0] if len(parts) == 1 else b"".join(parts)) if keep else None
    return Body(wire, size, data, first, ended)


def _inflate(decoder: Any, chunk: bytes) -> list[bytes]:
    # max_length bounds what one chunk may expand to: a compressed run of zeros must not
    # become hundreds of megabytes in memory at once.
    out: list[bytes] = []
    try:
        while chunk:
            out.append(decoder.decompress(chunk, CHUNK))
            chunk = decoder.unconsumed_tail
    except zlib.error as e:
        raise BadResponse(f"corrupt compressed body: {e}") from None
    return out
