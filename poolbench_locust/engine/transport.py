"""The engine's HTTP/1.1 connection: geventhttpclient's request builder, parser and connection pool,
with the bounds and the one resend that a hostile or merely ordinary server needs.

geventhttpclient trusts the server in four ways this module takes back:

- its parser keeps whatever header a server sends, and its reads only give the request's deadline
  a chance to fire when a recv blocks: a header (or body) streamed as fast as the client reads it
  never ended. `BoundedResponse` counts the head against --max-header-kb (and the request's
  allowance: a header that grows with the batch, AnswerForm.head_allowance) and checks the deadline
  on every block received, blocking or not.
- its response gives its socket back when an interim 1xx (100 Continue, 103 Early Hints) ends, so a
  final response whose body came in a later read had an empty body. `BoundedResponse` keeps the
  socket until the final response ends.
- its parser takes bytes after a complete final response as the next response to the same request
  (a 204 and then a 200 became the 200), and a socket whose response ended is back in the pool
  before anyone knows whether more came. `BoundedResponse` refuses a second response, and the
  engine closes the connection of every request that failed (`Exchange.drop_connection`).
- it resends no POST (RFC 9110 lets a client retry only idempotent methods on its own), so a
  keep-alive connection the server closed while idle became a failed request. A pooling request
  has no side effect, and a request on a reused connection that failed before any byte of its
  answer came never reached a server that answered it: `EngineClient` resends exactly such a
  request once, on a fresh connection. FastHttpUser sets max_retries to 0 and UserAgent retries
  no POST, so this is the only resend.

A body the engine only counts (a binary answer's) is read past the parser (`BoundedResponse._pump`): its head
is parsed apart from the bytes that came with it, and the body is received into one buffer of the process's
and counted where it lies, only its chunked framing read in Python. The parser copied every received piece
of data into a new bytearray for a Python call; a 256 kB answer took five receives of a new 64 KiB bytes
object each, and now takes one or two.

The engine sends on that pool itself (`send`), not through Locust's `FastHttpSession.request` and
geventhttpclient's `UserAgent.urlopen`: their work per request (a new request object with its URL
parsed, the headers merged anew, the response context manager) is bookkeeping the engine does not
need, about half of a small request's client CPU beyond a plain FastHttpUser's. What they did that
a request needs is here: the headers as they merged them (`aim`, once per plan) and the 307/308
redirects followed (`send`).

Every private part of geventhttpclient (and of Locust's FastResponse and gevent's socket) the engine
reaches is reached here and nowhere else: the parser's hooks `_on_status`, `_on_header_field`,
`_on_header_value`, `_on_headers_complete`, `_on_message_begin`, `_on_message_complete` and `_on_body`,
its `_header_state`, `_headers_index` and `_body_buffer`, the response's `_sock` and `_sent_request`, the client's
`_connection_pool` and `_build_request`, the pool's `_is_socket_alive`, the user agent's `clientpool`,
FastResponse's `_response` and gevent's socket's `_sock`. engine/user.py and engine/body.py use them
through `install`, `send`, `ended_cleanly` and `BoundedResponse.drain`, which cost no call more per
request than the accesses they replace. tests/test_private_parts.py fails naming the part a release
removes or reshapes, and pyproject.toml bounds geventhttpclient to the newest release it passed on.
"""

from __future__ import annotations

import errno
import socket
import ssl
import weakref
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import gevent
from geventhttpclient.client import HEADER_CONTENT_LENGTH, HTTPClient, HTTPClientPool
from geventhttpclient.header import Headers
from geventhttpclient.response import (
    HEADER_STATE_FIELD,
    HTTPConnectionClosed,
    HTTPParseError,
    HTTPResponse,
    HTTPSocketPoolResponse,
)
from geventhttpclient.url import URL
from geventhttpclient.useragent import CompatRequest, UnsupportedRedirectSchemeError
from locust.contrib.fasthttp import FAILURE_EXCEPTIONS, FastRequest, FastResponse

