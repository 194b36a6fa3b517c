"""Small hostile HTTP servers for the tests: raw sockets, written per test, not the bundled mock.

The bundled mock breaks the wire only in the ways we thought of. A test here writes the server's
whole behaviour as one function of a raw socket, so it can do what no well-behaved server does
(never end its headers, close right after a valid answer, answer twice, inflate to a gigabyte).

In-process, `HostileServer(handler)` serves on 127.0.0.1 with gevent (the tests run under
Locust's gevent patching, so a thread or an asyncio loop would block the hub). For tests whose
client is another process, `python -m tests.support.hostile MODULE:HANDLER` serves the same handler in a
process of its own and prints `hostile listening on http://127.0.0.1:PORT`.
"""

from __future__ import annotations

import importlib
import itertools
import os
import select
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import gevent
from gevent.server import StreamServer

if TYPE_CHECKING:  # importing ssl before Locust's monkey-patching breaks ssl (RecursionError)
    import ssl

Handler = Callable[[socket.socket, int], None]
"""Serves one connection: the accepted socket and the connection's number (0, 1, ...)."""

LISTENING = "hostile listening on "


class HostileServer:
    """Serves `handler` on 127.0.0.1 (a free port) until closed; a context manager.

    With `ssl_context` (a server-side ssl.SSLContext) it serves TLS, at an https:// url.
    """

    def __init__(self, handler: Handler, ssl_context: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        """The head of every request read with `read_request` (method, path and headers)."""
        numbers = itertools.count()

        def serve(sock: socket.socket, _address: object) -> None:
            self.connections += 1
            try:
                handler(sock, next(numbers))
            except OSError:
                pass  # the client went away: that is the client's business, not the server's
            finally:
                sock.close()

        tls = {} if ssl_context is None else {"ssl_context": ssl_context}
        self._server = StreamServer(("127.0.0.1", 0), serve, **tls)
        self._server.start()
        self.port: int = self._server.server_port
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.stop(timeout=1)

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]) -> None:
        self.close()


def read_request(sock: socket.socket, limit: int = 1 << 20) -> tuple[bytes, bytes] | None:
    """Read one request: (head, body), the body by its Content-Length. None when the client closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
        if len(data) > limit:
            raise ValueError("request head too large")
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        body += chunk
    return head, body


def response(
    status: int = 200,
    body: bytes = b"",
    headers: Iterable[tuple[str, str]] = (),
    content_type: str | None = "application/json",
    content_length: int | None = None,
    reason: str = "X",
) -> bytes:
    """The bytes of one HTTP/1.1 response: Content-Length is len(body) unless given (or -1: none)."""
    lines = [f"HTTP/1.1 {status} {reason}"]
    if content_type is not None:
        lines.append(f"Content-Type: {content_type}")
    length = len(body) if content_length is None else content_length
    if length >= 0:
        lines.append(f"Content-Length: {length}")
    lines.extend(f"{name}: {value}" for name, value in headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def chunked(*pieces: bytes) -> bytes:
    """A chunked transfer-encoded body of these pieces, with its last chunk."""
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces if p) + b"0\r\n\r\n"


def serve_requests(answer: Callable[[bytes, bytes, int], bytes | None]) -> Handler:
    """A keep-alive handler: for every request on the connection, send `answer(head, body, n)`
    (n counts requests over all connections); None closes the connection without an answer."""
    counter = itertools.count()

    def handler(sock: socket.socket, _conn: int) -> None:
        while (request := read_request(sock)) is not None:
            reply = answer(request[0], request[1], next(counter))
            if reply is None:
                return
            sock.sendall(reply)

    return handler


@contextmanager
def server_process(target: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """Serve MODULE:HANDLER in a process of its own (this module's main); yield its URL, stop it at the end."""
    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.hostile", target],
        cwd=root, env={**os.environ, "PYTHONPATH": path, **(env or {})},
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 20)
        line = proc.stdout.readline() if ready else ""
        assert line.startswith(LISTENING), f"hostile server did not start: {line!r}"
        yield line.removeprefix(LISTENING).strip()
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def handler_process(name: str) -> AbstractContextManager[str]:
    """tests/support/hostile_handlers.py's handler `name`, served by a process of its own; yields its URL."""
    return server_process(f"tests.support.hostile_handlers:{name}")


Write = bytes | float
"""One piece of an answer: bytes sent in one send, or a pause in seconds before the next piece."""


def serve_in_writes(writes_of: Callable[[int], Iterable[Write]], connections: list[int]) -> Handler:
    """A keep-alive handler that sends the n-th request's answer (n over all connections) as the
    separate writes `writes_of(n)` gives, and appends each request's connection number to `connections`:
    whether a request came on the connection of the one before is the server's to see."""
    counter = itertools.count()

    def handler(sock: socket.socket, conn: int) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # each write its own segment
        while read_request(sock) is not None:
            connections.append(conn)
            for piece in writes_of(next(counter)):
                if isinstance(piece, bytes):
                    sock.sendall(piece)
                else:
                    gevent.sleep(piece)

    return handler


def make_cert(directory: Path, name: str, san: str) -> tuple[Path, Path]:
    """A self-signed certificate and its key for `name`, valid for the subjectAltName `san` (openssl)."""
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}"),
            *("-addext", f"subjectAltName={san}", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def main() -> None:
    """Serve MODULE:HANDLER in this process until killed."""
    from gevent import monkey

    monkey.patch_all()  # before the handler's module imports anything that imports ssl (requests, locust)
    module, _, name = sys.argv[1].partition(":")
    handler = getattr(importlib.import_module(module), name)
    server = HostileServer(handler)
    print(f"{LISTENING}{server.url}", flush=True)
    server._server.serve_forever()


if __name__ == "__main__":
    main()
