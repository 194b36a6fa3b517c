"""The GPU energy of each capacity probe, when --server-metrics reads a dcgm-exporter target beside the server:
the mean power over the probe's window, the energy of the window, and that energy per million input tokens.

Each probe's marks hold every dcgm-exporter target's energy counter as of its last scrape
(servermetrics/gpu.py's EnergyMark): the counter's growth between the two marks, over the seconds between
those scrapes, is the GPUs' mean power; times the probe's own seconds, its energy. The scrapes nearest the
marks are up to one --server-metrics-interval before them, inside the probe's settle period (the same rate)
as long as the interval is shorter than it; a probe with no scrape between its marks has no energy."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from locust.env import Environment

from poolbench_locust.servermetrics.gpu import EnergyMark, energy_between, mark
from poolbench_locust.servermetrics.scraping import scraping_of

CSV_COLUMNS = ("Energy J", "Power Mean W", "Energy J/1M Input Tokens")
CONSOLE_COLUMNS = ("Power Mean W", "Energy J/1M Input Tokens")


@dataclass(frozen=True)
class ProbeEnergy:
    """A probe's GPU figures; all None without a dcgm-exporter target (or without a scrape in its window)."""

    energy_j: float | None = None
    """Summed over the targets and their GPUs."""
    power_mean_w: float | None = None
    energy_j_per_1m_input_tokens: float | None = None

    def csv_cells(self) -> dict[str, Any]:
        """To 0.1 J and W, as the server metrics' GPU table shows them."""
        values = (None if v is None else round(v, 1) for v in self.json_keys().values())
        return dict(zip(CSV_COLUMNS, values, strict=True))

    def json_keys(self) -> dict[str, float | None]:
        return {
            "energy_j": self.energy_j,
            "power_mean_w": self.power_mean_w,
            "energy_j_per_1m_input_tokens": self.energy_j_per_1m_input_tokens,
        }


def energy_marks(environment: Environment) -> dict[str, EnergyMark]:
    """Each dcgm-exporter target's energy mark now, by its URL (none without --server-metrics, or on a worker)."""
    state = scraping_of(environment)
    if state is None:
        return {}
    return {view.url: found for view in state.views if (found := mark(view)) is not None}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def probe_energy(
    before: Mapping[str, EnergyMark], after: Mapping[str, EnergyMark], seconds: float, input_tokens: int
) -> ProbeEnergy:
    """The probe's figures from its two marks' energy, its measured seconds and the input tokens sent in them."""
    watts: float | None = None
    for url, start in before.items():
        end = after.get(url)
        between = energy_between(start, end) if end is not None else None
        if between is not None:
            joules, span = between
            watts = (watts or 0.0) + joules / span
    if watts is None or seconds <= 0:
        return ProbeEnergy()
    energy = watts * seconds
    per_token = energy * 1e6 / input_tokens if input_tokens > 0 else None
    return ProbeEnergy(_round(energy), _round(watts), _round(per_token))


def console_columns(energies: Iterable[ProbeEnergy]) -> tuple[str, ...]:
    """The console table's energy columns: only when some probe has a figure."""
    return CONSOLE_COLUMNS if any(e.power_mean_w is not None for e in energies) else ()
