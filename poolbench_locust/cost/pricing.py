"""The arithmetic of the price: a fleet's USD per hour over a throughput, per million input tokens and per
thousand requests. Nothing here knows Locust: the figures come in, the prices go out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class Throughput:
    """What a price is taken at: successful requests/s and their input tokens/s, and where they come from."""

    requests_per_s: float | None
    input_tokens_per_s: float | None
    at: str
    """"measured" (the run's own figures) or "capacity" (the rate --find-capacity found)."""


@dataclass(frozen=True)
class Price:
    usd_per_hour: float
    usd_per_1m_input_tokens: float | None
    usd_per_1k_requests: float | None
    throughput: Throughput

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": self.throughput.at,
            "requests_per_s": self.throughput.requests_per_s,
            "input_tokens_per_s": self.throughput.input_tokens_per_s,
            "usd_per_1m_input_tokens": self.usd_per_1m_input_tokens,
            "usd_per_1k_requests": self.usd_per_1k_requests,
        }


def of_host(values: tuple[Any, ...], side: str | None) -> Any:
    """A per-host option's value (--gpu-hour-cost, --gpus: one, or A,B) for host `side`: B's is the second
    where two were given, every other host's (A's, a run without --ab-host) the first; one value is both."""
    return values[-1] if side == "B" else values[0]


def _per(usd_per_hour: float, per_s: float | None, unit: float) -> float | None:
    """USD per `unit` of something done `per_s` times a second; None when nothing was done."""
    if per_s is None or not per_s > 0:
        return None
    return usd_per_hour / (per_s * SECONDS_PER_HOUR) * unit


def price(gpu_hour_usd: float, gpus: int, throughput: Throughput) -> Price:
    """The price of the GPUs' hour spread over what they did in it at `throughput`."""
    usd_per_hour = gpu_hour_usd * gpus
    return Price(
        usd_per_hour=usd_per_hour,
        usd_per_1m_input_tokens=_per(usd_per_hour, throughput.input_tokens_per_s, 1e6),
        usd_per_1k_requests=_per(usd_per_hour, throughput.requests_per_s, 1e3),
        throughput=throughput,
    )


def usd(value: float | None) -> str:
    """A price as the console shows it: four significant figures, at least to the cent."""
    if value is None:
        return "n/a"
    return f"${value:,.2f}" if value >= 100 else f"${value:.4g}"


def row(p: Price, label: str, energy_j_per_1m: float | None = None) -> list[str]:
    """A price as the cost table's row: `label` names whose throughput it is."""
    t = p.throughput
    return [
        label,
        usd(p.usd_per_1m_input_tokens),
        usd(p.usd_per_1k_requests),
        f"{t.input_tokens_per_s or 0:,.1f}" if t.requests_per_s else "no successful request",
        f"{t.requests_per_s or 0:,.2f}" if t.requests_per_s else "",
        "" if energy_j_per_1m is None else f"{energy_j_per_1m:,.1f}",
    ]
