"""Hostile servers for tests/test_hostile_transport.py that must run in a process of their own.

A sender in the test's own process shares its gevent hub with the client, so every send that fills
the socket buffer lets the client's timers run. A server in its own process sends as fast as the
client reads, and the client's recv never blocks: that is how a real fast server behaves, and the
only way to test that the client's deadline holds without the hub's help. Each handler answers its
first connection with the hostile behaviour and every later one with a valid answer, so the test
can check that the user's next request succeeds. Every stream is bounded (STREAM_LIMIT) so that a
client that never stops reading still ends.
"""

from __future__ import annotations

import itertools
import os
import socket
import zlib

from tests.support.hostile import read_request, response

STREAM_LIMIT = int(os.environ.get("HOSTILE_STREAM_LIMIT", 2 << 30))
"""Bytes any endless stream sends at most: far more than any bound the client keeps (smaller to
measure a client without bounds, which keeps all of it)."""
BLOCK = b"a" * 65536
FAST_LIMIT = 1 << 40
"""A body no client reads within a test's timeout: an idle machine reads 2 GiB of loopback in about
1.4 s, which let the body end before a 1.5 s deadline. The client's close ends the stream."""

VALID_EMBEDDING = b'{"data":[{"index":0,"embedding":[0.25,0.5,0.75]}],"usage":{"prompt_tokens":3,"total_tokens":3}}'
"""A valid /v1/embeddings answer to a request of one input."""


def valid_answers(sock: socket.socket) -> None:
    """Answer every request on this connection with a valid embedding."""
    while read_request(sock) is not None:
        sock.sendall(response(200, VALID_EMBEDDING))


def _stream(sock: socket.socket, block: bytes, limit: int = STREAM_LIMIT) -> None:
    sent = 0
    while sent < limit:
        sock.sendall(block)
        sent += len(block)


def endless_header(sock: socket.socket, conn: int) -> None:
    """Headers that never end: one header value streamed as fast as the client reads it."""
    if conn:
        return valid_answers(sock)
    read_request(sock)
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Forever: ")
    _stream(sock, BLOCK)


def endless_chunked_json(sock: socket.socket, conn: int) -> None:
    """A chunked JSON body that never ends, as fast as the client reads it."""
    if conn:
        return valid_answers(sock)
    read_request(sock)
    sock.sendall(response(200, b"", content_length=-1, headers=[("Transfer-Encoding", "chunked")]))
    sock.sendall(b"%x\r\n" % len(b'{"data":[') + b'{"data":[\r\n')
    _stream(sock, b"%x\r\n%s\r\n" % (len(BLOCK), BLOCK))


def fast_binary(sock: socket.socket, conn: int) -> None:
    """A binary body of FAST_LIMIT bytes (declared by Content-Length), as fast as the client reads it."""
    if conn:
        return valid_answers(sock)
    read_request(sock)
    sock.sendall(response(200, b"", content_type="application/octet-stream", content_length=FAST_LIMIT))
    _stream(sock, BLOCK, FAST_LIMIT)


def fast_gzip_binary(sock: socket.socket, conn: int) -> None:
    """An endless gzip'd binary body of zeros (1,000 times its size once inflated), as fast as the
    client reads: the client's inflating is slower than the sending, so its reads never wait."""
    if conn:
        return valid_answers(sock)
    read_request(sock)
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    # After a full flush the packer starts afresh, so every MiB of zeros packs to the same bytes.
    start = packer.compress(b"") + packer.flush(zlib.Z_FULL_FLUSH)
    block = packer.compress(bytes(1 << 20)) + packer.flush(zlib.Z_FULL_FLUSH)
    headers = [("Content-Encoding", "gzip")]
    sock.sendall(response(200, start, headers, "application/octet-stream", content_length=STREAM_LIMIT))
    _stream(sock, block * 64)


def gzip_of_zeros(size: int) -> bytes:
    """A gzip stream that inflates to `size` zero bytes: about a thousandth of that on the wire."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    parts = [packer.compress(block) for _ in range(size >> 20)]
    parts.append(packer.compress(bytes(size & ((1 << 20) - 1))))
    parts.append(packer.flush())
    return b"".join(parts)


def close_after_answer(sock: socket.socket, _conn: int) -> None:
    """A valid answer, then the connection closed at once, without `Connection: close`: what any server
    may do to an idle keep-alive connection (uvicorn after 5 s)."""
    if read_request(sock) is not None:
        sock.sendall(response(200, VALID_EMBEDDING))


_errors = itertools.count()


def unique_errors(sock: socket.socket, _conn: int) -> None:
    """Every request a 500 whose message no other request got: more distinct failure messages than
    the failures table keeps as rows of their own."""
    while read_request(sock) is not None:
        sock.sendall(response(500, b'{"error": {"message": "failure %d"}}' % next(_errors)))
