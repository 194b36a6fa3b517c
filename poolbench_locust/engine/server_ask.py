"""A question asked of the server once, when a plan is made, before any timed request: a GET of a
description route (KServe's /v2/models/{model}), as /tokenize is asked for token counts
(workload/tokens.py), or one POST of a request body whose answer tells what the run's answers will not
(engine/row_probe.py). Bounded in size and time; the run's API key and TLS checks go with it."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import orjson

from poolbench_locust.access import Access
from poolbench_locust.endpoints.spec import ServerAsk
from poolbench_locust.engine.target import request_path
from poolbench_locust.urls import shown_url
from poolbench_locust.wire import JSON

ASK_ANSWER_LIMIT = 1024 * 1024
"""Bytes of a description read at most: a model's metadata is a few hundred bytes."""


ServerPost = Callable[[str, bytes, float, int], Any]
"""(route, JSON request body, timeout seconds, most bytes of the answer read) -> the JSON document the server
answers to a POST of it; raises OSError or ValueError (with a message) when it cannot."""


def server_ask(host: str, access: Access) -> ServerAsk:
    """The plan's way to GET a JSON document from `host` (its path prefix kept)."""
    asks = _asker(host, access)
    return lambda route, timeout: asks(route, None, timeout, ASK_ANSWER_LIMIT)


def server_post(host: str, access: Access) -> ServerPost:
    """The plan's way to POST a JSON body to `host` (its path prefix kept) and read its JSON answer."""
    return _asker(host, access)


def _asker(host: str, access: Access) -> Callable[[str, bytes | None, float, int], Any]:
    parts = urlsplit(host)
    origin = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"  # urllib takes no user:password@ in a URL
    headers = {"Accept": JSON}
    if access.api_key:
        headers["Authorization"] = f"Bearer {access.api_key}"
    context: ssl.SSLContext | None = None
    if parts.scheme == "https":
        if access.ca_bundle:
            context = ssl.create_default_context(cafile=access.ca_bundle)
        elif not access.tls_verify:
            context = ssl._create_unverified_context()  # as the users' own connections (Locust's insecure)

    def ask(route: str, body: bytes | None, timeout: float, limit: int) -> Any:
        url = origin + request_path(host, route)
        method = "GET" if body is None else "POST"
        sent = headers if body is None else {**headers, "Content-Type": JSON}
        request = urllib.request.Request(url, data=body, headers=sent, method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                data = response.read(limit + 1)
        except urllib.error.HTTPError as e:
            raise OSError(
                f"{method} {shown_url(url)} answered HTTP {e.code}: {_error_text(e) or '(no message)'}"
            ) from None
        except (OSError, ValueError) as e:
            raise OSError(f"{method} {shown_url(url)} failed: {getattr(e, 'reason', None) or e}") from None
        if len(data) > limit:
            raise ValueError(f"{method} {shown_url(url)} answered more than {limit // 1024} KiB")
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            raise ValueError(f"{method} {shown_url(url)} answered no JSON") from None

    return ask


def _error_text(error: urllib.error.HTTPError) -> str:
    """The server's own words, short: Triton's and KServe's {"error": "..."}."""
    try:
        doc = orjson.loads(error.read(4096))
    except (OSError, ValueError):
        return ""
    text = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(text, dict):  # vLLM's and OpenAI's {"error": {"message": "..."}}
        text = text.get("message")
    return text[:200] if isinstance(text, str) else ""
