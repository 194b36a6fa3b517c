"""Goodput: the requests per second (and their input tokens per second) that met every service-level
objective of `--slo`, as vLLM's benchmark and AIPerf report it.

Only the request that sends it knows whether it met every objective at once, so each request is
judged as its event arrives (PoolingStats.on_request) and the collector counts it; percentiles of
each timing alone could not say. A failed request never counts, however fast.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from typing import Any

from locust import events

from poolbench_locust.engine.context import RequestContext
from poolbench_locust.options import Option, OptionError, register


@dataclass(frozen=True, slots=True)
class Slo:
    """Upper bounds in ms (a request meets one when its time is at most the bound); None: no bound."""

    e2e_ms: float | None = None
    ttfb_ms: float | None = None
    transfer_ms: float | None = None
    """End-to-end minus time to headers minus the open loop's queueing: the body on the wire."""

    def met(self, e2e_ms: float, context: RequestContext) -> bool:
        """Whether a successful request's times met every bound (a time it lacks meets none)."""
        if self.e2e_ms is not None and not e2e_ms <= self.e2e_ms:
            return False
        ttfb = context.get("ttfb_ms")
        if self.ttfb_ms is not None and not (ttfb is not None and ttfb <= self.ttfb_ms):
            return False
        if self.transfer_ms is not None:
            if ttfb is None:
                return False
            transfer = max(e2e_ms - ttfb - (context.get("queue_ms") or 0.0), 0.0)
            if not transfer <= self.transfer_ms:
                return False
        return True

    def __str__(self) -> str:
        bounds = ((f.name, getattr(self, f.name)) for f in fields(self))
        return ",".join(f"{key}={bound:g}" for key, bound in bounds if bound is not None)


SLO_KEYS = tuple(f.name for f in fields(Slo))


def parse_slo(text: str) -> Slo | None:
    """`e2e_ms=300,ttfb_ms=100` -> Slo; empty -> None; anything else raises ArgumentTypeError."""
    if not str(text).strip():
        return None
    bounds: dict[str, float] = {}
    for pair in str(text).split(","):
        key, sep, value = pair.strip().partition("=")
        key = key.strip()
        if not sep or key not in SLO_KEYS:
            raise argparse.ArgumentTypeError(
                f"must be KEY=MS pairs separated by commas, KEY one of {', '.join(SLO_KEYS)}; got {pair.strip()!r}"
            )
        if key in bounds:
            raise argparse.ArgumentTypeError(f"{key} is given twice")
        try:
            bound = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{key} must be a number of ms > 0, got {value.strip()!r}") from None
        if not 0 < bound < float("inf"):
            raise argparse.ArgumentTypeError(f"{key} must be a number of ms > 0, got {value.strip()!r}")
        bounds[key] = bound
    return Slo(**bounds)


OPTIONS = (
    Option(
        "--slo",
        parse_slo,
        None,
        f"Service-level objectives for goodput, KEY=MS pairs ({', '.join(SLO_KEYS)}), e.g. e2e_ms=300,ttfb_ms=100.",
    ),
)


@events.init_command_line_parser.add_listener
def add_arguments(parser: Any) -> None:
    register(parser, "poolbench-locust goodput", OPTIONS)


def slo_of(options: Any) -> Slo | None:
    """The run's SLO from Locust's options (command line, env, or the web UI's text); OptionError if bad."""
    raw = getattr(options, "slo", None)
    if raw is None:
        return None
    try:
        return parse_slo(str(raw))
    except argparse.ArgumentTypeError as e:
        raise OptionError("--slo", str(e)) from None
