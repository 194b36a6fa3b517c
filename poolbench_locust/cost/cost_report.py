"""Wiring of --gpu-hour-cost into Locust: the price lines of the console summary (after the capacity
search's answer) and the JSON result's `cost`."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner

from poolbench_locust import texttable
from poolbench_locust.capacity.capacity_shape import lanes_of
from poolbench_locust.cost.pricing import Price, Throughput, of_host, price, row
from poolbench_locust.engine.ab import MARKS, side_of
from poolbench_locust.json_sections import INPUTS_JSON, REPEATS_JSON, JsonSection, ResultEvents
from poolbench_locust.metrics.collector import PoolingStats, stats_of
from poolbench_locust.options import OptionError, Settings, settings_of
from poolbench_locust.servermetrics.scraping import scraping_of

console = logging.getLogger("locust.stats_logger")

COST_JSON = (INPUTS_JSON + REPEATS_JSON) // 2  # after the inputs sent, before the repeats

_PRICE_PROPERTIES: dict[str, Any] = {
    "at": {"enum": ["measured", "capacity"]},
    "requests_per_s": {"type": ["number", "null"], "minimum": 0},
    "input_tokens_per_s": {"type": ["number", "null"], "minimum": 0},
    "usd_per_1m_input_tokens": {"type": ["number", "null"], "minimum": 0},
    "usd_per_1k_requests": {"type": ["number", "null"], "minimum": 0},
}
_PRICE = {
    "type": "object",
    "required": ["at", "requests_per_s", "input_tokens_per_s", "usd_per_1m_input_tokens", "usd_per_1k_requests"],
    "properties": _PRICE_PROPERTIES,
}
_HOST_PRICE = {
    "type": "object",
    "required": [
        *("at", "requests_per_s", "input_tokens_per_s", "usd_per_1m_input_tokens", "usd_per_1k_requests"),
        *("gpu_hour_usd", "gpus", "usd_per_hour", "energy_j_per_1m_input_tokens"),
    ],
    "properties": {
        **_PRICE_PROPERTIES,
        "gpu_hour_usd": {"type": "number", "exclusiveMinimum": 0},
        "gpus": {"type": "integer", "minimum": 1},
        "usd_per_hour": {"type": "number", "exclusiveMinimum": 0},
        "energy_j_per_1m_input_tokens": {"type": ["number", "null"], "minimum": 0},
    },
}
"""One host's price at its share of the schedule, at its own GPU-hour price and GPUs (--gpu-hour-cost A,B)."""
COST_SCHEMA = {
    "description": "--gpu-hour-cost: USD per 1M input tokens and per 1,000 successful requests at the measured "
    "throughput, at the capacity --find-capacity found (null without one), per host of an --ab-host run (null "
    "without one: each host at its own price and GPUs, its energy per 1M input tokens from its own dcgm-exporter), "
    "and the GPUs' energy per 1M input tokens where a dcgm-exporter was read; null without --gpu-hour-cost. With "
    "--ab-host, gpu_hour_usd and gpus are A's, usd_per_hour and the measured price both hosts' fleets together",
    "type": ["object", "null"],
    "required": [
        *("gpu_hour_usd", "gpus", "usd_per_hour", "usd_per_1m_input_tokens", "usd_per_1k_requests"),
        *("measured", "capacity", "per_host", "energy_j_per_1m_input_tokens"),
    ],
    "properties": {
        "gpu_hour_usd": {"type": "number", "exclusiveMinimum": 0},
        "gpus": {"type": "integer", "minimum": 1},
        "usd_per_hour": {"type": "number", "exclusiveMinimum": 0},
        "usd_per_1m_input_tokens": {"type": ["number", "null"], "minimum": 0},
        "usd_per_1k_requests": {"type": ["number", "null"], "minimum": 0},
        "measured": _PRICE,
        "capacity": {"oneOf": [{"type": "null"}, _PRICE]},
        "per_host": {"type": ["object", "null"], "additionalProperties": _HOST_PRICE},
        "capacity_per_host": {
            "description": "--find-capacity with --ab-host: the price at each host's own capacity, at its own price"
            " (null where its search claimed none); null without both",
            "type": ["object", "null"],
            "additionalProperties": {"oneOf": [{"type": "null"}, _PRICE]},
        },
        "energy_j_per_1m_input_tokens": {"type": ["number", "null"], "minimum": 0},
    },
}