MAX_REDIRECTS = 5
"""307/308 hops followed for one request before it fails."""
FOLLOWED_REDIRECTS = frozenset({307, 308})
"""The redirects that keep the method and the body. A 301/302/303 turns the POST into a body-less GET,
whose answer is not an answer to the request sent: it is reported as a failure, never followed."""
STATUS_LINE_OVERHEAD = len("HTTP/1.1 200 \r\n")
HEADER_LINE_OVERHEAD = len(": \r\n")

_PLAIN_HTTP_REASONS = frozenset(
    {"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE"}
)
"""OpenSSL's reasons when the bytes that came back are not TLS: a plain HTTP server answered."""


class HeadersTooLarge(HTTPParseError):
    """The response head outgrew --max-header-kb."""


class ProtocolError(HTTPParseError):
    """The server broke HTTP/1.1's framing in a way the parser accepts: its connection is not reusable."""


SECOND_RESPONSE = (
    "protocol error: data after the end of the response (a second response, or a body longer than its Content-Length)"
)


class Exchange:
    """The request in flight of one user: its deadline, its bounds, and what happened on the wire."""

    def __init__(self, max_header_bytes: int) -> None:
        self.max_header_bytes = max_header_bytes
        self.head_allowance = 0
        """Bytes the request's answer may add to the head beyond max_header_bytes (AnswerForm.head_allowance)."""
        self.allowance_why = ""
        """What that allowance is, in the failure's words."""
        self.deadline: gevent.Timeout | None = None
        self.expires_at = float("inf")
        self.sent_at = 0.0
        """perf_counter() when the last attempt began: the resend's, if there was one."""
        self.retried = False
        self.connected = False
        """Whether the last attempt had its connection: a failure before that is the connect's (TLS's)."""
        self.response: BoundedResponse | None = None
        """The response of the last attempt: the one `send` returns (each redirect's hop and the resend
        replace it), which engine/body.py reads."""
        self.sock: socket.socket | None = None
        self.drains = False
        """Whether the request's answer is likely counted and dropped (BoundedResponse.drain): its head is then
        parsed apart from the body's first bytes, which the drain reads past the parser."""

    def begin(
        self,
        deadline: gevent.Timeout,
        seconds: float,
        head_allowance: int = 0,
        allowance_why: str = "",
        drains: bool = False,
    ) -> None:
        self.head_allowance = head_allowance
        self.allowance_why = allowance_why
        self.drains = drains
        self.deadline = deadline
        self.expires_at = perf_counter() + seconds
        self.retried = False
        self._attempt()

    def end(self) -> None:
        """The request is over: nothing sent on this client afterwards may inherit its deadline."""
        self.deadline = None
        self.expires_at = float("inf")
        self.drains = False

    def _attempt(self) -> None:
        self.sent_at = perf_counter()
        self.connected = False
        self.response = None
        self.sock = None

    def check_deadline(self) -> None:
        """Raise the request's own timeout once it is due, whether or not the hub had a chance to."""
        if self.deadline is not None and perf_counter() >= self.expires_at:
            self.deadline.close()  # raised here: its timer must not fire a second time
            raise self.deadline

    @property
    def received(self) -> int:
        """Bytes of the answer received on the wire so far, head and body."""
        return self.response.wire_bytes if self.response is not None else 0

    @property
    def body_received(self) -> int:
        """Bytes of the body received so far (after de-chunking, before inflating)."""
        return self.response.body_bytes if self.response is not None else 0

    def drop_connection(self) -> None:
        """Close the connection of this request, also when it is back in the pool: the pool drops a
        closed socket instead of reusing it, so what a bad server left on it reaches no other request."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def head_too_large(exchange: Exchange) -> str:
    base = f"--max-header-kb ({exchange.max_header_bytes // 1024} KiB)"
    if not exchange.head_allowance:
        return f"response headers larger than {base}"
    allowed = (exchange.max_header_bytes + exchange.head_allowance) // 1024
    return f"response headers larger than {allowed} KiB: {base} and {exchange.allowance_why}"


class BoundedResponse(HTTPSocketPoolResponse):
    """geventhttpclient's response, with the head bounded, the deadline checked on every block, at
    most one final response, and the bytes of the body counted as they arrive."""

    def __init__(self, sock: Any, pool: Any, exchange: Exchange, **kw: Any) -> None:
        self._exchange = exchange
        self._head_limit = exchange.max_header_bytes + exchange.head_allowance
        self.head_bytes = 0
        self.body_bytes = 0
        self.wire_bytes = 0
        self._final_seen = False
        self._broken = False
        self._dropping = False
        self.kept_head = bytearray()
        self._head_wanted = 0
        self._split_head = exchange.drains
        self._early: tuple[bytes, int] | None = None
        """The block that ended the final head, and where its body begins: bytes the parser has not seen."""
        exchange.response = self
        super().__init__(sock, pool, **kw)

    def feed(self, data: bytes | str) -> None:
        self.wire_bytes += len(data)
        self._exchange.check_deadline()
        if self._split_head and type(data) is bytes and (end := data.find(b"\r\n\r\n") + 4) >= 4:
            # The head and the body's first bytes, parsed apart: where the final head ends there, the body waits
            # for its reader (drain reads it past the parser; read() hands it to the parser)
            self._split_head = False
            self._parse(data[:end])
            if self.headers_complete and not self.message_complete and not self.body_bytes and self.get_code() >= 200:
                self._early = (data, end)
                return
            data = data[end:]  # an interim 1xx, a head the parser ended elsewhere, no body: as one stream
            if not data:
                return
        self._parse(data)

    def _parse(self, data: bytes | str) -> None:
        try:
            super().feed(data)
        except HTTPParseError:
            self._broken = True
            raise

    def _resume(self) -> None:
        """Hand the parser the body's first bytes that came with the head: the body is read through it."""
        if (early := self._early) is None:
            return
        self._early = None
        data, start = early
        try:
            if start < len(data):
                self._parse(data[start:])
        except BaseException:
            self.release()  # as geventhttpclient's read() does: a half-read connection is not reused
            raise

    def read(self, length: int | None = None) -> bytes:
        self._resume()
        return super().read(length)

    def readline(self, sep: bytes = b"\r\n") -> bytes:
        self._resume()
        return super().readline(sep)

    def should_close(self) -> bool:
        return self._broken or super().should_close()

    def _count_head(self, size: int) -> None:
        self.head_bytes += size
        if self.head_bytes > self._head_limit:
            self._broken = True
            raise HeadersTooLarge(head_too_large(self._exchange))

    def _on_status(self, msg: str) -> None:
        self._count_head(len(msg) + STATUS_LINE_OVERHEAD)
        super()._on_status(msg)

    def _on_header_field(self, string: str) -> None:
        continued = self._header_state == HEADER_STATE_FIELD  # the parser hands a field over in pieces
        self._count_head(len(string) + (0 if continued else HEADER_LINE_OVERHEAD))
        super()._on_header_field(string)

    def _on_header_value(self, string: str) -> None:
        self._count_head(len(string))
        super()._on_header_value(string)

    def _on_headers_complete(self) -> int | bool | None:
        self._final_seen = self.get_code() >= 200  # an interim 1xx is followed by the final response
        return super()._on_headers_complete()

    def _on_message_complete(self) -> None:
        if self.get_code() < 200:
            # An interim 1xx ends here and the final response follows on this socket. The base class
            # would release the socket (back to the pool, and no longer this response's): a final
            # response whose body came in a later read was read as an empty body, on a socket already
            # handed out again. Only the parser's state is marked.
            HTTPResponse._on_message_complete(self)
            return
        super()._on_message_complete()

    def _on_message_begin(self) -> None:
        if self._final_seen:
            self._broken = True
            raise ProtocolError(SECOND_RESPONSE)
        super()._on_message_begin()

    def drain(self, head: int, chunk: int, every: int) -> bytes:
        """Read the body to its end and drop it but for its first `head` bytes; return those.

        The bytes still go through the parser (Content-Length and chunked framing, the deadline and the
        bounds checked as for any read, the connection back to the pool at the end), but none is copied
        into its buffer: read(chunk) appended every byte there, then sliced and copied it out, three
        copies of a body that is only counted. `chunk` bytes are asked of each recv; every `every`
        receives the deadline is checked and the other users run (a fast sender never lets a recv block).
        """
        if self._early is not None and (length := self._framing()) is not None:
            return self._pump(length, head, every)
        self._resume()
        buffered = self._body_buffer  # what came with the head: kept up to `head`, then dropped
        self.kept_head = bytearray(buffered[:head])
        self._head_wanted = head
        del buffered[:]
        self._dropping = True
        reads = 0
        try:
            while not self.message_complete and (sock := self._sock) is not None:
                self.feed(sock.recv(chunk))  # b"": the stream ended, which the parser judges (complete or truncated)
                reads += 1
                if reads % every == 0:
                    self._exchange.check_deadline()
                    gevent.idle()
        except BaseException:
            self.release()  # as geventhttpclient's read() does: a half-read connection is not reused
            raise
        return bytes(self.kept_head)

    def _on_body(self, buf: bytearray) -> None:
        self.body_bytes += len(buf)
        if not self._dropping:
            super()._on_body(buf)
        elif (missing := self._head_wanted - len(self.kept_head)) > 0:
            self.kept_head += buf[:missing]

    def _framing(self) -> int | None:
        """The body's length where the drain reads it itself: its Content-Length, or -1 for chunked; None for
        any other framing (several codings, both headers, a length that is not a number): the parser reads it."""
        index = self._headers_index
        coding, length = index.get("transfer-encoding"), index.get("content-length")
        if length is None and isinstance(coding, str) and coding.strip().lower() == "chunked":
            return -1
        if coding is None and isinstance(length, str) and length.isascii() and length.isdigit():
            return int(length)
        return None

    def _pump(self, length: int, head: int, every: int) -> bytes:
        """drain, reading the body past the parser: each receive into one buffer of the process's (PUMP_BYTES, no
        allocation), its bytes counted where they are, only the chunked framing looked at (the size lines, the
        CRLF after each chunk's data, the trailers, bounded like the head). The parser's receive of 64 KiB
        allocated a bytes object, and handed each piece of data to Python in a bytearray of its own: two
        copies and a Python call a piece, for bytes only counted.

        `length`: the Content-Length, or -1 for chunked. Bytes after the end in the same receive are a second
        response (CRLFs aside, which the parser skips too); a close before the end is a truncated body. The buffer
        is shared: what it holds is used before the next yield to the hub."""
        assert self._early is not None
        source: bytes | bytearray
        source, at = self._early
        self._early = None
        end = len(source)
        kept = self.kept_head = bytearray()
        chunked = length < 0
        state, left = (_SIZE, 0) if chunked else (_DATA, length)
        line = bytearray()  # chunked: the framing line as far as it came
        reads = 0
        try:
            while True:
                while at < end:
                    if state == _DATA:
                        take = min(left, end - at)
                        self.body_bytes += take
                        if (missing := head - len(kept)) > 0:
                            kept += memoryview(source)[at : at + min(take, missing)]
                        at += take
                        left -= take
                        if not left:
                            state = _CRLF if chunked else _DONE
                        continue
                    if state == _DONE:
                        break
                    newline = source.find(b"\n", at, end)
                    stop = end if newline < 0 else newline + 1
                    line += memoryview(source)[at:stop]
                    at = stop
                    if len(line) > CHUNK_LINE_LIMIT:
                        raise HTTPParseError(f"chunk framing line longer than {CHUNK_LINE_LIMIT} bytes")
                    if newline >= 0:
                        state, left = self._framed(state, line)
                        line.clear()
                if state == _DONE:
                    if source[at:end].strip(b"\r\n"):
                        raise ProtocolError(SECOND_RESPONSE)
                    break
                if (sock := self._sock) is None:
                    raise HTTPConnectionClosed("connection closed.")
                reads += 1
                if reads % every == 0:  # a fast sender never lets a recv block: let the other users run
                    gevent.idle()
                received = sock.recv_into(_PUMPED)
                self.wire_bytes += received
                self._exchange.check_deadline()
                if not received:
                    raise HTTPParseError("Incomplete body: the connection closed before its end")
                source, at, end = _PUMPED, 0, received
        except HTTPParseError:
            self._broken = True
            self.release()
            raise
        except BaseException:
            self.release()
            raise
        self._on_message_complete()  # marks the message complete and gives the socket back to the pool
        return bytes(kept)

    def _framed(self, state: int, line: bytearray) -> tuple[int, int]:
        """The chunked body's next state after one framing line (CRLF included), and the data bytes it announces."""
        if not line.endswith(b"\r\n"):
            raise HTTPParseError("Expected CRLF at the end of a chunk framing line")
        text = bytes(line[:-2])
        if state == _SIZE:
            digits = text.split(b";", 1)[0]  # chunk extensions are ignored
            if not 0 < len(digits) <= 16 or digits.strip(_HEX):
                raise HTTPParseError("Invalid character in chunk size")
            size = int(digits, 16)
            return (_DATA, size) if size else (_TRAILER, 0)
        if state == _CRLF:
            if text:
                raise HTTPParseError("Expected CRLF after chunk data")
            return _SIZE, 0
        if not text:  # the empty line after the last chunk and its trailers
            return _DONE, 0
        self._count_head(len(line))  # trailers are head: bounded as it is
        return _TRAILER, 0


