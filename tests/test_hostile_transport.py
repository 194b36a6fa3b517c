"""The transport holds its promises against servers written to break them (issues 11 and 18).

Every case is one request event with its message, nothing past --request-timeout, memory bounded
where a server tries to fill it, and the user's next request on the same client succeeds.
Servers that must out-run the client live in tests/support/hostile_handlers.py and run as processes.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gzip
import itertools
import json
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import gevent
import pytest

from poolbench_locust import EmbeddingsUser
from poolbench_locust.endpoints.vllm_bytes import METADATA_ITEM_BYTES
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.metrics import table
from poolbench_locust.metrics.collector import PoolingStats
from poolbench_locust.options import OptionError
from tests.support.harness import Run, failure_text, options
from tests.support.hostile import (
    HostileServer,
    Write,
    handler_process,
    make_cert,
    read_request,
    response,
    serve_in_writes,
    serve_requests,
)
from tests.support.hostile_handlers import VALID_EMBEDDING, gzip_of_zeros, valid_answers

TIMEOUT_S = 1.5
SLACK_S = 0.5
"""How far past --request-timeout a request may end: scheduling on a loaded 2-core machine."""
ONE_INPUT = ("--batch-size", "1", "--input-len", "4", "--request-timeout", str(TIMEOUT_S))


def _hwm_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


@contextlib.contextmanager
def peak_rss_growth() -> Iterator[dict[str, float]]:
    """Peak RSS growth over the block, in MB: the kernel's high-water mark, reset at the start
    (writing 5 to clear_refs), so that no sampling greenlet needs the hub to run. Heap that glibc kept
    from an earlier test is given back first, or the block would reuse it unseen."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    before = _hwm_mb()
    result: dict[str, float] = {}
    yield result
    result["mb"] = _hwm_mb() - before


def then_valid(first: Callable[[socket.socket], None]) -> Callable[[socket.socket, int], None]:
    """A handler: the first connection gets `first`, every later one valid answers."""

    def handler(sock: socket.socket, conn: int) -> None:
        if conn:
            valid_answers(sock)
        else:
            read_request(sock)
            first(sock)

    return handler


def timed(run: Run) -> tuple[dict[str, Any], float]:
    started = time.perf_counter()
    event = run.one()
    return event, time.perf_counter() - started


def assert_next_succeeds(run: Run) -> None:
    event = run.one()
    assert event["exception"] is None, failure_text(event)


# 11.1: headers that never end


def test_headers_streamed_forever_fail_at_the_header_bound():
    with handler_process("endless_header") as url, peak_rss_growth() as rss:
        run = Run(EmbeddingsUser, url, *ONE_INPUT)
        event, took = timed(run)
        assert failure_text(event) == "response headers larger than --max-header-kb (64 KiB)"
        assert took < TIMEOUT_S, "the bound is hit long before the deadline"
        assert len(run.events) == 1
        assert_next_succeeds(run)
    assert rss["mb"] < 40, rss


def trickling(head: bytes) -> Callable[[socket.socket], None]:
    """Send `head`, then a byte every 20 ms for 4 s: each read waits, and the request never ends."""

    def send(sock: socket.socket) -> None:
        sock.sendall(head)
        for _ in range(200):
            sock.sendall(b"a")
            gevent.sleep(0.02)

    return send


def test_headers_trickling_forever_fail_at_the_deadline():
    with HostileServer(then_valid(trickling(b"HTTP/1.1 200 OK\r\nX-Slow: "))) as server:
        run = Run(EmbeddingsUser, server.url, *ONE_INPUT)
        event, took = timed(run)
        assert failure_text(event) == "timeout: no response headers within --request-timeout"
        assert TIMEOUT_S - 0.05 < took < TIMEOUT_S + SLACK_S
        assert len(run.events) == 1
        assert_next_succeeds(run)


