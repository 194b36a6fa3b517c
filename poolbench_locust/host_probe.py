"""--host checked once at start: a name that resolves and a port that listens, within a bound."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import gevent

from poolbench_locust.store import Slot
from poolbench_locust.urls import shown_url

HOST_CHECK_TIMEOUT_S = 5.0
"""Bound of the name lookup and of the TCP connect that check --host at start."""


@dataclass
class Probed:
    """The host found listening in an environment: not probed again until the host changes (a web UI's
    next run may aim elsewhere). The bundled mock's own address counts as found."""

    host: str | None = None


_PROBED = Slot("probed_host", Probed)


def probed(environment: Any) -> Probed:
    return _PROBED.of(environment)


def host_error(host: str, option: str = "--host") -> str | None:
    """Why nothing can be sent to `host`, or None.

    Checked once at start, so that a typo in --host stops the run with one line instead of
    becoming thousands of failed requests. A TCP connect is enough: it proves a name that
    resolves and a port that listens, without sending the server a request it would count.
    """
    shown = f"{option} {shown_url(host)}"
    parts = urlsplit(host)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{shown}: not an http:// or https:// URL with a host (e.g. http://127.0.0.1:8000)"
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        return f"{shown}: the port must be a number in 1..65535"
    name = parts.hostname
    try:
        with gevent.Timeout(HOST_CHECK_TIMEOUT_S):
            addresses = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except gevent.Timeout:
        return f"{shown}: no answer from DNS for {name} within {HOST_CHECK_TIMEOUT_S:g} s"
    except socket.gaierror as e:
        return f"{shown}: cannot resolve {name}: {e.strerror}"
    reason = "no address"
    for family, kind, proto, _, address in addresses:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.settimeout(HOST_CHECK_TIMEOUT_S)
                probe.connect(address)
            return None
        except ConnectionRefusedError:
            reason = "connection refused (nothing listens there)"
        except TimeoutError:
            reason = f"no answer within {HOST_CHECK_TIMEOUT_S:g} s"
        except OSError as e:
            reason = e.strerror or str(e)
    return f"{shown}: cannot connect to {name}:{port}: {reason}"
