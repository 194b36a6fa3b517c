"""The private parts of geventhttpclient (and of Locust's FastResponse and gevent's socket) that
engine/transport.py reaches, and Locust's users' state that request_limit/max_requests.py reads, each checked
by its name against the installed releases.

A private name may be renamed or removed in any release without notice. The engine would then not fail
loudly: an override nobody calls leaves geventhttpclient's own behaviour in place (an unbounded head, a
socket handed back after an interim 1xx), and an attribute read that is gone breaks every request. Each
test here is one part, named in its id and its message, and checks what the engine relies on: the name
exists, has the shape the engine calls it with, and where it is a hook, the parser still calls it.
pyproject.toml bounds geventhttpclient to the newest release these passed on.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import gevent
import gevent.socket
import pytest
from geventhttpclient.client import HTTPClient, HTTPClientPool
from geventhttpclient.connectionpool import ConnectionPool
from geventhttpclient.header import Headers
from geventhttpclient.response import HEADER_STATE_FIELD, HTTPResponse, HTTPSocketPoolResponse, HTTPSocketResponse
from geventhttpclient.useragent import UserAgent
from locust import User, constant, task
from locust.contrib.fasthttp import FastHttpSession, FastResponse, LocustUserAgent
from locust.env import Environment
from locust.user.task import LOCUST_STATE_RUNNING, LOCUST_STATE_STOPPING, LOCUST_STATE_WAITING

from poolbench_locust.engine import transport

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Long-Header: 1\r\n\r\nhi"

PARSER_HOOKS = {
    "_on_message_begin": (),
    "_on_status": ("msg",),
    "_on_header_field": ("string",),
    "_on_header_value": ("string",),
    "_on_headers_complete": (),
    "_on_body": ("buf",),
    "_on_message_complete": (),
}
"""The parser's callbacks BoundedResponse overrides, with the arguments the parser passes (after self)."""


def positional(function: object) -> tuple[str, ...]:
    """The names of a function's positional parameters after self."""
    parameters = list(inspect.signature(function).parameters.values())[1:]  # type: ignore[arg-type]
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(p.name for p in parameters if p.kind in kinds)


@pytest.fixture
def pair() -> Iterator[tuple[gevent.socket.socket, gevent.socket.socket]]:
    a, b = gevent.socket.socketpair()
    try:
        yield a, b
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("hook", list(PARSER_HOOKS))
def test_each_parser_hook_the_engine_overrides_is_the_bases(hook: str) -> None:
    """BoundedResponse overrides the hook and calls the base's: both must exist with the same arguments."""
    assert callable(getattr(HTTPResponse, hook, None)), f"geventhttpclient's HTTPResponse has no {hook}"
    assert positional(getattr(HTTPResponse, hook)) == PARSER_HOOKS[hook], (
        f"HTTPResponse.{hook} takes {positional(getattr(HTTPResponse, hook))}, not {PARSER_HOOKS[hook]}"
    )
    assert hook in vars(transport.BoundedResponse), f"BoundedResponse no longer overrides {hook}: drop it here"


def test_the_parser_calls_every_hook_the_engine_overrides() -> None:
    """An override the parser no longer calls is a bound silently gone (the head, the 1xx, the second answer)."""
    called: set[str] = set()

    def recording(name: str) -> object:
        def hook(self: HTTPResponse, *args: object) -> object:
            called.add(name)
            return getattr(HTTPResponse, name)(self, *args)

        return hook

    Recording = type("Recording", (HTTPResponse,), {name: recording(name) for name in PARSER_HOOKS})
    Recording().feed(ANSWER)
    missing = sorted(set(PARSER_HOOKS) - called)
    assert missing == [], f"geventhttpclient's parser no longer calls {missing}"


def test_header_state_says_a_field_comes_in_pieces() -> None:
    """`_header_state` (and HEADER_STATE_FIELD): BoundedResponse counts a field's continuation without a
    second line's overhead; the parser hands a field over in pieces when it spans two reads."""
    seen: list[object] = []

    class Watching(HTTPResponse):
        def _on_header_field(self, string: str) -> None:
            seen.append(getattr(self, "_header_state", "no _header_state"))
            super()._on_header_field(string)

    response = Watching()
    response.feed(b"HTTP/1.1 200 OK\r\nX-Lo")
    response.feed(b"ng: 1\r\nContent-Length: 0\r\n\r\n")
    assert seen[1] == HEADER_STATE_FIELD, f"_header_state at a field's second piece is {seen[1]!r}"
    assert response.get("x-long") == "1"