@pytest.mark.parametrize(
    ("size", "args", "expected"),
    [
        (60_000, (), ""),  # vLLM's `metadata` header of a large bytes batch is this large
        (100_000, (), "response headers larger than --max-header-kb (64 KiB)"),
        (100_000, ("--max-header-kb", "128"), ""),
    ],
)
def test_max_header_kb_bounds_the_head(size, args, expected):
    answer = response(200, VALID_EMBEDDING, [("X-Big", "x" * size)])
    with HostileServer(serve_requests(lambda *_: answer)) as server:
        assert failure_text(Run(EmbeddingsUser, server.url, *ONE_INPUT, *args).one()) == expected


# 26.3: vLLM's own metadata header of a large bytes batch


def vllm_bytes_answer(head: bytes, body: bytes, dim: int = 4096) -> bytes:
    """A `bytes` answer to the request as vLLM writes it (json.dumps, with its spaces), its values as
    wide as they come: bfloat16 little-endian, a long id and model name, offsets into a 4096-dim batch."""
    inputs = json.loads(body)["input"]
    width = dim * 2
    items = [
        {"index": i, "embed_dtype": "bfloat16", "endianness": "little", "start": i * width, "end": (i + 1) * width,
         "shape": [dim]}
        for i in range(len(inputs))
    ]  # fmt: skip
    metadata = json.dumps(
        {"id": "embd-" + "f" * 64, "created": 1_900_000_000, "model": "organisation/" + "m" * 200, "data": items,
         "usage": {"prompt_tokens": 99_999_999, "total_tokens": 99_999_999}}
    )  # fmt: skip
    vectors = bytes(width * len(inputs))
    return response(200, vectors, [("metadata", metadata)], content_type="application/octet-stream")


BYTES_BATCH = ("--encoding-format", "bytes", "--embed-dtype", "bfloat16", "--endianness", "little", "--input-len", "2")


@pytest.mark.parametrize("batch", [1024, 4096])
def test_vllms_metadata_header_of_a_large_bytes_batch_passes_under_the_defaults(batch):
    with HostileServer(serve_requests(lambda head, body, _: vllm_bytes_answer(head, body))) as server:
        run = Run(EmbeddingsUser, server.url, *BYTES_BATCH, "--batch-size", str(batch))
        event = run.one()
    assert event["exception"] is None, failure_text(event)
    assert event["context"]["input_tokens"] == 99_999_999, "the metadata header was read"


@pytest.mark.parametrize("batch", [1024, 4096])
def test_the_bundled_mocks_metadata_header_of_a_large_bytes_batch_passes(mock_server, batch):
    run = Run(EmbeddingsUser, mock_server.url, "--encoding-format", "bytes", "--batch-size", str(batch))
    event = run.one()
    assert event["exception"] is None, failure_text(event)
    assert event["context"]["sequences"] == batch


def test_an_endless_header_on_a_large_bytes_batch_still_fails_at_its_bound():
    with handler_process("endless_header") as url, peak_rss_growth() as rss:
        run = Run(EmbeddingsUser, url, *BYTES_BATCH, "--batch-size", "1024", "--request-timeout", str(TIMEOUT_S))
        event, took = timed(run)
        bound_kib = 64 + 1024 * METADATA_ITEM_BYTES // 1024
        assert failure_text(event) == (
            f"response headers larger than {bound_kib} KiB: --max-header-kb (64 KiB) "
            "and the largest metadata header of the batch"
        )
        assert took < TIMEOUT_S, "the bound is hit long before the deadline"
        assert event["response_length"] < (bound_kib + 128) * 1024
    assert rss["mb"] < 40, rss


# 11.2: unbounded buffering


def test_an_endless_chunked_json_body_stops_at_max_body_mb():
    with handler_process("endless_chunked_json") as url, peak_rss_growth() as rss:
        run = Run(EmbeddingsUser, url, *ONE_INPUT, "--max-body-mb", "16")
        event, took = timed(run)
        assert failure_text(event) == "JSON body larger than --max-body-mb (16 MB)"
        assert event["response_length"] >= 16_000_000
        assert took < TIMEOUT_S + SLACK_S
        assert_next_succeeds(run)
    assert rss["mb"] < 16 * 3 + 30, rss


