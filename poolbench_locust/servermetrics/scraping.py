"""The server's figures of one Locust run (--server-metrics): the scraper, a view per server, the history
file, and the tables they make, on the master (or the one process) only: workers never scrape."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

from locust.env import Environment

from poolbench_locust.consistency.state import consistency_of
from poolbench_locust.metrics.collector import stats_of
from poolbench_locust.options import OptionError, settings_of
from poolbench_locust.servermetrics import gpu, report
from poolbench_locust.servermetrics.deltas import ServerView
from poolbench_locust.servermetrics.scrape import Scraper
from poolbench_locust.store import Slot


@dataclass
class Scraping:
    """What --server-metrics holds for this process: made at init on the master or the one process."""

    scraper: Scraper | None = None
    views: list[ServerView] = field(default_factory=list)
    history: TextIO | None = None
    client: Callable[[], report.Client] | None = None
    """The client's side now (its tokens and requests give a GPU's energy per million and per thousand)."""
    repeat_ratio: Callable[[], float | None] | None = None
    """--repeat-ratio now (the web UI's form may change it between runs): shown beside a prefix-cache hit rate."""

    def _client(self) -> report.Client | None:
        wanted = self.client is not None and any(v.flavor is gpu.DCGM for v in self.views)
        return self.client() if wanted and self.client is not None else None

    def server_rows(self) -> list[dict[str, Any]]:
        ratio = self.repeat_ratio() if self.repeat_ratio is not None else None
        return report.server_rows((v for v in self.views if v.scrapes or v.failures), self._client(), ratio)

    def gpus(self) -> list[gpu.GpuFigures]:
        """Each dcgm-exporter target's figures over the measured window."""
        client = self._client()
        tokens, requests = (client.input_tokens, client.successes) if client is not None else (0, 0)
        found = (gpu.figures(v, tokens, requests) for v in self.views if v.scrapes)
        return [f for f in found if f is not None]

    def html(self, environment: Environment) -> str:
        charts = "".join(report.gauge_chart(v) for v in self.views if v.scrapes)
        return report.html_section(self.server_rows(), self.checks(environment), charts)

    def checks(self, environment: Environment) -> list[dict[str, Any]]:
        return report.reconciliation(self.views, client_side(environment, self))

    def as_dict(self, environment: Environment) -> dict[str, Any]:
        """What the JSON result holds (results/document.py): both tables, as the CSV files have them."""
        return {
            "servers": self.server_rows(),
            "reconciliation": self.checks(environment),
            "gpus": [asdict(f) for f in self.gpus()],
        }


def client_side(environment: Environment, state: Scraping) -> report.Client:
    pooling = stats_of(environment)
    total = pooling.total
    runner = environment.runner
    e2e_mean = None
    if runner is not None:
        entries = [runner.stats.entries.get((name, "POST")) for name in pooling.entries]
        done = sum(e.num_requests for e in entries if e is not None)
        if done:
            e2e_mean = sum(e.total_response_time for e in entries if e is not None) / done
    # A worker's reference requests of the consistency check came after the scrape's baseline: the server
    # counted them, the stats did not.
    sent = consistency_of(environment).sent
    return report.Client(
        successes=total.requests - total.failures + sent.requests,
        sequences=total.sequences + sent.sequences,
        input_tokens=total.input_tokens + sent.input_tokens,
        e2e_mean_ms=e2e_mean,
        in_flight=state.scraper.peak_users if state.scraper is not None else 0,
    )


_SCRAPING: Slot[Scraping] = Slot("server_metrics")


def start_scraping(environment: Environment) -> Scraping:
    """This process scrapes (the master, or the one process): its state, made now."""
    state = _SCRAPING.put(environment, Scraping())
    state.client = lambda: client_side(environment, state)
    state.repeat_ratio = lambda: _repeat_ratio(environment)
    return state


def _repeat_ratio(environment: Environment) -> float | None:
    try:
        return settings_of(environment).repeat_ratio
    except OptionError:  # a bad value typed into the web form: that run never started
        return None


def scraping_of(environment: Environment) -> Scraping | None:
    """What --server-metrics holds, or None on a worker (it never scrapes)."""
    return _SCRAPING.peek(environment)