PUMP_BYTES = 256 * 1024
"""Bytes asked of each receive of a drained body (BoundedResponse._pump), into one buffer of the process's: a
256 KiB answer in one or two receives, and no allocation per receive (a fresh 256 KiB bytes object a read made
glibc give memory back and take it again, engine/body.py's CHUNK)."""
_PUMPED = bytearray(PUMP_BYTES)
CHUNK_LINE_LIMIT = 4096
"""The longest chunk size line (extensions included) or trailer line of a drained chunked body."""
_SIZE, _DATA, _CRLF, _TRAILER, _DONE = range(5)
"""Where a drained body is: at a chunk size line, in data, at the CRLF after a chunk's data, in the trailers, over."""
_HEX = b"0123456789abcdefABCDEF"


GATHER_FROM_BYTES = 64 * 1024
"""From this body size on, head and body leave in one gathering send (sendmsg) instead of one joined copy."""


def _send_gathered(sock: Any, head: bytes, body: Any) -> None:
    """Send head and body as one stream without joining them: sendmsg writes both in one call (no small
    head segment left to Nagle's algorithm), then whatever it did not take is sent from where it stopped.
    A socket without sendmsg (TLS) gets the joined copy."""
    try:
        sent = sock.sendmsg([head, body])
    except (AttributeError, NotImplementedError):  # gevent's SSLSocket refuses sendmsg
        sock.sendall(head + bytes(body))
        return
    if sent < len(head):
        sock.sendall(head[sent:])
        sent = len(head)
    if (rest := sent - len(head)) < len(body):
        sock.sendall(memoryview(body)[rest:])