def test_a_json_body_declared_larger_than_max_body_mb_fails_before_it_is_read():
    def declare(sock: socket.socket) -> None:
        sock.sendall(response(200, b"[", content_length=20_000_000))
        gevent.sleep(TIMEOUT_S + 1)

    with HostileServer(then_valid(declare)) as server:
        run = Run(EmbeddingsUser, server.url, *ONE_INPUT, "--max-body-mb", "16")
        event, took = timed(run)
        assert failure_text(event) == "JSON body larger than --max-body-mb (16 MB)"
        assert took < TIMEOUT_S / 2, "no need to wait for a body that will not be kept"
        assert_next_succeeds(run)


def test_a_custom_request_after_a_measured_one_inherits_no_deadline():
    with HostileServer(serve_requests(lambda *_: response(200, VALID_EMBEDDING))) as server:
        run = Run(EmbeddingsUser, server.url, "--batch-size", "1", "--request-timeout", "0.2")
        assert run.one()["exception"] is None
        gevent.sleep(0.3)  # the measured request's deadline is long past
        with run.user.client.get("/", catch_response=True) as resp:
            assert resp.status_code == 200
            resp.success()


@functools.cache
def gzip_bomb() -> bytes:
    """1 GiB of zeros in about 1 MB of gzip: made when a test first asks (4 s of CPU), not at import, where every
    xdist worker's collection paid it."""
    return gzip_of_zeros(1 << 30)


def test_a_gzip_bomb_json_answer_stops_at_max_body_mb_of_inflated_bytes():
    wire = gzip_bomb()

    def bomb(sock: socket.socket) -> None:
        sock.sendall(response(200, wire, [("Content-Encoding", "gzip")]))

    with HostileServer(then_valid(bomb)) as server, peak_rss_growth() as rss:
        run = Run(EmbeddingsUser, server.url, *ONE_INPUT, "--max-body-mb", "16")
        event = run.one()
        assert failure_text(event) == "JSON body larger than --max-body-mb (16 MB) once inflated"
        assert_next_succeeds(run)
    assert rss["mb"] < 16 * 3 + 30, rss


def test_an_error_body_is_bounded_by_its_inflated_size():
    wire = gzip_bomb()

    def bomb(sock: socket.socket) -> None:
        sock.sendall(response(503, wire, [("Content-Encoding", "gzip")], content_type="text/plain"))

    with HostileServer(then_valid(bomb)) as server, peak_rss_growth() as rss:
        run = Run(EmbeddingsUser, server.url, *ONE_INPUT)
        event = run.one()
        assert failure_text(event).startswith("HTTP 503: ") and len(failure_text(event)) < 400
        assert event["response_length"] < len(wire), "the error body is left unread past its limit"
        assert_next_succeeds(run)
    assert rss["mb"] < 30, rss


def test_max_body_mb_must_be_a_whole_number_of_at_least_one():
    with pytest.raises(SystemExit):
        Run(EmbeddingsUser, "http://127.0.0.1:9", "--max-body-mb", "0")
    typed_into_the_web_ui = options()
    typed_into_the_web_ui.max_body_mb = "0"
    with pytest.raises(OptionError, match=r"^--max-body-mb: must be a whole number >= 1, got 0$"):
        plan_for(EmbeddingsUser, typed_into_the_web_ui)


# 11.4: stale keep-alive connections


def _answer_once_then_close_on_the_next(
    delay_s: float = 0.0, bodies: list[int] | None = None
) -> Callable[[socket.socket, int], None]:
    """Each connection answers its first request validly, then drops the second unanswered; `bodies`
    gets the size of every request body read."""
    bodies = [] if bodies is None else bodies

    def handler(sock: socket.socket, _conn: int) -> None:
        if (first := read_request(sock)) is None:
            return
        bodies.append(len(first[1]))
        sock.sendall(response(200, VALID_EMBEDDING))
        if (second := read_request(sock)) is not None:
            bodies.append(len(second[1]))
            gevent.sleep(delay_s)  # the stale attempt's time must not count

    return handler