def test_body_buffer_holds_what_came_with_the_head() -> None:
    """`_body_buffer`: BoundedResponse.drain keeps the head of what the base's _on_body buffered, then drops it."""
    response = HTTPResponse()
    response.feed(ANSWER)
    buffered = getattr(response, "_body_buffer", None)
    assert isinstance(buffered, bytearray), f"HTTPResponse._body_buffer is {type(buffered).__name__}"
    assert bytes(buffered) == b"hi"


def test_headers_index_holds_the_heads_headers() -> None:
    """`_headers_index`: BoundedResponse._framing reads the body's framing there (one value a header, a list
    when it came twice) before it reads the body past the parser."""
    response = HTTPResponse()
    response.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Twice: a\r\nX-Twice: b\r\n\r\n")
    index = getattr(response, "_headers_index", None)
    assert isinstance(index, Headers), f"HTTPResponse._headers_index is {type(index).__name__}"
    assert index.get("transfer-encoding") == "chunked" and index.get("x-twice") == ["a", "b"]


def test_a_parser_stopped_at_the_heads_end_keeps_the_connection_alive() -> None:
    """The parser never sees a body read past it: once that body ended, the response marks its message complete
    and gives its socket back if should_close() says no, which asks the parser's keep-alive verdict as it
    stands at the head's end. A release that answered otherwise would close every such connection."""
    for framing in (b"Transfer-Encoding: chunked", b"Content-Length: 5"):
        response = HTTPResponse()
        response.feed(b"HTTP/1.1 200 OK\r\n" + framing + b"\r\n\r\n")
        assert response.headers_complete and not response.message_complete
        response._on_message_complete()
        assert not response.should_close(), f"a complete answer framed by {framing!r} no longer keeps its connection"
    closing = HTTPResponse()
    closing.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n")
    closing._on_message_complete()
    assert closing.should_close(), "Connection: close must still close it"


def test_a_socket_response_keeps_its_socket_as_sock(pair) -> None:
    """`_sock`: BoundedResponse.drain receives on it until the message completes, and release() clears it."""
    a, b = pair
    head, body = ANSWER.split(b"\r\n\r\n")
    a.sendall(head + b"\r\n\r\n")  # the body not yet: the response still reads from its socket
    response = HTTPSocketResponse(b)
    assert getattr(response, "_sock", None) is b, "HTTPSocketResponse keeps its socket elsewhere than _sock"
    a.sendall(body)
    assert response.read() == body
    assert response._sock is None, "the end of the body no longer clears _sock: drain would receive on a done socket"


def test_sent_request_is_what_the_user_agents_read() -> None:
    """`_sent_request`: EngineClient.request sets it on its response, as HTTPClient.request does, because
    both user agents (a locustfile's own request on self.client) read it from there."""
    assert "_sent_request" in vars(HTTPResponse), "HTTPResponse declares no _sent_request"
    for agent in (UserAgent, LocustUserAgent):
        assert "resp._sent_request" in inspect.getsource(agent._urlopen), f"{agent.__name__} reads no _sent_request"


def test_fast_response_keeps_the_response_as_response(pair) -> None:
    """`_response`: transport.ended_cleanly asks the answer's framing of the FastResponse's response."""
    a, b = pair
    a.sendall(ANSWER)
    raw = HTTPSocketResponse(b)
    assert getattr(FastResponse(raw), "_response", None) is raw, "FastResponse keeps its response elsewhere"
    assert raw.read() == b"hi"
    assert transport.ended_cleanly(FastResponse(raw)), "a complete keep-alive answer leaves its connection reusable"


def test_a_client_keeps_its_pool_as_connection_pool() -> None:
    """`_connection_pool`: EngineClient takes its sockets from it and gives them back."""
    client = HTTPClient("127.0.0.1", 9)
    pool = getattr(client, "_connection_pool", None)
    assert isinstance(pool, ConnectionPool), f"HTTPClient._connection_pool is {type(pool).__name__}"
    assert callable(pool.get_socket) and callable(pool.release_socket)
    client.close()