def _send(sock: Any, data: bytes) -> None:
    """sendall, but a request that fits the socket's buffer (all but a large image body) leaves in one send:
    gevent's sendall asks the kernel for SO_SNDBUF and sets up its deadline bookkeeping on every call (py-spy:
    as much again as the send itself). gevent's send waits while the buffer is full; the rest goes by sendall."""
    sent = sock.send(data)
    if sent < len(data):
        sock.sendall(memoryview(data)[sent:])


_PEEK = socket.MSG_PEEK | socket.MSG_DONTWAIT


def _open_and_quiet(sock: Any) -> bool:
    """The question geventhttpclient's pool asks before it hands out an idle connection (still open, and
    nothing to read: no FIN, no stray bytes?), asked of the kernel with one non-blocking peek. The pool
    asks it with select() through gevent's hub, a watcher made and started per request: 7 us of a bytes
    request's 160 (py-spy, bench/client_cost.py's bytes case). Any answer but "would block" is a no."""
    raw = getattr(sock, "_sock", None)  # the OS socket under gevent's (TLS too: its bytes are the records)
    if raw is None:
        return False
    try:
        raw.recv(1, _PEEK)  # a byte, or b"" (the server closed it)
    except BlockingIOError:
        return True
    except (OSError, ValueError):
        return False
    return False


