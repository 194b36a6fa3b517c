"""The forms an answer comes in, and how each is read into a `ParsedAnswer` (endpoints/spec.py).

JSON is every route's form for --encoding-format float and base64: parsed whole (lazyjson for a float
answer of embeddings, which builds no number it only counts; orjson else), read by the route's own reader,
its count where the route says (`Endpoint.tokens`). A route with binary answers declares their forms
(`Endpoint.forms`): vLLM's in endpoints/vllm_bytes.py, KServe's in endpoints/kserve.py.

Whatever the form, a server may send its count and timings in headers, as TEI does: every form reads them
(`SERVER_HEADERS`), a count there standing where the body holds none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from poolbench_locust import lazyjson
from poolbench_locust.endpoints.spec import (
    MAX_SERVER_MS,
    MAX_TOKENS,
    AnswerError,
    AnswerForm,
    Endpoint,
    ParsedAnswer,
)
from poolbench_locust.options import Settings
from poolbench_locust.wire import JSON, OCTET_STREAM, TEI_PRESENCE_HEADER, TEI_TIMING_HEADERS, TEI_TOKENS_HEADER

LAZY_FROM_BYTES = 0 if lazyjson.SCANS else 32 * 1024
"""Float answers from this size on are read by lazyjson, which builds no number it only counts. With its C
pass, every one; with simdjson alone, from 32 kB: below it orjson's objects cost less than simdjson's
proxies (bench/json_readers.py)."""

_HEADER_DIGITS = 12


class HeaderFigures:
    """A server's count and timings sent as response headers, all together or none (TEI's `x-compute-*`)."""

    __slots__ = ("presence", "timings", "tokens", "where")

    def __init__(self, presence: str, timings: Mapping[str, str], tokens: str) -> None:
        self.presence = presence
        """The header that is there whenever the others are: one lookup tells an answer without them."""
        self.timings = timings
        """header -> the request context's key of its milliseconds."""
        self.tokens = tokens
        self.where = f"the {tokens} header"

    def read(self, headers: Any, answer: ParsedAnswer) -> ParsedAnswer:
        """The answer with the headers' timings added, and their count where the body gave none."""
        if headers.get(self.presence) is None:
            return answer
        timings = dict(answer.server_ms)
        for header, key in self.timings.items():
            if (ms := header_number(headers, header, MAX_SERVER_MS)) is not None:
                timings[key] = ms
        answer.server_ms = timings
        count = header_number(headers, self.tokens, MAX_TOKENS)
        if answer.prompt_tokens is None and count is not None:
            answer.prompt_tokens, answer.tokens_where, answer.token_source = count, self.where, "server"
        return answer

    def looked_for(self, paths: str) -> str:
        """Where a form whose body holds `paths` looks for its count, in words."""
        return f"{paths}, {self.where}" if paths else self.where


def header_number(headers: Any, header: str, most: int, named: str = "") -> int | None:
    """A whole number a response header holds, checked (at most `most`; AnswerError naming it, as `named` if
    given, when it is not one), or None when the header is absent."""
    value = headers.get(header)
    if value is None:
        return None
    # str.isdigit() alone passes '²' and other Unicode digits, which int() then rejects.
    if not isinstance(value, str) or not (value.isascii() and value.isdigit() and len(value) <= _HEADER_DIGITS):
        shown = repr(value[:20]) if isinstance(value, str) else "sent more than once"
        raise AnswerError(f"{named or header} header is not a whole number: {shown}")
    number = int(value)
    if number > most:
        raise AnswerError(f"{named or header} header is implausible: {number} (at most {most})")
    return number


SERVER_HEADERS = HeaderFigures(TEI_PRESENCE_HEADER, TEI_TIMING_HEADERS, TEI_TOKENS_HEADER)
"""TEI's headers, read on every route's answers: TEI serves OpenAI's /v1/embeddings too, with them."""


class StreamedForm:
    """What the binary forms share: raw values streamed and dropped but for their head, no count in the body
    unless a subclass says where (the headers' count stands)."""

    content_type = OCTET_STREAM
    untyped_ok = False
    keeps_body = False
    head_allowance = 0
    head_allowance_why = ""
    looked_for = SERVER_HEADERS.looked_for("")
    not_compared: str | None = None

    def row_probe(self, body: bytes) -> bytes | None:
        return None  # its answers say their rows, or hold none


class JsonForm:
    """A JSON answer, parsed whole and read by its route's reader."""

    content_type = JSON
    untyped_ok = False
    keeps_body = True
    head_allowance = 0
    head_allowance_why = ""
    not_compared: str | None = None

    def __init__(self, endpoint: Endpoint, settings: Settings) -> None:
        self._endpoint = endpoint
        # lazyjson from this size on, for float answers of embeddings only (the others hold none to skip)
        self._lazy_from = LAZY_FROM_BYTES if endpoint.vectors and settings.encoding_format == "float" else None
        self.looked_for = SERVER_HEADERS.looked_for(str(endpoint.tokens))

    def head(self, headers: Any, hidden: int | None) -> tuple[int, Any]:
        return 0, None  # keeps its body: never asked

    def row_probe(self, body: bytes) -> bytes | None:
        return None  # a float answer says each input's rows itself

    def read(self, headers: Any, note: Any, body: bytes, size: int, expected: int) -> ParsedAnswer:
        """The route's reading of the document. A lazy document's vectors are read by the engine's checks
        right after, before any other answer is parsed (no switch to another greenlet in between)."""
        lazy = self._lazy_from is not None and len(body) >= self._lazy_from
        try:
            doc = lazyjson.loads(body) if lazy else orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise AnswerError(f"garbled JSON body: {e}") from None
        return SERVER_HEADERS.read(headers, self._endpoint.read(doc))


FormMaker = Callable[[Endpoint, Settings, bool], AnswerForm]


def form_of(endpoint: Endpoint, settings: Settings, token_level: bool) -> AnswerForm:
    """The form a plan's answers come in: the route's own (Endpoint.forms), else JSON."""
    if endpoint.forms is not None:
        return endpoint.forms(endpoint, settings, token_level)
    return JsonForm(endpoint, settings)
