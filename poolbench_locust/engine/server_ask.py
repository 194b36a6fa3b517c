"""A question asked of the server once, when a plan is made, before any timed request: a GET of a
description route (KServe's /v2/models/{model}), as /tokenize is asked for token counts
(workload/tokens.py). Bounded in size and time; the run's API key and TLS checks go with it."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

import orjson

from poolbench_locust.access import Access
from poolbench_locust.endpoints.spec import ServerAsk
from poolbench_locust.engine.target import request_path
from poolbench_locust.urls import shown_url

ASK_ANSWER_LIMIT = 1024 * 1024
"""Bytes of a description read at most: a model's metadata is a few hundred bytes."""


def server_ask(host: str, access: Access) -> ServerAsk:
    """The plan's way to GET a JSON document from `host` (its path prefix kept)."""
    parts = urlsplit(host)
    origin = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"  # urllib takes no user:password@ in a URL
    headers = {"Accept": "application/json"}
    if access.api_key:
        headers["Authorization"] = f"Bearer {access.api_key}"
    context: ssl.SSLContext | None = None
    if parts.scheme == "https":
        if access.ca_bundle:
            context = ssl.create_default_context(cafile=access.ca_bundle)
        elif not access.tls_verify:
            context = ssl._create_unverified_context()  # as the users' own connections (Locust's insecure)

    def ask(route: str, timeout: float) -> Any:
        url = origin + request_path(host, route)
        request = urllib.request.Request(url, headers=headers, method="GET")
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                data = response.read(ASK_ANSWER_LIMIT + 1)
        except urllib.error.HTTPError as e:
            raise OSError(f"GET {shown_url(url)} answered HTTP {e.code}: {_error_text(e) or '(no message)'}") from None
        except (OSError, ValueError) as e:
            raise OSError(f"GET {shown_url(url)} failed: {getattr(e, 'reason', None) or e}") from None
        if len(data) > ASK_ANSWER_LIMIT:
            raise ValueError(f"GET {shown_url(url)} answered more than {ASK_ANSWER_LIMIT // 1024} KiB")
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            raise ValueError(f"GET {shown_url(url)} answered no JSON") from None

    return ask


def _error_text(error: urllib.error.HTTPError) -> str:
    """The server's own words, short: Triton's and KServe's {"error": "..."}."""
    try:
        doc = orjson.loads(error.read(4096))
    except (OSError, ValueError):
        return ""
    text = doc.get("error") if isinstance(doc, dict) else None
    return text[:200] if isinstance(text, str) else ""