def test_a_reused_connection_closed_by_the_server_is_resent_once_and_counted():
    stats, bodies = PoolingStats(), []
    with HostileServer(_answer_once_then_close_on_the_next(delay_s=0.3, bodies=bodies)) as server:
        run = Run(EmbeddingsUser, server.url, *ONE_INPUT)
        run.env.events.request.add_listener(stats.on_request)
        for _ in range(20):
            run.one()
    assert [failure_text(e) for e in run.events] == [""] * 20
    assert server.connections == 20, "each resend on a fresh connection"
    assert stats.total.retries == 19 and stats.total.requests == 20
    assert table.rows(stats)[-1]["Retries"] == 19, "the Pooling table shows them"
    resent = [e for e in run.events if e["context"].get("retried")]
    assert len(resent) == 19
    assert max(e["response_time"] for e in resent) < 250, "its time counts from the resend"
    assert len(bodies) == 39 and table.rows(stats)[-1]["Sent Bytes"] == sum(bodies), "a resent body went out twice"


def test_a_server_closing_every_connection_after_its_answer_causes_no_failure():
    """The issue's case: no `Connection: close`, just the close, racing the client's next request."""
    stats = PoolingStats()
    with handler_process("close_after_answer") as url:
        run = Run(EmbeddingsUser, url, *ONE_INPUT)
        run.env.events.request.add_listener(stats.on_request)
        for _ in range(200):
            run.one()
    assert [failure_text(e) for e in run.events if e["exception"] is not None] == []
    assert stats.total.retries == sum(1 for e in run.events if e["context"].get("retried"))


@pytest.mark.parametrize("idle", ["close", "stray bytes"])
def test_an_idle_connection_closed_or_written_to_is_not_reused(idle):
    """The pool's question before it hands out an idle connection (engine/transport.py `_open_and_quiet`): one
    whose server closed it or sent bytes while it was idle goes to no request; the next one opens a fresh
    connection, with no resend and no failure."""

    def handler(sock: socket.socket, _conn: int) -> None:
        if read_request(sock) is None:
            return
        sock.sendall(response(200, VALID_EMBEDDING))
        if idle == "stray bytes":
            gevent.sleep(0.03)  # after the client read the answer: the connection is idle in the pool
            sock.sendall(response(200, VALID_EMBEDDING))  # a second answer no request asked for
            gevent.sleep(2)  # and the connection stays open

    with HostileServer(handler) as server:
        run = Run(EmbeddingsUser, server.url, *ONE_INPUT)
        for _ in range(3):
            event = run.one()
            assert failure_text(event) == ""
            assert not event["context"].get("retried"), "found out before the request was sent, not resent"
            gevent.sleep(0.1)  # the FIN or the bytes arrive while the connection is idle
        assert server.connections == 3


def test_the_pool_asks_the_engines_idle_check(monkeypatch):
    """`_open_and_quiet` replaces a private method of geventhttpclient's pool (`_is_socket_alive`): if a
    release renames or stops calling it, the pool's own select() check would run unseen (correct, but the
    cost issue 33 took away comes back). This fails then: every reuse of a kept connection asks ours."""
    from poolbench_locust.engine import transport

    asked: list[bool] = []

    def counted(sock: Any) -> bool:
        asked.append(transport_check(sock))
        return asked[-1]

    transport_check = transport._open_and_quiet
    monkeypatch.setattr(transport, "_open_and_quiet", counted)

    def handler(sock: socket.socket, _conn: int) -> None:
        while read_request(sock) is not None:
            sock.sendall(response(200, VALID_EMBEDDING))

    with HostileServer(handler) as server:
        run = Run(EmbeddingsUser, server.url, *ONE_INPUT)
        for _ in range(4):
            assert failure_text(run.one()) == ""
        assert server.connections == 1
    assert asked == [True, True, True], "the three reuses of the kept connection were each asked, and kept"