def test_the_pool_asks_is_socket_alive_before_it_hands_a_socket_out() -> None:
    """`_is_socket_alive`: EngineClient replaces it with one non-blocking peek (tests/test_hostile_transport.py
    counts the pool's calls to it in a run)."""
    assert callable(getattr(ConnectionPool, "_is_socket_alive", None)), "ConnectionPool has no _is_socket_alive"
    assert positional(ConnectionPool._is_socket_alive) == ("sock",)
    assert "self._is_socket_alive(" in inspect.getsource(ConnectionPool.get_socket), (
        "ConnectionPool.get_socket no longer asks _is_socket_alive"
    )


def test_build_request_puts_content_length_last() -> None:
    """`_build_request`: EngineClient builds a plan's head with it once and then changes only the
    Content-Length, which must be the head's last header."""
    assert positional(HTTPClient._build_request)[:2] == ("method", "request_uri")
    assert {"body", "headers"} <= set(inspect.signature(HTTPClient._build_request).parameters)
    client = HTTPClient("127.0.0.1", 9)
    head = client._build_request("POST", "/v1/embeddings", body=b"abc", headers=Headers({"X-A": "b"}))
    client.close()
    assert head.startswith("POST /v1/embeddings HTTP/1.1\r\n") and head.endswith("\r\nContent-Length: 3\r\n\r\n")


def test_the_user_agent_sends_through_clientpool() -> None:
    """`clientpool` (and its `client_args`): transport.install replaces a FastHttpSession's pool with the
    engine's, built with the same client settings, and a locustfile's own request goes through it."""
    session = FastHttpSession("http://127.0.0.1:9", Environment().events.request, user=None)
    agent = session.client
    assert isinstance(getattr(agent, "clientpool", None), HTTPClientPool), "the user agent has no clientpool"
    assert isinstance(agent.clientpool.client_args, dict), "HTTPClientPool has no client_args"
    for cls in (UserAgent, LocustUserAgent):
        assert "self.clientpool.get_client(" in inspect.getsource(cls._urlopen), f"{cls.__name__} sends elsewhere"
    pool = transport.install(agent, transport.Exchange(1024), 65536)
    assert agent.clientpool is pool and pool.client_args["block_size"] == 65536
    pool.close()


def test_a_gevent_socket_keeps_the_os_socket_as_sock(pair) -> None:
    """gevent's socket's `_sock`: the engine's idle check peeks at the OS socket under it."""
    a, b = pair
    assert getattr(b, "_sock", None) is not None, "gevent's socket keeps no _sock"
    assert transport._open_and_quiet(b), "an idle, open connection is reusable"
    a.sendall(b"x")
    gevent.sleep(0.01)
    assert not transport._open_and_quiet(b), "a connection with stray bytes is not"


def test_the_engine_response_builds_on_the_pool_response() -> None:
    """The classes the engine subclasses: their constructors take what EngineClient passes."""
    names = set(inspect.signature(HTTPSocketPoolResponse.__init__).parameters)
    assert {"sock", "pool"} <= names, f"HTTPSocketPoolResponse takes {sorted(names)}"
    base = set(inspect.signature(HTTPSocketResponse.__init__).parameters)
    assert {"block_size", "method", "headers_type"} <= base, f"HTTPSocketResponse takes {sorted(base)}"


def test_locusts_user_state_and_greenlet_args_that_max_requests_reads():
    """request_limit/max_requests.py stops users as Locust's stop_users does, by their private state: each
    greenlet of runner.user_greenlets has its User as args[0], and a user's `_state` is one of
    locust.user.task's LOCUST_STATE_* (RUNNING in its task, WAITING in its wait, STOPPING once told)."""

    class Sleeper(User):
        wait_time = constant(30)

        @task
        def nothing(self) -> None:
            pass

    environment = Environment(user_classes=[Sleeper])
    runner = environment.create_local_runner()
    try:
        runner.start(1, spawn_rate=100)
        gevent.sleep(0.2)
        (greenlet,) = list(runner.user_greenlets)
        user = greenlet.args[0] if greenlet.args else None
        assert isinstance(user, Sleeper), "runner.user_greenlets' greenlet.args[0] is no longer the User"
        assert user._state == LOCUST_STATE_WAITING, f"User._state is {user._state!r} in its wait"
        assert user.greenlet is greenlet and user.group is runner.user_greenlets, "User.greenlet / User.group"
        assert LOCUST_STATE_RUNNING != LOCUST_STATE_STOPPING
    finally:
        runner.quit()
