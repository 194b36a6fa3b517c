"""Wiring of --gpu-hour-cost into Locust: the price lines of the console summary (after the capacity
search's answer) and the JSON result's `cost`."""

from __future__ import annotations

import logging
from typing import Any

from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner

from poolbench_locust import texttable
from poolbench_locust.capacity.capacity_shape import lanes_of
from poolbench_locust.cost.pricing import Throughput, price, row
from poolbench_locust.engine.ab import MARKS, side_of
from poolbench_locust.json_sections import INPUTS_JSON, REPEATS_JSON, JsonSection, ResultEvents
from poolbench_locust.metrics.collector import PoolingStats, stats_of
from poolbench_locust.options import OptionError, Settings, settings_of
from poolbench_locust.servermetrics.scraping import scraping_of

console = logging.getLogger("locust.stats_logger")

COST_JSON = (INPUTS_JSON + REPEATS_JSON) // 2  # after the inputs sent, before the repeats

_PRICE = {
    "type": "object",
    "required": ["at", "requests_per_s", "input_tokens_per_s", "usd_per_1m_input_tokens", "usd_per_1k_requests"],
    "properties": {
        "at": {"enum": ["measured", "capacity"]},
        "requests_per_s": {"type": ["number", "null"], "minimum": 0},
        "input_tokens_per_s": {"type": ["number", "null"], "minimum": 0},
        "usd_per_1m_input_tokens": {"type": ["number", "null"], "minimum": 0},
        "usd_per_1k_requests": {"type": ["number", "null"], "minimum": 0},
    },
}
COST_SCHEMA = {
    "description": "--gpu-hour-cost: USD per 1M input tokens and per 1,000 successful requests at the measured "
    "throughput, at the capacity --find-capacity found (null without one), per host of an --ab-host run (null "
    "without one), and the GPUs' energy per 1M input tokens where a dcgm-exporter was read; null without "
    "--gpu-hour-cost",
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
        "per_host": {"type": ["object", "null"], "additionalProperties": _PRICE},
        "capacity_per_host": {
            "description": "--find-capacity with --ab-host: the price at each host's own capacity (null where its"
            " search claimed none); null without both",
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


def _capacity(environment: Environment) -> tuple[Throughput, float | None] | None:
    """The capacity found of the run's only host (none with --ab-host: each host has its own)."""
    return _capacities(environment).get(None)


def _energy(environment: Environment) -> float | None:
    """The GPUs' energy per 1M input tokens over the run (every dcgm-exporter target's, summed), or None."""
    state = scraping_of(environment)
    if state is None:
        return None
    found = [g.energy_j_per_1m_input_tokens for g in state.gpus() if g.energy_j_per_1m_input_tokens is not None]
    return sum(found) if found else None


def _settings(environment: Environment) -> Settings | None:
    try:
        settings = settings_of(environment)
    except OptionError:  # a bad value typed into the web form: that run never started
        return None
    return settings if settings.gpu_hour_cost is not None else None


def cost_fields(environment: Environment) -> dict[str, Any]:
    """The JSON result's `cost`: None without --gpu-hour-cost."""
    if (settings := _settings(environment)) is None or settings.gpu_hour_cost is None:
        return {"cost": None}
    usd, gpus = settings.gpu_hour_cost, settings.gpus
    stats = stats_of(environment)
    measured = price(usd, gpus, _measured(stats))
    found = _capacity(environment)
    capacity = price(usd, gpus, found[0]) if found is not None else None
    sides = sorted({s for e in stats.entries.values() if (s := side_of(e.name)) is not None})
    per_host = {s: price(usd, gpus, _measured(stats, s)).as_dict() for s in sides} or None
    at_capacity = {
        side: None if f is None else price(usd, gpus, f[0]).as_dict()
        for side, f in _capacities(environment).items()
        if side
    }
    headline = capacity or measured
    return {
        "cost": {
            "gpu_hour_usd": usd,
            "gpus": gpus,
            "usd_per_hour": measured.usd_per_hour,
            "usd_per_1m_input_tokens": headline.usd_per_1m_input_tokens,
            "usd_per_1k_requests": headline.usd_per_1k_requests,
            "measured": measured.as_dict(),
            "capacity": capacity.as_dict() if capacity is not None else None,
            "per_host": per_host,
            "capacity_per_host": at_capacity or None,
            "energy_j_per_1m_input_tokens": found[1]
            if found is not None and found[1] is not None
            else _energy(environment),
        }
    }


def console_lines(environment: Environment) -> list[str]:
    """The price at each throughput measured, a row each, fitted to --console-width."""
    if (settings := _settings(environment)) is None or settings.gpu_hour_cost is None:
        return []
    usd, gpus = settings.gpu_hour_cost, settings.gpus
    stats = stats_of(environment)
    measured = price(usd, gpus, _measured(stats))
    found = _capacity(environment)
    rows = [["At", "USD/1M Input Tokens", "USD/1k Requests", "Input Tokens/s", "Requests/s", "Energy J/1M Tokens"]]
    rows.append(row(measured, "measured throughput", None if found is not None else _energy(environment)))
    for side in sorted({s for e in stats.entries.values() if (s := side_of(e.name)) is not None}):
        rows.append(row(price(usd, gpus, _measured(stats, side)), f"host {MARKS[side].strip()}, its share"))
    for host, at in _capacities(environment).items():
        label = "capacity found" if host is None else f"host {MARKS[host].strip()}, its capacity found"
        if at is not None:
            rows.append(row(price(usd, gpus, at[0]), label, at[1]))
        elif host is not None:  # a host's search that claimed none says so
            rows.append([label, "none claimed", "", "", "", ""])
    title = (
        f"Cost (--gpu-hour-cost ${usd:g} x {gpus} GPU{'s' if gpus > 1 else ''} = ${measured.usd_per_hour:g}/hour; "
        "successful requests and their input tokens)"
    )
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