def test_no_resend_once_a_response_byte_came():
    def handler(sock: socket.socket, _conn: int) -> None:
        read_request(sock)
        sock.sendall(response(200, VALID_EMBEDDING))
        read_request(sock)
        sock.sendall(b"HTTP/1.1 2")  # a byte of the answer: the request reached the server

    with HostileServer(handler) as server:
        run = Run(EmbeddingsUser, server.url, *ONE_INPUT)
        assert run.one()["exception"] is None
        event = run.one()
        assert failure_text(event) == "connection closed by the server in the middle of the response headers"
        assert server.connections == 1
        assert not event["context"].get("retried")


def test_exactly_one_resend_when_the_fresh_connection_fails_too():
    requests = []

    def handler(sock: socket.socket, conn: int) -> None:
        while read_request(sock) is not None:
            requests.append(conn)
            if conn == 0 and len(requests) == 1:
                sock.sendall(response(200, VALID_EMBEDDING))
            else:
                return

    with HostileServer(handler) as server:
        run = Run(EmbeddingsUser, server.url, *ONE_INPUT)
        assert run.one()["exception"] is None
        event = run.one()
        assert failure_text(event) == "connection closed by the server before the response headers"
        assert requests == [0, 0, 1], "the stale attempt and one resend, nothing more"
        assert len(run.events) == 2


def test_a_fresh_connection_closed_before_the_answer_is_not_resent():
    with HostileServer(serve_requests(lambda *_: None)) as server:
        run = Run(EmbeddingsUser, server.url, *ONE_INPUT)
        assert failure_text(run.one()) == "connection closed by the server before the response headers"
        assert server.connections == 1


# 11.5: interim responses and protocol errors