_STALE = (HTTPConnectionClosed, ConnectionResetError, BrokenPipeError)
"""How a connection the server closed while it was idle fails: closed or reset before any answer."""


class EngineClient(HTTPClient):
    """HTTPClient whose requests read a `BoundedResponse`, resent once when a reused connection was stale."""

    exchange: Exchange

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._connection_pool._is_socket_alive = _open_and_quiet  # type: ignore[method-assign]  # on purpose
        self._carried: weakref.WeakSet[Any] = weakref.WeakSet()
        """Sockets that carried a request: taking one of these from the pool is a reuse."""
        self._head_of: tuple[Any, str, str, str] | None = None
        """(headers, method, URI, the head up to its Content-Length value) of the last request."""

    def request(self, method: str, request_uri: str, body: Any = b"", headers: Any = None) -> BoundedResponse:
        if isinstance(body, str):
            body = body.encode()
        body = body or b""
        if not isinstance(body, bytes | bytearray | memoryview):  # the engine sends bytes; anything else is a bug
            raise TypeError(f"EngineClient sends bytes bodies, not {type(body).__name__}")
        head = self._head(method.upper(), request_uri, len(body), body, headers)
        # A large body (an image workload's: 1.6 MB for 64 images) is sent from where it is, not copied behind
        # its head for every request: the copy cost CPU, and memory for each request in flight.
        raw_head = head.encode("latin-1")
        wire = (raw_head, body) if len(body) >= GATHER_FROM_BYTES else raw_head + bytes(body)
        exchange = self.exchange
        while True:
            sock, reused = self._socket(fresh=exchange.retried)
            exchange.sock, exchange.connected = sock, True
            try:
                response = self._exchange(sock, wire, method)
            except _STALE:
                if reused and not exchange.retried and exchange.received == 0:
                    exchange.retried = True
                    exchange._attempt()
                    continue
                raise
            response._sent_request = head  # UserAgent.urlopen reads it (a request of a locustfile's own)
            return response

    def _head(self, method: str, uri: str, length: int, body: Any, headers: Any) -> str:
        """The request's head. The engine sends every request of a plan with the same method, URI and
        headers object (transport.aim): geventhttpclient merges the headers and checks each with a regex on
        every request (6.6 us of CPU a request, against 0.1 us reused); here that is done on the first, and
        the next ones change only their Content-Length. Any other request gets its head built whole."""
        cached = self._head_of
        if cached is not None and cached[0] is headers and cached[1] == method and cached[2] == uri:
            return f"{cached[3]}{length}\r\n\r\n"
        head = self._build_request(method, uri, body=body, headers=headers)
        # geventhttpclient adds the Content-Length of a bytes body last: a head that ends otherwise (the
        # headers name a length, or a body it sends chunked) is not reused
        end = f"\r\n{HEADER_CONTENT_LENGTH}: {length}\r\n\r\n"
        if length and headers is not None and head.endswith(end):
            # the headers object is held: its id cannot pass to another while it is here
            self._head_of = (headers, method, uri, head[: len(head) - len(f"{length}\r\n\r\n")])
        return head

    def _socket(self, fresh: bool) -> tuple[Any, bool]:
        pool = self._connection_pool
        while True:  # at most the pool's idle sockets are passed over
            sock = pool.get_socket()
            reused = sock in self._carried
            if not (fresh and reused):
                self._carried.add(sock)
                return sock, reused
            pool.release_socket(sock)

    def _exchange(self, sock: Any, wire: bytes | tuple[bytes, Any], method: str) -> BoundedResponse:
        try:
            if isinstance(wire, tuple):
                _send_gathered(sock, *wire)
            else:
                _send(sock, wire)
        except OSError as e:
            if e.errno not in (errno.ECONNRESET, errno.EPIPE):
                self._connection_pool.release_socket(sock)
                raise
            # The server may have answered (a 413 to a large body) before it closed: read that answer.
        except BaseException:
            self._connection_pool.release_socket(sock)
            raise
        return BoundedResponse(
            sock,
            self._connection_pool,
            self.exchange,
            block_size=self.block_size,
            method=method.upper(),
            headers_type=self.headers_type,
        )


