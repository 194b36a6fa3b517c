"""A drained body read past the parser (engine/transport.py, BoundedResponse._pump): the same bytes counted, the
same head kept and the same verdicts as the parser's reading, however the wire cuts the answer, and every
framing fault one failure.

The responses come from a socket that hands out exactly the pieces given (each recv or recv_into one piece, or
less where the caller asks less), so each cut of the wire is tested where it falls: a size line, a CRLF, the
data, the trailers, the head's end.
"""

from __future__ import annotations

import random
from typing import Any

import gevent
import pytest
from geventhttpclient.response import HTTPParseError

from poolbench_locust.engine import transport
from poolbench_locust.engine.transport import BoundedResponse, Exchange, HeadersTooLarge, ProtocolError

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n"


class Pieces:
    """A socket whose receives return the given pieces, one at a time (b"" once they are out: the peer closed)."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = [p for p in pieces if p]
        self.closed = False

    def _next(self, size: int) -> bytes:
        if not self.pieces:
            return b""
        piece = self.pieces[0]
        if len(piece) > size:
            self.pieces[0] = piece[size:]
            return piece[:size]
        self.pieces.pop(0)
        return piece

    def recv(self, size: int) -> bytes:
        return self._next(size)

    def recv_into(self, buffer: Any, size: int = 0) -> int:
        piece = self._next(size or len(buffer))
        buffer[: len(piece)] = piece
        return len(piece)

    def close(self) -> None:
        self.closed = True


class Pool:
    """Where a response gives its socket back: returned (reusable) or released (closed)."""

    def __init__(self) -> None:
        self.returned: list[Any] = []
        self.released: list[Any] = []

    def return_socket(self, sock: Any) -> None:
        self.returned.append(sock)

    def release_socket(self, sock: Any) -> None:
        self.released.append(sock)


def respond(
    pieces: list[bytes], drains: bool, head: int = 0, pool: Pool | None = None
) -> tuple[BoundedResponse, bytes, Pool]:
    """The response read from `pieces` as the engine reads one it drops (drains: past the parser), and its
    kept head; the pool says what became of the socket."""
    exchange = Exchange(64 * 1024)
    deadline = gevent.Timeout(30)
    exchange.begin(deadline, 30, drains=drains)
    pool = pool or Pool()
    try:
        response = BoundedResponse(Pieces(pieces), pool, exchange, block_size=65536, method="POST")
        kept = response.drain(head, 65536, 16)
    finally:
        deadline.close()
        exchange.end()
    return response, kept, pool


def chunked(*data: bytes, extensions: bool = False, trailers: bytes = b"") -> bytes:
    framed = b"".join(b"%x%s\r\n%s\r\n" % (len(d), b";name=value" if extensions else b"", d) for d in data)
    return HEAD + b"transfer-encoding: chunked\r\n\r\n" + framed + b"0\r\n" + trailers + b"\r\n"


def cuts(wire: bytes, rng: random.Random, most: int) -> list[bytes]:
    """The wire in pieces of 1..most bytes."""
    pieces, at = [], 0
    while at < len(wire):
        step = rng.randint(1, most)
        pieces.append(wire[at : at + step])
        at += step
    return pieces


def both(pieces: list[bytes], head: int) -> tuple[tuple[int, bytes, bool], tuple[int, bytes, bool]]:
    """(body bytes, kept head, socket reusable) as the parser reads the pieces and as the pump does."""
    seen = []
    for drains in (False, True):
        response, kept, pool = respond(list(pieces), drains, head)
        assert response.message_complete and not response.should_close()
        seen.append((response.body_bytes, kept, len(pool.returned) == 1 and not pool.released))
    return seen[0], seen[1]


@pytest.mark.parametrize("seed", range(40))
def test_the_pump_counts_what_the_parser_counts_however_the_wire_is_cut(seed: int) -> None:
    rng = random.Random(seed)
    data = [rng.randbytes(rng.choice([1, 7, 300, 5000, 70000])) for _ in range(rng.randint(1, 6))]
    wire = chunked(*data, extensions=seed % 3 == 0, trailers=b"x-trailer: 1\r\n" if seed % 4 == 0 else b"")
    most = max(rng.choice([1, 5, 64, 4096, 300_000]), len(wire) // 5000)  # at most some 10,000 receives
    pieces = cuts(wire, rng, most)
    parser, pump = both(pieces, head=rng.choice([0, 16, 4096]))
    assert pump == parser
    assert pump[0] == sum(map(len, data)) and pump[2]


def test_a_streaming_responses_writes_each_in_a_receive() -> None:
    """The head, the size line, the data, its CRLF and the last chunk each a receive of its own."""
    data = bytes(range(256)) * 1024
    pieces = [HEAD + b"transfer-encoding: chunked\r\n\r\n", b"40000\r\n", data, b"\r\n", b"0\r\n\r\n"]
    response, kept, pool = respond(pieces, drains=True, head=4096)
    assert (response.body_bytes, kept) == (len(data), data[:4096])
    assert pool.returned and not pool.released, "a complete keep-alive answer gives its connection back"
    assert transport.ended_cleanly(type("R", (), {"_response": response})())


@pytest.mark.parametrize("split", [1, 10, 100, 1000])
def test_a_content_length_body_is_counted_to_its_length(split: int) -> None:
    data = b"y" * 3000
    wire = HEAD + b"content-length: 3000\r\n\r\n" + data
    pieces = [wire[:split], wire[split:]]
    parser, pump = both(pieces, head=100)
    assert pump == parser == (3000, data[:100], True)


CUT_CHUNKED = chunked(b"z" * 1000)


@pytest.mark.parametrize(
    ("wire", "error", "words"),
    [
        (CUT_CHUNKED[:-600], HTTPParseError, "ncomplete"),  # closed in the data
        (CUT_CHUNKED[: CUT_CHUNKED.index(b"3e8") + 2], HTTPParseError, "ncomplete"),  # closed in a size line
        (CUT_CHUNKED[:-3], HTTPParseError, "ncomplete"),  # closed before the last chunk's end
        (HEAD + b"content-length: 10\r\n\r\n12345", HTTPParseError, "ncomplete"),
        (HEAD + b"transfer-encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n", HTTPParseError, "chunk size"),
        (HEAD + b"transfer-encoding: chunked\r\n\r\n0x2\r\nab\r\n0\r\n\r\n", HTTPParseError, "chunk size"),
        (HEAD + b"transfer-encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n", HTTPParseError, "after chunk data"),
        (HEAD + b"transfer-encoding: chunked\r\n\r\n2\nab\r\n0\r\n\r\n", HTTPParseError, "CRLF"),
        (HEAD + b"transfer-encoding: chunked\r\n\r\n" + b"1" * 5000, HTTPParseError, "longer than"),
    ],
)
def test_every_framing_fault_fails_and_closes_the_connection(wire: bytes, error: type, words: str) -> None:
    # whole, the pump reads the body (its words); in pieces of up to 7 bytes the head's end falls across two
    # receives, and the parser reads it (llhttp's words, the same failure)
    for pieces, said in (([wire], words), (cuts(wire, random.Random(1), 7), "")):
        pool = Pool()
        with pytest.raises(error, match=said):
            respond(pieces, drains=True, pool=pool)
        assert pool.released and not pool.returned, "a connection left mid-answer is closed, never reused"


@pytest.mark.parametrize("drains", [False, True])
@pytest.mark.parametrize("wire", [CUT_CHUNKED + b"HTTP/1.1 200 OK\r\n\r\n", HEAD + b"content-length: 2\r\n\r\nabcd"])
def test_bytes_after_the_end_in_the_same_receive_are_a_second_response(wire: bytes, drains: bool) -> None:
    """As the parser reads it, so the pump: what follows the end in the receive that ended the body. (The
    parser has given the socket back by then, and the engine closes it: Exchange.drop_connection; the pump
    has not.)"""
    pool = Pool()
    with pytest.raises(ProtocolError, match="data after the end"):
        respond([wire], drains=drains, pool=pool)
    assert not drains or (pool.released and not pool.returned)


def test_trailers_are_bounded_as_the_head_is() -> None:
    trailers = b"".join(b"x-t%d: %s\r\n" % (i, b"v" * 1000) for i in range(80))
    with pytest.raises(HeadersTooLarge):
        respond([chunked(b"ab", trailers=trailers)], drains=True)


def test_crlfs_after_the_end_are_skipped_as_the_parser_skips_them() -> None:
    response, _, pool = respond([CUT_CHUNKED + b"\r\n"], drains=True)
    assert response.body_bytes == 1000 and pool.returned


def test_a_body_read_whole_after_its_head_was_parsed_apart() -> None:
    """read() (an error page, a sampled answer kept whole) hands the parser what came with the head first."""
    data = b"q" * 5000
    exchange = Exchange(64 * 1024)
    deadline = gevent.Timeout(30)
    exchange.begin(deadline, 30, drains=True)
    try:
        wire = chunked(data[:3000], data[3000:])
        response = BoundedResponse(Pieces([wire[:200], wire[200:]]), Pool(), exchange, block_size=65536)
        assert response.read() == data and response.message_complete
    finally:
        deadline.close()
        exchange.end()