@pytest.mark.parametrize(
    "interim",
    [b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"],
    ids=["100", "103"],
)
def test_interim_responses_are_skipped(interim):
    with HostileServer(serve_requests(lambda *_: interim + response(200, VALID_EMBEDDING))) as server:
        run = Run(EmbeddingsUser, server.url, *ONE_INPUT)
        for _ in range(3):
            assert run.one()["exception"] is None
        assert server.connections == 1, "the connection stays in use"


INTERIMS = {
    "100": b"HTTP/1.1 100 Continue\r\n\r\n",
    "103": b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n",
}
PAUSE_S = 0.02
FINAL_HEAD = response(200, b"", content_length=len(VALID_EMBEDDING))


def _split_everywhere(answer: bytes) -> list[list[Write]]:
    """The answer in two writes at every split point, then a byte at a time (twice)."""
    splits: list[list[Write]] = [[answer[:i], 0.002, answer[i:]] for i in range(1, len(answer))]
    one_by_one: list[Write] = [piece for i in range(len(answer)) for piece in (answer[i : i + 1], 0.001)]
    return [*splits, one_by_one, one_by_one]


@pytest.mark.parametrize("interim", INTERIMS.values(), ids=INTERIMS.keys())
def test_interim_responses_are_skipped_however_the_bytes_are_split(interim):
    plans = _split_everywhere(interim + FINAL_HEAD + VALID_EMBEDDING)
    connections: list[int] = []
    with HostileServer(serve_in_writes(lambda n: plans[n], connections)) as server:
        run = Run(EmbeddingsUser, server.url, *ONE_INPUT)
        failed = [(n, failure_text(run.one())) for n in range(len(plans))]
    assert [f for f in failed if f[1]] == [], f"{sum(1 for f in failed if f[1])} of {len(plans)} failed"
    assert connections == [0] * len(plans), "every request came on the connection of the one before"


@pytest.mark.parametrize(
    ("writes", "headers_after_ms", "ends_after_ms"),
    [
        (lambda interim: [interim, PAUSE_S, FINAL_HEAD, PAUSE_S, VALID_EMBEDDING], 20, 40),
        (lambda interim: [interim + FINAL_HEAD, PAUSE_S, VALID_EMBEDDING], 0, 20),
    ],
    ids=["interim, headers, body 20 ms apart", "interim and headers, body 20 ms later"],
)
@pytest.mark.parametrize("interim", INTERIMS.values(), ids=INTERIMS.keys())
def test_a_request_with_an_interim_response_is_timed_from_the_request(interim, writes, headers_after_ms, ends_after_ms):
    connections: list[int] = []
    with HostileServer(serve_in_writes(lambda _: writes(interim), connections)) as server:
        run = Run(EmbeddingsUser, server.url, *ONE_INPUT)
        events = [run.one() for _ in range(3)]
    assert [failure_text(e) for e in events] == ["", "", ""]
    for event in events:
        assert event["context"]["ttfb_ms"] >= headers_after_ms, "the final response's headers, not the interim's"
        assert ends_after_ms <= event["response_time"] < ends_after_ms + 1000 * SLACK_S
    assert connections == [0, 0, 0], "the connection is kept"


PROTOCOL_ERROR = (
    "protocol error: data after the end of the response (a second response, or a body longer than its Content-Length)"
)


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        (response(200, VALID_EMBEDDING, content_length=len(VALID_EMBEDDING) - 10), PROTOCOL_ERROR),
        (response(200, VALID_EMBEDDING) + response(200, VALID_EMBEDDING), PROTOCOL_ERROR),
        (response(204, b"", content_type=None, content_length=-1) + response(200, VALID_EMBEDDING), PROTOCOL_ERROR),
        (b"garbage\r\n\r\n", "invalid HTTP response: "),
    ],
    ids=["short-content-length", "two-responses", "204-then-200", "garbage"],
)
def test_a_protocol_error_costs_one_failure_and_its_connection(bad, expected):
    answers = iter([bad])

    def handler(sock: socket.socket, _conn: int) -> None:
        while read_request(sock) is not None:
            sock.sendall(next(answers, response(200, VALID_EMBEDDING)))

    with HostileServer(handler) as server:
        run = Run(EmbeddingsUser, server.url, *ONE_INPUT)
        events = [run.one() for _ in range(4)]
    assert failure_text(events[0]).startswith(expected), failure_text(events[0])
    assert [failure_text(e) for e in events[1:]] == ["", "", ""], "the next requests do not read its leftovers"
    assert server.connections == 2, "the bad connection is closed, the next one kept"


# 11.8a: Content-Encoding spelling; https at a plain-HTTP port


@pytest.mark.parametrize("encoding", ["gzip ", "identity, gzip", "GZIP", "x-gzip"])
def test_content_encoding_spellings_are_accepted(encoding):
    answer = response(200, gzip.compress(VALID_EMBEDDING), [("Content-Encoding", encoding)])
    with HostileServer(serve_requests(lambda *_: answer)) as server:
        event = Run(EmbeddingsUser, server.url, *ONE_INPUT).one()
    assert event["exception"] is None, failure_text(event)


@pytest.mark.parametrize("answers", [False, True], ids=["silent", "answers-400"])
def test_https_at_a_plain_http_port_is_a_tls_error(answers):
    def plain(sock: socket.socket, _conn: int) -> None:
        sock.recv(65536)  # the TLS ClientHello, which a plain server takes for a request head
        if answers:
            sock.sendall(response(400, b"bad request", content_type="text/plain"))
        gevent.sleep(TIMEOUT_S + 1)

    with HostileServer(plain) as server:
        run = Run(EmbeddingsUser, server.url.replace("http://", "https://"), *ONE_INPUT)
        event, took = timed(run)
    assert failure_text(event).startswith("TLS error: "), failure_text(event)
    assert "plain HTTP" in failure_text(event)
    assert took < TIMEOUT_S + SLACK_S


