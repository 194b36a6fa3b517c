"""Who else may explain an open loop that fell behind for want of a free slot: the server itself.

Every user busy when an arrival fell due reads as "no free slot" on the client's side, whether the users
were too few or the server held each of them in its own queue. Only the server's metrics (--server-metrics,
a room above this one) can tell the two apart, so this room knows them only through a protocol: a room
that can tell registers a `ServerCause` in the environment's store, as a collector registers with
prometheus_client's registry, and the client-load board asks it when it words the warning.
"""

from __future__ import annotations

import logging
from typing import Protocol

from locust.env import Environment

from poolbench_locust.store import Slot

logger = logging.getLogger("poolbench_locust")


class ServerCause(Protocol):
    def __call__(self) -> str | None:
        """A phrase saying that the server was the limit over the measured window so far ("the server was
        saturated: ..."), or None when its figures do not say so (or there are none)."""
        ...


_CAUSES: Slot[list[ServerCause]] = Slot("pace_server_causes", list)


def provide(environment: Environment, cause: ServerCause) -> None:
    """Register a source of the server's side of a fell-behind warning (on the master or the one process)."""
    _CAUSES.of(environment).append(cause)


def server_cause(environment: Environment) -> str | None:
    """The first registered source's phrase that names the server, or None. A source that fails is left
    out: a warning is never lost to the figures that would have reworded it."""
    for cause in _CAUSES.peek(environment) or ():
        try:
            if phrase := cause():
                return phrase
        except Exception:
            logger.debug("server cause of a fell-behind warning", exc_info=True)
    return None


_ALONE: Slot[list[float]] = Slot("pace_one_request_alone_ms", list)


def note_alone(environment: Environment, ms: float) -> None:
    """The time of one request sent alone before the load (the preflight's): what the server's own latency
    under load is compared with. The last one counts."""
    _ALONE.of(environment).append(ms)


def alone_ms(environment: Environment) -> float | None:
    """The time of the last request sent alone, in ms, or None (no preflight, or it failed)."""
    found = _ALONE.peek(environment)
    return found[-1] if found else None
