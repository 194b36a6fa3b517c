"""The mock server: a gevent StreamServer whose connections speak `http11` and answer with `routes`."""

from __future__ import annotations

import logging
import socket
import time
from typing import Any, cast

import orjson
from gevent.pool import Pool
from gevent.server import StreamServer

from poolbench_locust.mockserver import faults, routes
from poolbench_locust.mockserver.calls import BadRequest, Call, Handler
from poolbench_locust.mockserver.config import ControlError, Controls, MockConfig
from poolbench_locust.mockserver.http11 import HttpError, Request, read_request, send_reply
from poolbench_locust.mockserver.metrics import CONTENT_TYPE, Metrics
from poolbench_locust.mockserver.reply import Reply, error_reply
from poolbench_locust.mockserver.stats import Stats

logger = logging.getLogger("poolbench_locust.mockserver")

_IMMEDIATE = Controls(ttfb_ms=0.0, body_ms=0.0, dim=1, fault=None, flavor="vllm", stall_ms=0.0, gzip=False)
BACKLOG = 2048
"""Load tests open hundreds of connections at once; the default backlog would drop some."""


class MockServer:
    def __init__(self, config: MockConfig | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config = config or MockConfig()
        self.host = host
        self._stats = Stats()
        self._metrics = Metrics(self.config.model, routes.metrics_page(self.config.flavor))
        self._faults = faults.FaultDraw(self.config.faults, self.config.seed)
        self._in_flight = 0
        """Pooling requests read and not yet answered to their last byte: the load --drift-above and
        --flip-above look at (under gevent, one thread, a plain counter is exact)."""
        self._answered = faults.Answered() if self.config.cache_drift else None
        # A pool (unbounded) lets stop() end the handlers of idle keep-alive connections too.
        self._server = StreamServer((host, port), self._connection, backlog=BACKLOG, spawn=Pool())

    def start(self) -> None:
        """Bind and serve in the current gevent hub; returns at once."""
        self._server.start()

    def stop(self, timeout: float = 0.5) -> None:
        self._server.stop(timeout=timeout)

    @property
    def port(self) -> int:
        return cast(int, self._server.server_port)  # None for a Unix socket only: the mock binds TCP

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stats(self) -> dict[str, Any]:
        return self._stats.snapshot()

    def reset(self) -> None:
        self._stats.reset()
        if self._answered is not None:  # a restarted server's cache would be empty too
            self._answered.clear()
        # as a restarted server's: its counters start again
        self._metrics = Metrics(self.config.model, routes.metrics_page(self.config.flavor))

    def _connection(self, sock: socket.socket, address: Any) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray()
        try:
            while True:
                try:
                    request = read_request(sock, buf)
                except HttpError as e:
                    send_reply(sock, error_reply(e.status, str(e), "BadRequestError"), keep_alive=False)
                    return
                if request is None or not self._serve(sock, request):
                    return
        except OSError:
            pass  # the client went away: nothing to answer

    def _serve(self, sock: socket.socket, request: Request) -> bool:
        """Answer one request; True if the connection can take the next one."""
        route = routes.pooling_route(request.path)
        if route is None:
            return self._answer(sock, request, None)
        self._in_flight += 1
        try:
            return self._answer(sock, request, route)
        finally:
            self._in_flight -= 1

    def _answer(self, sock: socket.socket, request: Request, route: tuple[Handler, dict[str, str]] | None) -> bool:
        path, controls, fault = request.path, _IMMEDIATE, None
        pooling = route is not None
        if path.startswith("/mock/"):
            reply = self._control(request)  # never delayed, faulted or counted
        elif (request.method, path) == ("GET", "/metrics"):
            reply = Reply(200, self._metrics.text(), CONTENT_TYPE)  # nor is a scrape
        else:
            if pooling:
                self._stats.requested(path, request.body)
            try:
                controls = Controls.of(request.headers, self.config)
            except ControlError as e:
                reply = error_reply(400, str(e), "BadRequestError")
            else:
                fault = (controls.fault or self._faults.draw()) if pooling else None
                if fault is not None:
                    self._stats.faulted(fault)
                reply = self._reply(request, controls, fault, route)
        completed = False
        metrics = self._metrics
        number = metrics.began(request.arrived, controls.ttfb_ms, reply.sequences) if pooling else 0
        try:
            completed = send_reply(
                sock,
                reply,
                arrived=request.arrived,
                ttfb_ms=controls.ttfb_ms,
                body_ms=controls.body_ms,
                fault=fault,
                stall_ms=controls.stall_ms,
                keep_alive=request.keep_alive,
                writes=self.config.writes,
                chunks=self.config.chunks,
            )
        finally:  # a reply the client hung up on, or a fault cut short, has no server time: None keeps the order
            done = time.monotonic() if completed else None
            served = completed and pooling and fault is None and 200 <= reply.status < 300
            if pooling:
                self._stats.timed(request.arrived, done)
                metrics.ended(
                    number,
                    path,
                    reply.status,
                    request.arrived,
                    done,
                    served,
                    reply.sequences,
                    reply.tokens,
                    controls.ttfb_ms,
                    reply.prompts,
                )
        if served:
            self._stats.served(path, reply.tokens, reply.sequences, len(reply.body))
            if any(reply.drift):
                self._stats.drifted(*reply.drift)
        return completed and request.keep_alive

    def _reply(
        self,
        request: Request,
        controls: Controls,
        fault: str | None,
        route: tuple[Handler, dict[str, str]] | None,
    ) -> Reply:
        if (injected := faults.error_answer(fault)) is not None:
            return injected
        pooling = route is not None
        found = route if pooling else routes.service_route(request.method, request.path)
        if found is None:
            if routes.served_path(request.path):
                return error_reply(405, f"Method Not Allowed: {request.method} {request.path}", "MethodNotAllowed")
            return error_reply(404, f"Not Found: {request.path}", "NotFoundError")
        handler, params = found
        if pooling and request.method != "POST":
            return error_reply(405, f"Method Not Allowed: {request.method} {request.path}", "MethodNotAllowed")
        try:
            body = orjson.loads(request.body) if request.body else {}
        except orjson.JSONDecodeError as e:
            return error_reply(400, f"Invalid JSON body: {e}", "BadRequestError")
        try:
            if not isinstance(body, dict):
                raise BadRequest("the request body must be a JSON object")
            load, config = self._in_flight, self.config
            drift, flip = faults.above(config.drift_above, load), faults.above(config.flip_above, load)
            call = Call(body, controls, config, fault, params, drift, flip, self._answered)
            reply = routes.render(handler(call), call, request.accepts_gzip())
            reply.drift = (call.drifted, call.cache_drifted, call.flipped)
            return reply
        except BadRequest as e:
            return error_reply(400, str(e), "BadRequestError")
        except Exception:  # a bug of the mock must not look like a fault it injected
            logger.exception("poolbench-mock failed on %s %s", request.method, request.path)
            return error_reply(500, "poolbench-mock internal error (a bug, not an injected fault)", "MockError")

    def _control(self, request: Request) -> Reply:
        if (request.method, request.path) == ("GET", "/mock/stats"):
            return Reply(200, orjson.dumps(self._stats.snapshot()))
        if (request.method, request.path) == ("GET", "/mock/timings"):
            return Reply(200, orjson.dumps({"server_ms": self._stats.times_ms()}))
        if (request.method, request.path) == ("POST", "/mock/reset"):
            self.reset()
            return Reply(200, orjson.dumps(self._stats.snapshot()))
        return error_reply(404, f"Not Found: {request.method} {request.path}", "NotFoundError")