def _measured(stats: PoolingStats, side: str | None = None) -> Throughput:
    """The run's successful requests/s and input tokens/s (of one host's names, with `side`), over the
    seconds from the stats' start to the last request."""
    entries = [stats.total] if side is None else [e for e in stats.entries.values() if side_of(e.name) == side]
    lasts = [e.last for e in entries if e.last is not None]
    if not lasts:
        return Throughput(None, None, "measured")
    seconds = max(max(lasts) - stats.start_time, 1e-9)
    ok = sum(e.requests - e.failures for e in entries)
    tokens = sum(e.input_tokens for e in entries)
    return Throughput(ok / seconds, tokens / seconds, "measured")


def _capacities(environment: Environment) -> dict[str | None, tuple[Throughput, float | None] | None]:
    """The capacity found of each host searched (None: the run's only host; "A", "B" with --ab-host), as a
    throughput, and its probe's energy per 1M input tokens (None: none read); None where none was claimed."""
    found: dict[str | None, tuple[Throughput, float | None] | None] = {}
    for lane in lanes_of(environment) or []:
        outcome = lane.outcome
        if not outcome.claimed or (best := outcome.best()) is None:
            found[lane.side] = None
            continue
        answer = outcome.as_dict()
        through = Throughput(answer["requests_per_s"], answer["input_tokens_per_s"], "capacity")
        found[lane.side] = through, best.energy.energy_j_per_1m_input_tokens
    return found


def _energy(environment: Environment, side: str | None = None) -> float | None:
    """The GPUs' energy per 1M input tokens over the run (every dcgm-exporter target's, summed; of one host's
    targets with `side`), or None."""
    state = scraping_of(environment)
    if state is None:
        return None
    found = [
        g.energy_j_per_1m_input_tokens
        for g in (state.gpus() if side is None else state.gpus(side, every=False))
        if g.energy_j_per_1m_input_tokens is not None
    ]
    return sum(found) if found else None


def _settings(environment: Environment) -> Settings | None:
    try:
        settings = settings_of(environment)
    except OptionError:  # a bad value typed into the web form: that run never started
        return None
    return settings if settings.gpu_hour_cost is not None else None


def fleet(settings: Settings, side: str | None) -> tuple[float, int]:
    """One host's GPU-hour price and GPUs (A's or the only host's with `side` None)."""
    assert settings.gpu_hour_cost is not None
    return of_host(settings.gpu_hour_cost, side), of_host(settings.gpus, side)


@dataclass(frozen=True)
class Priced:
    """The run's prices: the measured (every host's fleet over the run's throughput), the capacity found, and
    each host's at its share of the schedule."""

    usd_per_hour: float
    measured: Price
    capacity: Price | None
    capacity_energy: float | None
    hosts: dict[str, Price]
    host_capacities: dict[str, tuple[Price, float | None] | None]
    """--find-capacity with --ab-host: each host's price at its own capacity, and that probe's energy per 1M
    input tokens; None for a host whose search claimed none."""


def _sides(stats: PoolingStats) -> list[str]:
    return sorted({s for e in stats.entries.values() if (s := side_of(e.name)) is not None})


def priced(environment: Environment, settings: Settings) -> Priced:
    stats = stats_of(environment)
    hosts = {side: price(*fleet(settings, side), _measured(stats, side)) for side in _sides(stats)}
    # two hosts: both fleets' hour over what the two did together; one: its fleet's
    hourly = sum(p.usd_per_hour for p in hosts.values()) if hosts else math.prod(fleet(settings, None))
    searched = _capacities(environment)
    found = searched.get(None)
    capacity = price(*fleet(settings, None), found[0]) if found is not None else None
    at_capacity = {
        side: None if at is None else (price(*fleet(settings, side), at[0]), at[1])
        for side, at in searched.items()
        if side is not None
    }
    energy = found[1] if found is not None else None
    return Priced(hourly, price(hourly, 1, _measured(stats)), capacity, energy, hosts, at_capacity)


