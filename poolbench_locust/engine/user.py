"""The measuring engine: one `EndpointUser` that every endpoint's User class declares itself on.

A request goes out on the connection pool of FastHttpUser's client (engine/transport.py: `send`),
which returns at the response headers; the engine then reads the body to its last byte, stops the
clock there, judges the answer and fires exactly one request event itself, with the fields Locust's
FastHttpSession gives it (so Locust's stats, CSV, web UI and master, and the pooling stats, see the
same), the end-to-end time, the bytes received and the pooling figures in `context`.
"""

from __future__ import annotations

import logging
import random
import traceback
from time import perf_counter, time
from typing import Any, ClassVar

import gevent
import orjson
from locust import FastHttpUser, task
from locust.contrib.fasthttp import ErrorResponse, FastResponse
from locust.event import EventHook
from locust.exception import CatchResponseError, StopUser

from poolbench_locust.endpoints.spec import AnswerError, AnswerForm, Endpoint, ParsedAnswer
from poolbench_locust.engine import answer_checks, failure_messages
from poolbench_locust.engine.ab import pair_ids, route_of, twin_class
from poolbench_locust.engine.answer_values import Wanted, answer_values
from poolbench_locust.engine.body import CHUNK, BadResponse, Body, read_body
from poolbench_locust.engine.context import RequestContext
from poolbench_locust.engine.plan import Plan, plan_for
from poolbench_locust.engine.target import origin
from poolbench_locust.engine.transport import (
    FOLLOWED_REDIRECTS,
    MAX_REDIRECTS,
    SEND_FAILURES,
    Exchange,
    Target,
    aim,
    ended_cleanly,
    failure_before_headers,
    install,
    send,
)
from poolbench_locust.options import OptionError
from poolbench_locust.store import Slot
from poolbench_locust.wire import JSON
from poolbench_locust.workload import PreparedRequest
from poolbench_locust.workload.arrival import open_loop_of
from poolbench_locust.workload.warmup import warmup_of

logger = logging.getLogger(__name__)

ERROR_BODY_LIMIT = 64 * 1024
"""An error page is read up to this much (after inflating) for its message; past it the connection is dropped."""

_UNCOUNTED = EventHook()
"""Where warm-up requests report: no stats, no CSV, no master listens here."""

_UNCOUNTED_ROUTES: Slot[set[tuple[str, str]]] = Slot("uncounted_routes", set)
"""(User class, route) whose answers came without a token count, warned about once a process."""

ANY_STATUS = frozenset(range(100, 600))
"""geventhttpclient closes the connection on a status it calls bad before the body is read;
accepting every status lets a request of the user's own on `self.client` read the error body too.
The engine's own requests (transport.send) judge every status themselves."""


def _content_type(headers: Any) -> str:
    value = headers.get("content-type") or ""
    return value.split(";", 1)[0].strip().lower() if isinstance(value, str) else ""


def _error_message(status: int, content_type: str, body: bytes, headers: Any) -> str:
    """The server's own words for a non-2xx answer: vLLM's error JSON, or the title of a proxy's page."""
    text = ""
    if content_type == JSON or body[:1] in (b"{", b"["):
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            doc = None
        if isinstance(doc, dict):
            inner = doc.get("error", doc)
            text = inner.get("message", "") if isinstance(inner, dict) else str(inner)
            text = text or str(doc.get("detail", "") or doc.get("message", ""))
    elif content_type == "text/html":
        lower = body.lower()
        start, end = lower.find(b"<title>"), lower.find(b"</title>")
        title = body[start + 7 : end].decode(errors="replace").strip() if 0 <= start < end else ""
        text = f"HTML page: {title}" if title else "HTML page"
    elif body:
        text = body[:200].decode(errors="replace").strip()
    retry = headers.get("retry-after")
    suffix = f" (Retry-After: {retry})" if isinstance(retry, str) else ""
    return f"HTTP {status}: {text or 'no error message'}{suffix}"


