"""The GPU beside the server (a dcgm-exporter target of --server-metrics): how busy each GPU was, its power
and memory, and the energy of the measured window per million input tokens and per thousand requests.

The energy is the delta of DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ) between the window's first and last
scrape, summed over the GPUs, read as every counter is (deltas.py: a drop is a reset, counted from zero);
the tokens and requests are the client's over the same window (its stats and the scrapes are reset
together at the end of --warmup). Utilisation is shown GPU by GPU: a mean over GPUs hides an idle one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from poolbench_locust.servermetrics.deltas import Gauge, ServerView
from poolbench_locust.servermetrics.flavors import DCGM as DCGM  # re-exported: gpu.DCGM is its flavor
from poolbench_locust.servermetrics.parse import SeriesKey, printable


@dataclass(frozen=True)
class OneGpu:
    gpu: str
    """The GPU's index and UUID as dcgm-exporter labels them: `gpu=0 UUID=GPU-...`."""
    gpu_util_mean_pct: float | None
    gpu_util_max_pct: float | None
    power_mean_w: float | None
    power_max_w: float | None
    memory_used_max_mib: float | None


@dataclass(frozen=True)
class GpuFigures:
    """One dcgm-exporter target over the measured window: the keys of the JSON result's `gpus`."""

    server: str
    gpus: int
    seconds: float
    gpu_util_mean_pct: float | None
    """The mean over the scrapes of the GPUs' mean utilisation (each GPU's own: `per_gpu`)."""
    gpu_util_max_pct: float | None
    power_mean_w: float | None
    """Summed over the GPUs, then the mean over the scrapes."""
    power_max_w: float | None
    memory_used_max_mib: float | None
    energy_j: float | None
    """Summed over the GPUs; None when the exporter wrote no energy counter (GPUs before Volta)."""
    energy_j_per_1m_input_tokens: float | None
    energy_j_per_1k_requests: float | None
    energy_note: str | None = None
    """Why the energy may be off: its counter moved at few of the scrapes."""
    per_gpu: list[OneGpu] = field(default_factory=list)


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def _stat(gauge: Gauge | None, what: str) -> float | None:
    if gauge is None or gauge.n == 0:
        return None
    return gauge.mean() if what == "mean" else gauge.max


def _name(key: SeriesKey) -> str:
    """`gpu=0 UUID=GPU-...`: the labels are the server's text, so each is bounded and made printable."""
    labels = dict(key)
    return " ".join(f"{k}={printable(labels[k])}" for k in ("gpu", "UUID") if k in labels) or "gpu"


def _order(key: SeriesKey) -> tuple[int, str]:
    """GPU 2 before GPU 10."""
    index = dict(key).get("gpu", "")
    return (int(index), "") if index.isdigit() and len(index) < 6 else (1 << 20, _name(key))


def _one(view: ServerView, key: SeriesKey) -> OneGpu:
    def stat(role: str, what: str) -> float | None:
        return _round(_stat(view.each[role].get(key), what))

    return OneGpu(
        gpu=_name(key),
        gpu_util_mean_pct=stat("gpu_util", "mean"),
        gpu_util_max_pct=stat("gpu_util", "max"),
        power_mean_w=stat("power_w", "mean"),
        power_max_w=stat("power_w", "max"),
        memory_used_max_mib=stat("memory_mib", "max"),
    )


def energy_j(view: ServerView) -> float | None:
    """The window's energy over all the target's GPUs, from their counters' deltas (None: no counter, or
    fewer than two scrapes)."""
    if view.flavor is not DCGM or "energy_mj" not in view.seen or view.seconds() <= 0:
        return None
    return view.counters["energy_mj"] / 1000.0


MOVED_AT_LEAST = 0.5
"""An energy counter that grew at fewer of the scrapes than this share was sampled less often than scraped."""


def energy_note(view: ServerView) -> str | None:
    """A note when the energy counter stood still at most scrapes: dcgm-exporter samples its fields every
    --collect-interval (30 s by default), so the window's energy is off by up to one interval's power."""
    grew, scrapes = view.moved["energy_mj"]
    if scrapes < 2 or grew >= MOVED_AT_LEAST * scrapes:
        return None
    return (
        f"the energy counter grew at {grew} of {scrapes} scrapes: dcgm-exporter samples less often than it is "
        "scraped (its --collect-interval is 30 s by default), so the energy is off by up to one of its "
        "intervals; start it with -c 1000"
    )


def figures(view: ServerView, input_tokens: int, requests: int) -> GpuFigures | None:
    """The target's GPU figures, or None when it is no dcgm-exporter; the client's input tokens and
    successful requests of the same window give the energy per million and per thousand."""
    if view.flavor is not DCGM:
        return None
    keys = sorted({key for series in view.each.values() for key in series}, key=_order)
    energy = energy_j(view)
    per_token = energy * 1e6 / input_tokens if energy is not None and input_tokens > 0 else None
    per_request = energy * 1e3 / requests if energy is not None and requests > 0 else None
    return GpuFigures(
        server=view.shown,
        gpus=len(keys),
        seconds=round(view.seconds(), 3),
        gpu_util_mean_pct=_round(_stat(view.gauges["gpu_util"], "mean")),
        gpu_util_max_pct=_round(_stat(view.gauges["gpu_util"], "max")),
        power_mean_w=_round(_stat(view.gauges["power_w"], "mean")),
        power_max_w=_round(_stat(view.gauges["power_w"], "max")),
        memory_used_max_mib=_round(_stat(view.gauges["memory_mib"], "max")),
        energy_j=_round(energy, 3),
        energy_j_per_1m_input_tokens=_round(per_token, 3),
        energy_j_per_1k_requests=_round(per_request, 3),
        energy_note=energy_note(view) if energy is not None else None,
        per_gpu=[_one(view, key) for key in keys],
    )


@dataclass(frozen=True)
class EnergyMark:
    """A dcgm-exporter target's energy so far in the window, at its last scrape: two marks give the energy
    and the mean power between them (a capacity probe's, a sweep step's)."""

    at: float
    energy_mj: float


def mark(view: ServerView) -> EnergyMark | None:
    """The view's mark now (None: no dcgm-exporter, or no energy counter read yet)."""
    if view.flavor is not DCGM or "energy_mj" not in view.seen or view.last is None:
        return None
    return EnergyMark(view.last, view.counters["energy_mj"])


def energy_between(start: EnergyMark, end: EnergyMark) -> tuple[float, float] | None:
    """Joules and seconds from `start` to `end`, scrape to scrape (None when no scrape came between them,
    or the window was rebased between them)."""
    seconds, millijoules = end.at - start.at, end.energy_mj - start.energy_mj
    if seconds <= 0 or millijoules < 0:
        return None
    return millijoules / 1000.0, seconds
