"""The server's figures of one Locust run (--server-metrics): the scraper, a view per server, the history
file, and the tables they make, on the master (or the one process) only: workers never scrape."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TextIO

from locust.env import Environment

from poolbench_locust.metrics.collector import stats_of
from poolbench_locust.servermetrics import report
from poolbench_locust.servermetrics.deltas import ServerView
from poolbench_locust.servermetrics.scrape import Scraper
from poolbench_locust.store import Slot


@dataclass
class Scraping:
    """What --server-metrics holds for this process: made at init on the master or the one process."""

    scraper: Scraper | None = None
    views: list[ServerView] = field(default_factory=list)
    history: TextIO | None = None

    def server_rows(self) -> list[dict[str, Any]]:
        return report.server_rows(v for v in self.views if v.scrapes or v.failures)

    def html(self, environment: Environment) -> str:
        charts = "".join(report.gauge_chart(v) for v in self.views if v.scrapes)
        return report.html_section(self.server_rows(), self.checks(environment), charts)

    def checks(self, environment: Environment) -> list[dict[str, Any]]:
        return report.reconciliation(self.views, client_side(environment, self))

    def as_dict(self, environment: Environment) -> dict[str, Any]:
        """What the JSON result holds (results/document.py): both tables, as the CSV files have them."""
        return {"servers": self.server_rows(), "reconciliation": self.checks(environment)}


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
    return report.Client(
        successes=total.requests - total.failures,
        sequences=total.sequences,
        input_tokens=total.input_tokens,
        e2e_mean_ms=e2e_mean,
        in_flight=state.scraper.peak_users if state.scraper is not None else 0,
    )


_SCRAPING: Slot[Scraping] = Slot("server_metrics")


def start_scraping(environment: Environment) -> Scraping:
    """This process scrapes (the master, or the one process): its state, made now."""
    return _SCRAPING.put(environment, Scraping())


def scraping_of(environment: Environment) -> Scraping | None:
    """What --server-metrics holds, or None on a worker (it never scrapes)."""
    return _SCRAPING.peek(environment)