class EndpointUser(FastHttpUser):
    """Sends the endpoint's requests in a closed loop and measures each to its last byte.

    A subclass declares `endpoint` and nothing else; it may set `request_name` to rename the
    row in Locust's tables (default: the route).
    """

    abstract = True
    endpoint: ClassVar[Endpoint]
    request_name: ClassVar[str | None] = None
    ab_side: ClassVar[str | None] = None
    """"B" on the twin class that sends a user's requests to --ab-host (engine/ab.py), which is its `host`."""

    def __init__(self, environment: Any) -> None:
        # Options are checked when Locust starts (poolbench_locust.start_checks); a bad value typed into the
        # web UI's form later is caught here and stops this user in on_start, with the same message.
        host = environment.host if self.ab_side is None else self.host
        try:
            self.plan: Plan | None = plan_for(type(self), environment.parsed_options, host, environment)
            self._option_error: OptionError | None = None
        except OptionError as e:
            self.plan, self._option_error = None, e
        if self.plan is not None:
            # The request's own deadline (gevent.Timeout) ends it; the socket timeout is only a backstop,
            # a little later, so that a timeout is always reported the same way.
            self.connection_timeout = self.plan.settings.request_timeout
            self.network_timeout = self.plan.settings.request_timeout + 1.0
            self.insecure = not self.plan.access.tls_verify
            self.ssl_context_factory = self.plan.access.ssl_context_factory()
        super().__init__(environment)
        # Locust joins base URL and path as text; the plan's path already holds the host's own path.
        if self.client.base_url:
            self.client.base_url = origin(self.client.base_url)
        agent = self.client.client
        # The engine's own requests follow these rules in transport.send; a request of the user's own on
        # self.client (a locustfile may send one) follows the same.
        # geventhttpclient types both ClassVar; Locust itself sets them on an instance, as here
        agent.valid_response_codes = ANY_STATUS  # type: ignore[misc]
        agent.redirect_response_codes = FOLLOWED_REDIRECTS  # type: ignore[misc]
        agent.max_redirects = MAX_REDIRECTS
        self._failure_rows = failure_messages.failure_rows(environment)
        self._open_loop = open_loop_of(environment)
        self._warmup = warmup_of(environment)
        # Pooling servers set no cookies, and the cookie jar's add and extract on every request cost
        # about a tenth of a small request's client CPU (bench/client_cost.py).
        agent.cookiejar = None
        # The engine's client pool (engine/transport.py): bounded heads, deadlines that hold against a fast
        # sender, one resend on a stale keep-alive connection. geventhttpclient receives in 4 KiB blocks by
        # default (a 700 kB JSON body took 170 recv calls); the pool's connections receive CHUNK at a time.
        self._exchange = Exchange(self.plan.limits.max_header_bytes if self.plan else 0)
        self._pool = install(agent, self._exchange, CHUNK)
        self._https = str(self.client.base_url or "").lower().startswith("https:")
        self._next = random.randrange(len(self.plan.requests)) if self.plan else 0
        self._body: Body | None = None
        """The body of the request in flight, once it was read to its end."""
        self._target: Target | None = None
        self._aimed: tuple[object, object] = (None, None)
        """The path and headers `_target` was worked out from: a plan or its headers replaced (the preflight's,
        a test's, a locustfile's) is aimed anew."""
        self._context: dict[str, Any] = {}
        """What `context()` adds to every request's event: an --ab-paired pair's id, else nothing."""
        self._twin: EndpointUser | None = None
        """--ab-host: the user of the twin class that sends this user's B requests (engine/ab.py)."""
        if self.plan is not None and (b_host := self.plan.settings.ab_host) and self.ab_side is None:
            self._twin = twin_class(type(self), b_host)(environment)
            self._ab_paired = self.plan.settings.ab_paired
            self._ab_turn = random.randrange(2)  # half the users begin with B: both hosts see the same load shape
            self._ab_last: PreparedRequest | None = None
            self._ab_route = route_of(environment)  # a capacity probe of one host sends it every request

    def context(self) -> Any:  # Locust's own is untyped, and the event's context merges it into a RequestContext
        return self._context

    def on_start(self) -> None:
        if self._option_error is not None:  # already logged once by the test_start check
            logger.debug("%s", self._option_error)
            raise StopUser()

    @task
    def send(self) -> None:
        if (plan := self.plan) is None:
            return
        measure = self.measure if self._twin is None else self._measure_ab
        settings = plan.settings
        if not settings.open_loop:
            measure(self._next_request(plan))
            return
        if (arrival := self._open_loop.next_arrival(self.environment, settings, plan.schedule)) is None:
            raise StopUser()  # the trace is over
        due, line = arrival
        req = self._next_request(plan) if line is None else plan.requests[line]
        with self._open_loop.slot(self.environment, settings, due):
            measure(req, due=due)

    def _measure_ab(self, req: PreparedRequest, due: float | None = None) -> None:
        """--ab-host: a scheduled request goes to A or B in turn, B sent the input A was sent before it (both
        hosts get the same inputs); --ab-paired: to both at once, the two requests launched together."""
        twin = self._twin
        assert twin is not None
        if (only := self._ab_route.only) is not None:
            (self if only == "A" else twin).measure(req, due=due)
            return
        if self._ab_paired:
            self._context = twin._context = {"ab_pair": next(pair_ids)}
            other = gevent.spawn(twin.measure, req, due)
            try:
                self.measure(req, due=due)
                other.join()
            except BaseException:  # the user is stopped (or failed): its B request goes with it
                other.kill(block=False)
                raise
            return
        self._ab_turn ^= 1
        if self._ab_turn:
            self._ab_last = req
            self.measure(req, due=due)
        else:
            twin.measure(self._ab_last or req, due=due)

    def _next_request(self, plan: Plan) -> PreparedRequest:
        self._next = (self._next + 1) % len(plan.requests)
        return plan.requests[self._next]

    def measure(self, req: PreparedRequest, due: float | None = None) -> None:
        """Send one prepared request and fire its one request event.

        `due` is the perf_counter time an open-loop schedule meant it to leave: when it leaves later
        (no free slot), its time counts from then, and the wait is reported as queue_ms.
        """
        if (plan := self.plan) is None:
            raise StopUser()
        aimed_path, aimed_headers = self._aimed
        if (target := self._target) is None or aimed_path is not plan.path or aimed_headers is not plan.headers:
            target = self._aim(plan)
        deadline = gevent.Timeout(plan.settings.request_timeout)
        deadline.start()
        exchange = self._exchange
        form = plan.form
        exchange.begin(
            deadline,
            plan.settings.request_timeout,
            req.sequences * form.head_allowance,
            form.head_allowance_why,
            not form.keeps_body,
        )
        start_time = time()  # the event's wall-clock start, as FastHttpSession gives it
        start = perf_counter()
        origin = start if due is None else min(due, start)
        # Warm-up requests are sent like any other and counted nowhere: their event goes to a hook no one
        # listens to (counting starts where the stats were reset: workload.warmup).
        event = _UNCOUNTED if not self._warmup.counting else self.client.request_event
        # len() of bytes is O(1): the one item this adds to every request's context
        context: RequestContext = {"sequences": req.sequences, "request_bytes": len(req.body)}
        try:
            resp: FastResponse
            try:
                resp = send(self._pool, target, req.body)
            except SEND_FAILURES as e:
                # status_code 0, as Locust's session reports it. Its types ask a request (the engine builds none)
                # and an Exception (Locust itself passes gevent's Timeout, a BaseException, as here)
                resp = ErrorResponse(None, e)  # type: ignore[arg-type]
            if exchange.retried:  # a stale keep-alive connection, resent once: its time counts from the resend
                start = exchange.sent_at
                origin = start if due is None else min(due, start)
                context["retried"] = True
                context["request_bytes"] = 2 * len(req.body)  # the body went out twice
            self._body = None
            try:
                received, failure = self._consume(plan, resp, req, start, context)
            except Exception as e:  # a bug here must still be one counted failure, never a lost event
                trace = "".join(traceback.format_exception(e))  # it may quote what the server sent
                cleaned = failure_messages.clean(trace, plan.secrets, 4000)
                logger.error("unexpected error while reading the answer: %s", cleaned)
                resp.release()
                received, failure = exchange.body_received, f"client error: {type(e).__name__}: {e}"
            deadline.close()  # from here on nothing may time out: the event must be fired
            if failure is not None and not ended_cleanly(resp):
                exchange.drop_connection()  # whatever the server left on it must reach no other request
        finally:
            deadline.close()
            exchange.end()
        # The clock stops at the last byte; parsing and checking the answer come after it and
        # are not the server's time (orjson takes 3 ms of a 700 kB float answer).
        ended = self._body.ended if self._body is not None else perf_counter()
        if due is not None:
            context["queue_ms"] = (start - origin) * 1000
        exception = None
        if failure is not None:
            message = failure_messages.clean(failure, plan.secrets)
            # A warm-up failure is counted nowhere: it must take none of the failure rows' places either.
            exception = CatchResponseError(message if event is _UNCOUNTED else self._failure_rows.row(message))
        if user_context := self.context():  # Locust's User.context(), as FastHttpSession merges it
            context = {**user_context, **context}
        event.fire(
            request_type="POST",
            name=plan.label,
            response_time=(ended - origin) * 1000,
            response_length=received,
            exception=exception,
            context=context,
            url=target.url,
            start_time=start_time,
            response=resp,
        )

    def _aim(self, plan: Plan) -> Target:
        client = self.client
        self._target = aim(client.client, client.base_url or "", plan.path, plan.headers, client.auth_header)
        self._aimed = (plan.path, plan.headers)
        return self._target

    def _consume(
        self,
        plan: Plan,
        resp: Any,
        req: PreparedRequest,
        start: float,
        context: RequestContext,
    ) -> tuple[int, str | None]:
        """Read the whole answer and judge it: (bytes received, failure message or None)."""
        if (error := getattr(resp, "error", None)) is not None:
            return 0, failure_before_headers(error, self._exchange, self._https)
        context["ttfb_ms"] = (perf_counter() - start) * 1000
        headers = resp.headers
        try:
            status = resp.status_code
            content_type = _content_type(headers)
            if 300 <= status < 400:  # one not followed: not an answer to this request
                body = self._read(resp, keep=False, limit=ERROR_BODY_LIMIT)
                location = headers.get("location")
                return (
                    body.wire_bytes,
                    f"redirected to {location if isinstance(location, str) else 'nowhere'} (status {status})",
                )
            if not 200 <= status < 300:
                try:
                    body = self._read(resp, keep=True, limit=ERROR_BODY_LIMIT)
                except BadResponse as e:  # the status is what went wrong; the body's trouble comes second
                    return e.received, f"HTTP {status}: {e}"
                return body.wire_bytes, _error_message(status, content_type, body.data or b"", headers)
            form = plan.form
            if content_type != form.content_type and (content_type or not form.untyped_ok):
                body = self._read(resp, keep=False)
                return (
                    body.wire_bytes,
                    f"wrong content type: expected {form.content_type}, got {content_type or 'none'}",
                )
            # Whether this answer is compared is decided before its body is read: a binary form's sampled
            # body is then kept whole. `req.refs`: the one test every other request costs.
            sampled = plan.comparisons.take() if req.refs else False
            answer, data = self._answer(plan, form, resp, req, sampled)
            what = "results" if plan.endpoint.shape == "pairs" else "embeddings"
            answer_checks.judge(answer, data, req, plan.settings, what, plan.token_rows, context)
        except BadResponse as e:  # a check that failed after the whole body came counts all its bytes
            return (self._body.wire_bytes if self._body is not None else e.received), str(e)
        received = self._body.wire_bytes if self._body is not None else 0
        if (tokens := answer.prompt_tokens) is not None:
            source = answer.token_source
            # both counts exist: the stats show their gap
            context["client_tokens"] = req.client_tokens
            context["client_token_source"] = plan.client_token_source
        else:  # a valid answer without a count: the client's own count, said once per route
            if not answer.client_counted:
                if plan.settings.require_server_tokens:
                    return (
                        received,
                        f"answer has no token count (looked for {form.looked_for}); --require-server-tokens",
                    )
                self._said_uncounted(plan)
            tokens, source = req.client_tokens, plan.client_token_source
        context["input_tokens"] = tokens
        context["token_source"] = source
        if sampled:
            self._values(plan, req, answer, context)
        return received, None

    def _values(self, plan: Plan, req: PreparedRequest, answer: ParsedAnswer, context: RequestContext) -> None:
        """The values of the reference inputs the request carried, into the event's context."""
        rows = plan.token_rows
        wanted = Wanted(plan.settings, rows is not None, rows.hidden() if rows is not None else None)
        kept = self._body.data if self._body is not None and not plan.form.keeps_body else None
        try:
            context["answers"] = answer_values(answer, req.refs, wanted, kept)
        except ValueError as e:  # an answer the checks let through (--no-validate), a body too large to keep
            context["answers_unread"] = str(e)[:300]  # the consistency room counts it and says the first

    def _said_uncounted(self, plan: Plan) -> None:
        said = _UNCOUNTED_ROUTES.of(self.environment)
        if (key := (type(self).__name__, plan.route)) not in said:
            said.add(key)
            logger.warning(
                "%s (%s): the server's answers carry no token count (looked for %s); their tokens are the "
                "client's own count (%s); --require-server-tokens makes such an answer a failed request",
                *key,
                plan.form.looked_for,
                plan.client_token_source,
            )

    def _read(self, resp: Any, **how: Any) -> Body:
        """read_body, remembering the body read: its end time and size stand even if a check fails."""
        self._body = read_body(resp, self._exchange, **how)
        return self._body

    def _answer(
        self, plan: Plan, form: AnswerForm, resp: Any, req: PreparedRequest, sampled: bool
    ) -> tuple[ParsedAnswer, bytes]:
        """Read the body as its form says (kept whole, or streamed and dropped but for its head), then the
        answer from it: (the answer, the JSON body or b""). A `sampled` answer of a form that drops its body
        keeps it too (up to --max-body-mb; past it, dropped and not compared), for its values."""
        headers = resp.headers
        try:
            if form.keeps_body:
                body = self._read(resp, keep=True, max_kept=plan.max_kept)
                data = body.data or b""
                return form.read(headers, None, data, body.size, req.expected_items), data
            rows = plan.token_rows
            try:
                head, note = form.head(headers, rows.hidden() if rows is not None else None)
            except AnswerError as e:  # still a whole request: its time and bytes include the body
                raise BadResponse(str(e), self._read(resp, keep=False).wire_bytes) from None
            if sampled:
                body = self._read(resp, keep=True, head=head, max_kept=plan.max_kept, spare=True)
            else:
                body = self._read(resp, keep=False, head=head)
            return form.read(headers, note, body.head, body.size, req.expected_items), b""
        except AnswerError as e:
            raise BadResponse(str(e)) from None


def endpoint_users(environment: Any) -> list[type[EndpointUser]]:
    """The environment's User classes that this engine runs (a locustfile may mix in others)."""
    return [u for u in environment.user_classes if issubclass(u, EndpointUser)]
