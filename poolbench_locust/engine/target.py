"""Where a request goes: the path of --host, then the route of the User class.

--host may carry a path, the prefix a gateway serves the model server under
(`http://gateway/team-a` + `/v1/embeddings`). Locust's session joins the two as text, so a trailing
slash became `//v1/embeddings`, and an OpenAI SDK user's base URL (`http://server:8000/v1`) became
`/v1/v1/embeddings` while every message named `/v1/embeddings`. Here the path is joined once, the
engine sends it as it is, and every message names it.

A host whose path ends with the route's first segment stops the run at start, with the --host to
write instead: the doubled segment is almost always that base-URL habit, and joining it away
silently would send a request that neither option says, and be wrong for the rare gateway that
does mount a server under that segment (which `--endpoint-path` can still reach).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from poolbench_locust.options import OptionError
from poolbench_locust.urls import shown_url


def request_path(host: str | None, route: str) -> str:
    """The path requested for `route` on `host`; OptionError when the host's path doubles the route's first segment."""
    parts = urlsplit(host or "")
    prefix = parts.path.rstrip("/")
    if not prefix:
        return route
    last, first = prefix.rsplit("/", 1)[-1], route.lstrip("/").split("/", 1)[0]
    if last and last == first:
        shown = shown_url(parts.geturl())
        fixed = shown_url(parts._replace(path=prefix[: -len(last) - 1]).geturl())
        raise OptionError(
            "--host",
            f"{shown} ends with /{last} and the route {route} begins with it: requests would go to "
            f"{prefix}{route}. Write --host {fixed} (the route is added to it; an OpenAI SDK's base URL "
            "ends in /v1, --host does not)",
        )
    return prefix + route


def origin(url: str) -> str:
    """The scheme and host:port of a URL, without its path: what the request path is sent to."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