class EngineClientPool(HTTPClientPool):
    """HTTPClientPool of EngineClients that share one user's Exchange."""

    def __init__(self, exchange: Exchange, **kw: Any) -> None:
        super().__init__(**kw)
        self.exchange = exchange
        self._last: tuple[URL, HTTPClient] | None = None
        """The URL object last asked for and its client: the engine asks with its Target's own URL every request,
        whose host and port (urllib's netloc parsing, twice) cost more than anything else in picking the client."""

    def get_client(self, url: str | URL) -> HTTPClient:
        if (last := self._last) is not None and last[0] is url:
            return last[1]
        if not isinstance(url, URL):
            url = URL(url)
        key = url.host, url.port
        client = self.clients.get(key)
        if client is None:
            client = self.clients[key] = EngineClient.from_url(url, **self.client_args)
            client.exchange = self.exchange  # type: ignore[attr-defined]  # from_url makes a cls, typed HTTPClient
        self._last = (url, client)
        return client

    def close(self) -> None:
        self._last = None
        super().close()


def install(agent: Any, exchange: Exchange, block_size: int) -> EngineClientPool:
    """Give a FastHttpSession's user agent the engine's client pool, with the same client settings; return
    it, for `send`. A request of a locustfile's own on the session goes through the same pool."""
    pool = agent.clientpool = EngineClientPool(exchange, **{**agent.clientpool.client_args, "block_size": block_size})
    return pool


