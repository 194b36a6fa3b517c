"""Just enough HTTP/1.1 over a gevent socket: read requests, write replies with control of every byte.

Not pywsgi: the faults need what a WSGI server never does on purpose, a reset in the middle of the
body, a Content-Length that lies, a chunk cut in half, and the body trickled out on a schedule.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass
from http import HTTPStatus

import gevent

from poolbench_locust.mockserver.faults import BEFORE_HEADERS, MID_BODY, WIRE
from poolbench_locust.mockserver.reply import Reply

MAX_HEAD = 64 * 1024
MAX_BODY = 512 * 1024 * 1024
PIECE = 64 * 1024
"""Pacing unit of a trickled body; also the size under which parts are joined into one send."""
RST_GRACE_S = 0.05
"""An RST discards what the kernel has not sent yet: give the half body time to leave first."""

_REASONS = {s.value: s.phrase for s in HTTPStatus}


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    """Lower-case names; the last of repeated headers wins."""
    body: bytes
    keep_alive: bool
    arrived: float
    """time.monotonic() when the whole request had been read: the ttfb delay counts from here."""

    def accepts_gzip(self) -> bool:
        for token in self.headers.get("accept-encoding", "").lower().split(","):
            name, _, params = token.strip().partition(";")
            if name.strip() in ("gzip", "*") and params.replace(" ", "") not in ("q=0", "q=0.0"):
                return True
        return False


def _recv_into(sock: socket.socket, buf: bytearray, size: int) -> bool:
    data = sock.recv(size)
    buf += data
    return bool(data)


def read_request(sock: socket.socket, buf: bytearray) -> Request | None:
    """The next request on the connection, or None when the client closed it between requests.

    `buf` carries bytes already received past the previous request.
    """
    while (end := buf.find(b"\r\n\r\n")) < 0:
        if len(buf) > MAX_HEAD:
            raise HttpError(431, "request headers too large")
        if not _recv_into(sock, buf, 65536):
            return None
    lines = bytes(buf[:end]).decode("latin-1").lstrip("\r\n").split("\r\n")
    del buf[: end + 4]
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, f"malformed request line {lines[0][:100]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpError(400, f"malformed header line {line[:100]!r}")
        headers[name.strip().lower()] = value.strip()
    if "transfer-encoding" in headers:
        raise HttpError(501, "request bodies must come with Content-Length")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise HttpError(400, "invalid Content-Length") from None
    if not 0 <= length <= MAX_BODY:
        raise HttpError(413, "request body too large")
    if length > len(buf) and headers.get("expect", "").lower() == "100-continue":
        sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")  # curl waits a second for it otherwise
    while len(buf) < length:
        if not _recv_into(sock, buf, min(max(length - len(buf), 65536), 1 << 20)):
            return None
    body = bytes(buf[:length])
    del buf[:length]
    connection = headers.get("connection", "").lower()
    keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    return Request(method, target.split("?", 1)[0], headers, body, keep_alive, time.monotonic())


def _sleep_until(deadline: float) -> None:
    while (wait := deadline - time.monotonic()) > 0:
        gevent.sleep(wait)


def _send(sock: socket.socket, parts: list[bytes | memoryview], writes: str = "sized") -> None:
    """Write `parts` as `writes` says (send_reply): "split", each on its own; "one" and "chunk", joined;
    "sized", joined up to PIECE bytes (saves syscalls), else each as it is (no copy of megabytes)."""
    if not parts:
        return
    if writes == "split" or (writes == "sized" and sum(len(p) for p in parts) > PIECE):
        for part in parts:
            sock.sendall(part)
    else:
        sock.sendall(b"".join(parts))


def close(sock: socket.socket, reset: bool = False) -> None:
    if reset:  # linger 0: close() sends RST instead of FIN
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _head(reply: Reply, size: int, chunked: bool, lie: bool, keep_alive: bool) -> bytes:
    lines = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Unknown')}", f"content-type: {reply.content_type}"]
    lines += [f"{name}: {value}" for name, value in reply.headers.items()]
    if chunked:
        lines.append("transfer-encoding: chunked")
    else:
        lines.append(f"content-length: {size + size // 2 + 1 if lie else size}")
    if not keep_alive:
        lines.append("connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def send_reply(
    sock: socket.socket,
    reply: Reply,
    *,
    arrived: float = 0.0,
    ttfb_ms: float = 0.0,
    body_ms: float = 0.0,
    fault: str | None = None,
    stall_ms: float = 0.0,
    keep_alive: bool = True,
    writes: str = "sized",
    chunks: int = 1,
) -> bool:
    """Write `reply`, carrying out a wire fault if one is given.

    Returns True when the last byte was handed to the kernel and the connection may serve another
    request. The body goes out in n pieces, piece i at t_headers + body_ms * i / (n - 1), so its
    last byte leaves no earlier than body_ms after the headers; a chunked body is framed in at least
    `chunks` pieces, one chunk each. `writes` cuts the answer into writes, as servers do (the client's
    reads follow them): "sized", the parts of each piece joined up to PIECE bytes, larger ones each on
    their own (a large chunked body: the head, the size line, the data, its CRLF, the terminating chunk);
    "one", each piece in one write (not trickled: the whole answer); "chunk", as a streaming response
    writes (uvicorn's): the head, each chunk (size line, data, CRLF), the terminating chunk, each in one
    write; "split", every part on its own (the head, each chunk's size line, data and CRLF, the terminator).
    """
    _sleep_until(arrived + ttfb_ms / 1000)
    if fault in BEFORE_HEADERS:
        if fault == "stall-before-headers":
            gevent.sleep(stall_ms / 1000)
        close(sock, reset=fault == "reset-before-headers")
        return False
    body = memoryview(reply.body)
    size = len(body)
    chunked = (reply.chunked or fault == "cut-chunk") and fault != "short-content-length"
    pending: list[bytes | memoryview] = [
        _head(reply, size, chunked, lie=fault == "short-content-length", keep_alive=keep_alive and fault not in WIRE)
    ]
    streamed = writes in ("chunk", "split")
    if streamed:  # a streaming response's headers leave before its body is made
        _send(sock, pending, writes)
        pending = []
    cut = size // 2 if fault in MID_BODY else size
    n = max(2, -(-size // PIECE)) if body_ms > 0 else 1
    if chunked:
        n = max(n, min(chunks, size))
    started = time.monotonic()
    for i in range(n):
        start, end = size * i // n, size * (i + 1) // n
        if i:
            _sleep_until(started + body_ms / 1000 * i / (n - 1))
        if end > start:  # an empty chunk would end a chunked body
            if chunked:
                pending.append(b"%x\r\n" % (end - start))
            pending.append(body[start : min(end, cut)])
            if cut < end:
                _send(sock, pending, writes)
                _after_cut(sock, fault, stall_ms)
                return False
            if chunked:
                pending.append(b"\r\n")
        if chunked and i == n - 1:
            if streamed:  # the terminating chunk in a write of its own
                _send(sock, pending, writes)
                pending = []
            pending.append(b"0\r\n\r\n")
        _send(sock, pending, writes)
        pending = []
    if fault in WIRE:
        close(sock)
        return False
    return True


def _after_cut(sock: socket.socket, fault: str | None, stall_ms: float) -> None:
    if fault == "reset-mid-body":
        gevent.sleep(RST_GRACE_S)
        close(sock, reset=True)
        return
    if fault == "stall-mid-body":
        gevent.sleep(stall_ms / 1000)
    close(sock)
