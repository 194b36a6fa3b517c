"""The one way a URL is shown: in a message, a log line, the JSON result, a Prometheus label."""

from __future__ import annotations

from urllib.parse import urlsplit


def shown_url(url: str) -> str:
    """`url` as it may be shown anywhere: user:password@ becomes ***@ (it is a secret like --api-key, and
    the stars say one was given), and the query and fragment are dropped (`?api_key=` is one too)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    return parts._replace(netloc=netloc, query="", fragment="").geturl()