class TooManyRedirects(Exception):
    """Still a 307/308 after MAX_REDIRECTS of them were followed."""


SEND_FAILURES = (*FAILURE_EXCEPTIONS, TooManyRedirects)
"""What `send` raises that is a failed request: what Locust's FastHttpSession counts as one, and the
redirect limit. Anything else is a bug in the client, and is not hidden as a server's failure."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where one plan's requests go and the headers they carry, worked out once instead of per request."""

    url: str
    """The URL as Locust's events name it: the session's base URL and the plan's path."""
    split: URL
    uri: str
    """The request target as sent (percent-encoded, as geventhttpclient's UserAgent sends it)."""
    headers: Headers
    request: FastRequest
    """What the event's `response.request` (and `response.url`) shows, as Locust's session gives it: one
    for all the plan's requests, so it carries no body (each request's own is not kept)."""


def aim(agent: Any, base_url: str, path: str, headers: dict[str, str], basic_auth: str | None) -> Target:
    """The Target of `path` on a FastHttpSession's base URL, with the headers its request() and the user
    agent's urlopen() would send: the agent's defaults (User-Agent, the User class's default_headers),
    the plan's, Locust's Accept-Encoding when the plan has none, and the basic auth of a `user:password@`
    --host over any Authorization (as FastHttpSession.request does)."""
    own = dict(headers)
    if "Accept-Encoding" not in own and "accept-encoding" not in own:
        own["Accept-Encoding"] = "gzip, deflate, br"
    if basic_auth:
        own["Authorization"] = basic_auth
    merged = agent.default_headers.copy()
    merged.update(own)
    url = f"{base_url}{path}"
    split = URL(url)
    return Target(url, split, split.quoted_uri, merged, FastRequest(url, method="POST", headers=merged))