# 18.4: inflating a compressed binary body


def test_inflating_a_binary_body_yields_to_other_users():
    zeros = gzip_of_zeros(512 << 20)

    def answer(*_: Any) -> bytes:
        return response(200, zeros, [("Content-Encoding", "gzip")], content_type="application/octet-stream")

    ticks: list[float] = []

    def ticker() -> None:
        while True:
            gevent.sleep(0.005)
            ticks.append(time.perf_counter())

    with HostileServer(serve_requests(answer)) as server, peak_rss_growth() as rss:
        run = Run(EmbeddingsUser, server.url, "--encoding-format", "bytes_only", "--request-timeout", "30")
        tick = gevent.spawn(ticker)
        gevent.sleep(0.01)
        ticks.append(time.perf_counter())
        event = run.one()
        ticks.append(time.perf_counter())
        tick.kill()
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert event["exception"] is None, failure_text(event)
    assert max(gaps) < 0.1, f"the hub was blocked for {max(gaps):.3f} s"
    assert rss["mb"] < 40, rss


# 18.5: the deadline holds under a fast sender


def test_the_deadline_holds_when_the_body_arrives_as_fast_as_it_can():
    with handler_process("fast_binary") as url:
        run = Run(EmbeddingsUser, url, *ONE_INPUT, "--encoding-format", "bytes_only")
        event, took = timed(run)
        assert failure_text(event) == "timeout: the body did not end within --request-timeout"
        assert took < TIMEOUT_S + SLACK_S, f"{took:.2f} s on a {TIMEOUT_S} s timeout"
        assert event["response_length"] > 1_000_000, "what arrived is reported"
        run.user.plan = Run(EmbeddingsUser, url, *ONE_INPUT).user.plan  # the next one asks for JSON
        assert_next_succeeds(run)


def test_the_deadline_holds_when_inflating_cannot_keep_up_with_the_sender():
    with handler_process("fast_gzip_binary") as url, peak_rss_growth() as rss:
        run = Run(EmbeddingsUser, url, *ONE_INPUT, "--encoding-format", "bytes_only")
        event, took = timed(run)
        assert failure_text(event) == "timeout: the body did not end within --request-timeout"
        assert took < TIMEOUT_S + SLACK_S, f"{took:.2f} s on a {TIMEOUT_S} s timeout"
        run.user.plan = Run(EmbeddingsUser, url, *ONE_INPUT).user.plan
        assert_next_succeeds(run)
    assert rss["mb"] < 40, rss


# 18.6: messages that say what happened


def test_a_503_with_an_undecodable_body_is_reported_as_a_503():
    answer = response(503, b"not gzip at all", [("Content-Encoding", "gzip")], content_type="text/plain")
    with HostileServer(then_valid(lambda sock: sock.sendall(answer))) as server:
        run = Run(EmbeddingsUser, server.url, *ONE_INPUT)
        text = failure_text(run.one())
        assert text.startswith("HTTP 503: ") and "corrupt compressed body" in text, text
        assert_next_succeeds(run)


def test_a_503_whose_body_trickles_past_the_deadline_is_reported_as_a_503():
    head = response(503, b"", content_type="text/plain", content_length=1000)
    with HostileServer(then_valid(trickling(head))) as server:
        run = Run(EmbeddingsUser, server.url, *ONE_INPUT)
        event, took = timed(run)
        assert failure_text(event) == "HTTP 503: timeout: the body did not end within --request-timeout"
        assert took < TIMEOUT_S + SLACK_S
        assert_next_succeeds(run)


def test_response_length_counts_what_arrived_of_a_timed_out_body():
    arrived = 3_000_000

    def stall(sock: socket.socket) -> None:
        sock.sendall(response(200, b"\x00" * arrived, content_length=arrived * 2))
        gevent.sleep(TIMEOUT_S + 1)

    with HostileServer(then_valid(stall)) as server:
        run = Run(EmbeddingsUser, server.url, *ONE_INPUT)
        event = run.one()
        assert failure_text(event) == "timeout: the body did not end within --request-timeout"
        assert event["response_length"] == arrived
        assert_next_succeeds(run)


