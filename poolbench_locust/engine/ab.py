"""--ab-host: the engine's part of measuring two servers on one schedule. A request to --host (A) is named
as always with ` [A]` after it, one to --ab-host (B) with ` [B]`, so that Locust's own tables, CSV files and
web UI show each host's figures; the twin User class is the one a user sends its B requests with (its own
connection pool, its own plan for B's host). What is compared, and how, is the ab room's (poolbench_locust/ab/)."""

from __future__ import annotations

import itertools
from typing import Any
from urllib.parse import urlsplit

from poolbench_locust.store import Slot

A_MARK = " [A]"
B_MARK = " [B]"
MARKS = {"A": A_MARK, "B": B_MARK}

pair_ids = itertools.count(1)
"""--ab-paired: each pair's id, in the context of both its requests (`ab_pair`): unique in a process."""


def same_host(a: str | None, b: str | None) -> bool:
    """Whether two --host URLs name one server: scheme, host and port alike (a trailing / or a default port
    does not make another server)."""
    if not a or not b:
        return False
    pa, pb = urlsplit(a.strip()), urlsplit(b.strip())

    def where(p: Any) -> tuple[str, str, int | None, str]:
        try:
            port = p.port or (443 if p.scheme == "https" else 80)
        except ValueError:
            port = None
        return p.scheme.lower(), (p.hostname or "").lower(), port, p.path.rstrip("/")

    return where(pa) == where(pb)


def mark(ab_host: str | None, target: str | None) -> str:
    """The mark of a request name: none without --ab-host, else [B] for --ab-host's requests, [A] for the others."""
    if not ab_host:
        return ""
    return B_MARK if same_host(target, ab_host) else A_MARK


def side_of(name: str) -> str | None:
    """ "A" or "B" for a request name an A/B run marked, else None."""
    if name.endswith(B_MARK):
        return "B"
    if name.endswith(A_MARK):
        return "A"
    return None


def unmarked(name: str) -> str:
    """The request name without its A/B mark."""
    return name[: -len(A_MARK)] if side_of(name) is not None else name


_TWINS: dict[tuple[type[Any], str], type[Any]] = {}
"""Each User class's twin for a B host: one class, however many users and runs make it (classes, not state)."""


def twin_class(user_class: type[Any], host: str) -> type[Any]:
    """The User class that sends `user_class`'s requests to --ab-host: the same class, aimed at `host`, never
    spawned by Locust (it is abstract and in no environment's user classes); a user of `user_class` holds one."""
    twin = _TWINS.get((user_class, host))
    if twin is None:
        attributes = {"host": host, "ab_side": "B", "abstract": True, "__module__": user_class.__module__}
        twin = _TWINS[user_class, host] = type(user_class.__name__, (user_class,), attributes)
    return twin


ROUTE_MESSAGE = "poolbench_ab_route"
"""A capacity search of each host (capacity/): "A" or "B" sends every scheduled request to that host alone
(the probe of that host measuring now), None in turn again. Sent by the search's driver to every process."""


class Route:
    """Where this process's A/B users send their scheduled requests: to both in turn (None), or to one host."""

    only: str | None = None


_ROUTE = Slot("ab.route", Route)


def route_of(environment: Any) -> Route:
    return _ROUTE.of(environment)


def set_route(environment: Any, side: Any) -> None:
    """The route a message asked for: "A", "B" or None (anything else, from whoever sent it, is ignored)."""
    if side is None or side in MARKS:
        route_of(environment).only = side