def _followed(response: HTTPSocketPoolResponse) -> str | None:
    """The Location of a redirect that is followed, or None."""
    if response.status_code not in FOLLOWED_REDIRECTS:  # before the header: a lookup every request saved
        return None
    location = response.get("location")
    return location if isinstance(location, str) and location else None


def send(pool: HTTPClientPool, target: Target, body: bytes) -> FastResponse:
    """POST `body` to `target` on the user's pool and return the response at its head, its body unread,
    as Locust's FastHttpSession gives it (its `_response` is the Exchange's `response`).

    A 307/308 with a Location is followed (the body resent), at most MAX_REDIRECTS times, by
    geventhttpclient's own rules (`CompatRequest.redirect`: the Location resolved against the URL, a
    scheme other than http(s) refused, Authorization dropped on a move to another origin). Any other
    status is returned as it is: the engine judges it. What the connection raised is raised.
    """
    split, uri, headers = target.split, target.uri, target.headers
    request: CompatRequest | None = None
    for hop in range(MAX_REDIRECTS + 1):
        response = pool.get_client(split).request("POST", uri, body=body, headers=headers)
        if (location := _followed(response)) is None:
            return FastResponse(response, target.request, response._sent_request)
        response.release()
        if request is None:  # only a redirected request pays for a request object; its headers are its own
            request = CompatRequest(split, method="POST", headers=headers.copy(), payload=body)
        request.redirect(response.status_code, location)  # as urlopen did, also past the last hop
        if hop == MAX_REDIRECTS:
            break
        split = request.url_split
        uri, headers = split.quoted_uri, request.headers
    raise TooManyRedirects(f"redirected more than {MAX_REDIRECTS} times (307/308)")


def ended_cleanly(resp: Any) -> bool:
    """Whether the answer of `send` (or the ErrorResponse of its failure) ended where its framing said,
    and nothing followed: its connection may be reused."""
    raw = getattr(resp, "_response", None)
    return raw is not None and raw.message_complete and not raw.should_close()


def failure_before_headers(error: BaseException, exchange: Exchange, https: bool) -> str:
    """The message of a request that got no (complete) response head."""
    plain_hint = " (is the port plain HTTP?)"
    if error is exchange.deadline:
        if https and not exchange.connected:
            return f"TLS error: no TLS handshake within --request-timeout{plain_hint}"
        return "timeout: no response headers within --request-timeout"
    if isinstance(error, HeadersTooLarge | ProtocolError):
        return str(error)
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, socket.gaierror):
        return f"cannot resolve host: {error.strerror}"
    if isinstance(error, ConnectionResetError):
        return "connection reset by the server before the response headers"
    if isinstance(error, HTTPConnectionClosed) and isinstance(error.__context__, ConnectionResetError):
        return "connection reset by the server before the response headers"  # geventhttpclient wraps the RST
    if isinstance(error, HTTPConnectionClosed):
        return "connection closed by the server before the response headers"
    if isinstance(error, TooManyRedirects):
        return str(error)
    if isinstance(error, UnsupportedRedirectSchemeError):
        return f"redirected to a URL that is not http(s): {getattr(error, 'text', '')}"
    if isinstance(error, ssl.SSLCertVerificationError):  # --tls-verify: say why, the reason alone does not
        return f"TLS error: certificate verify failed: {error.verify_message} (--tls-verify)"
    if isinstance(error, ssl.SSLError):
        reason = error.reason or str(error)
        return f"TLS error: {reason}{plain_hint if reason in _PLAIN_HTTP_REASONS else ''}"
    if isinstance(error, TimeoutError | gevent.Timeout):
        if https and not exchange.connected:
            return f"TLS error: no TLS handshake within --request-timeout{plain_hint}"
        return "socket timeout waiting for the response headers (--request-timeout)"
    if isinstance(error, HTTPParseError):
        if "closed before end of the headers" in str(error) or "Invalid EOF state" in str(error):
            return "connection closed by the server in the middle of the response headers"
        return f"invalid HTTP response: {error}"
    if isinstance(error, OSError):
        return f"connection error: {error.strerror or error}"
    return f"{type(error).__name__}: {error}"