def cost_fields(environment: Environment) -> dict[str, Any]:
    """The JSON result's `cost`: None without --gpu-hour-cost."""
    if (settings := _settings(environment)) is None:
        return {"cost": None}
    usd, gpus = fleet(settings, None)
    found = priced(environment, settings)
    headline = found.capacity or found.measured
    per_host = {
        side: p.as_dict()
        | dict(zip(("gpu_hour_usd", "gpus"), fleet(settings, side), strict=True))
        | {"usd_per_hour": p.usd_per_hour, "energy_j_per_1m_input_tokens": _energy(environment, side)}
        for side, p in found.hosts.items()
    }
    at_capacity = {side: None if at is None else at[0].as_dict() for side, at in found.host_capacities.items()}
    return {
        "cost": {
            "gpu_hour_usd": usd,
            "gpus": gpus,
            "usd_per_hour": found.usd_per_hour,
            "usd_per_1m_input_tokens": headline.usd_per_1m_input_tokens,
            "usd_per_1k_requests": headline.usd_per_1k_requests,
            "measured": found.measured.as_dict(),
            "capacity": found.capacity.as_dict() if found.capacity is not None else None,
            "per_host": per_host or None,
            "capacity_per_host": at_capacity or None,
            "energy_j_per_1m_input_tokens": found.capacity_energy
            if found.capacity_energy is not None
            else _energy(environment),
        }
    }


def _fleet_text(usd: float, gpus: int) -> str:
    return f"${usd:g} x {gpus} GPU{'s' if gpus > 1 else ''} = ${usd * gpus:g}/hour"


def console_lines(environment: Environment) -> list[str]:
    """The price at each throughput measured, a row each, fitted to --console-width."""
    if (settings := _settings(environment)) is None:
        return []
    found = priced(environment, settings)
    rows = [["At", "USD/1M Input Tokens", "USD/1k Requests", "Input Tokens/s", "Requests/s", "Energy J/1M Tokens"]]
    energy = None if found.capacity is not None else _energy(environment)
    rows.append(row(found.measured, "measured throughput", energy))
    for side, p in found.hosts.items():
        rows.append(row(p, f"host {MARKS[side].strip()}, its share", _energy(environment, side)))
    if found.capacity is not None:
        rows.append(row(found.capacity, "capacity found", found.capacity_energy))
    for host, at in found.host_capacities.items():
        label = f"host {MARKS[host].strip()}, its capacity found"
        if at is not None:
            rows.append(row(at[0], label, at[1]))
        else:  # a host's search that claimed none says so
            rows.append([label, "none claimed", "", "", "", ""])
    if found.hosts:
        fleets = ", ".join(f"{side} {_fleet_text(*fleet(settings, side))}" for side in found.hosts)
        title = f"Cost (--gpu-hour-cost: {fleets}; each host at its share, the measured row both together"
    else:
        title = f"Cost (--gpu-hour-cost {_fleet_text(*fleet(settings, None))}"
    title += "; successful requests and their input tokens)"
    return [*texttable.wrapped(title, settings.console_width), *texttable.fitted_lines(rows, settings.console_width)]


def _on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    if runner is None or isinstance(runner, WorkerRunner):
        return

    @environment.events.quit.add_listener
    def summary(**_: Any) -> None:
        if lines := console_lines(environment):  # after the pooling table and the capacity search's answer
            console.info("")
            for text in lines:
                console.info(text)


def json_section(sections: list[JsonSection], **_: Any) -> None:
    sections.append(JsonSection(COST_JSON, cost_fields, {"cost": COST_SCHEMA}, ("cost",)))


def setup(events: Events, results: ResultEvents) -> None:
    """After the capacity search's setup: its price line follows the search's answer."""
    events.init.add_listener(_on_init)
    results.json_sections.add_listener(json_section)