def test_response_length_counts_what_arrived_of_a_truncated_body():
    arrived = 100_000

    with HostileServer(then_valid(lambda s: s.sendall(response(200, b" " * arrived, content_length=arrived * 2)))) as s:
        run = Run(EmbeddingsUser, s.url, *ONE_INPUT)
        event = run.one()
        assert failure_text(event) == "body truncated: connection closed before Content-Length bytes arrived"
        assert event["response_length"] == arrived
        assert_next_succeeds(run)


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_a_large_request_body_arrives_whole_and_in_order(tmp_path, tls):
    """From 64 KiB on (an image workload's bodies), head and body leave in one gathering send, not one copy:
    the server must still get exactly the prepared body, over plain TCP and over TLS (which takes the copy)."""
    import ssl

    received: list[bytes] = []

    def record(_head: bytes, body: bytes, _n: int) -> bytes:
        received.append(body)
        return response(200, VALID_EMBEDDING)

    context = None
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*make_cert(tmp_path, "loopback", "IP:127.0.0.1"))
    server = HostileServer(serve_requests(record), ssl_context=context)
    try:
        run = Run(EmbeddingsUser, server.url, "--batch-size", "1", "--input-len", "30000", "--request-timeout", "10")
        events = [run.one() for _ in range(3)]
    finally:
        server.close()
    assert [failure_text(e) for e in events] == ["", "", ""]
    assert run.user.plan is not None
    sent = {r.body for r in run.user.plan.requests}
    assert len(received) == 3 and all(len(body) >= 64 * 1024 and body in sent for body in received)


def test_a_request_the_socket_takes_in_parts_is_sent_whole_and_in_order():
    """engine/transport.py `_send`: one send for a request that fits the socket's buffer, and the rest by
    sendall where it did not (a small send buffer, a server that reads slowly)."""
    from gevent import socket as gsocket

    from poolbench_locust.engine.transport import _send

    data = bytes(range(256)) * 1024  # 256 KiB, far past the send buffer below
    client, server = gsocket.socketpair()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    got = bytearray()

    def read_slowly() -> None:
        while len(got) < len(data):
            got.extend(server.recv(8192))
            gevent.sleep(0.0005)

    reader = gevent.spawn(read_slowly)
    _send(client, data)
    reader.join(timeout=10)
    client.close()
    server.close()
    assert bytes(got) == data


def test_each_request_carries_its_own_content_length_and_the_same_headers():
    """The engine builds a plan's request head once and changes only its Content-Length: requests of
    different lengths must each announce their own, with every other header line as the first had."""
    heads: list[bytes] = []
    bodies: list[bytes] = []

    def record(head: bytes, body: bytes, _n: int) -> bytes:
        heads.append(head)
        bodies.append(body)
        return response(200, VALID_EMBEDDING)

    server = HostileServer(serve_requests(record))
    try:
        run = Run(EmbeddingsUser, server.url, "--batch-size", "1", "--input-len", "1:400", "--api-key", "sk-test")
        events = [run.one() for _ in range(6)]
    finally:
        server.close()
    assert [failure_text(e) for e in events] == [""] * 6
    assert len({len(b) for b in bodies}) > 1, "the inputs' lengths did not vary: the test proves nothing"
    lines = [[line for line in h.split(b"\r\n") if line] for h in heads]
    for own, body in zip(lines, bodies, strict=True):
        assert own.count(f"Content-Length: {len(body)}".encode()) == 1
        assert [x for x in own if not x.startswith(b"Content-Length")] == [
            x for x in lines[0] if not x.startswith(b"Content-Length")
        ]
    assert b"Authorization: Bearer sk-test" in lines[0]
