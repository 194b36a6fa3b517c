"""The server's figures of one Locust run (--server-metrics): the scraper, a view per server, the history
file, and the tables they make, on the master (or the one process) only: workers never scrape."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

from locust.env import Environment

from poolbench_locust.consistency.between_hosts import between_of
from poolbench_locust.consistency.state import Sent, consistency_of
from poolbench_locust.engine.ab import side_of
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
    client: Callable[[str | None], report.Client] | None = None
    """The client's side now, of one host with --ab-host ("A", "B"; None: the whole run's): its tokens and
    requests give a GPU's energy per million and per thousand."""
    repeat_ratio: Callable[[], float | None] | None = None
    """--repeat-ratio now (the web UI's form may change it between runs): shown beside a prefix-cache hit rate."""

    def sides(self) -> list[str | None]:
        """The hosts the views are of: [None] without --ab-host, else "A" and/or "B" (hosts.py)."""
        return sorted({v.side for v in self.views}, key=lambda side: side or "") or [None]

    def _of(self, side: str | None) -> list[ServerView]:
        return [v for v in self.views if v.side == side]

    def _client(self, side: str | None = None) -> report.Client | None:
        wanted = self.client is not None and any(v.flavor is gpu.DCGM for v in self._of(side))
        return self.client(side) if wanted and self.client is not None else None

    def server_rows(self) -> list[dict[str, Any]]:
        """A row per server, each host's after the other's (with --ab-host), its GPUs' energy per million of
        that host's input tokens."""
        ratio = self.repeat_ratio() if self.repeat_ratio is not None else None
        rows = []
        for side in self.sides():
            rows += report.server_rows(
                (v for v in self._of(side) if v.scrapes or v.failures), self._client(side), ratio
            )
        return rows

    def gpus(self, side: str | None = None, every: bool = True) -> list[gpu.GpuFigures]:
        """Each dcgm-exporter target's figures over the measured window: every host's (`every`), or `side`'s."""
        found = []
        for one in self.sides() if every else [side]:
            client = self._client(one)
            tokens, requests = (client.input_tokens, client.successes) if client is not None else (0, 0)
            found += [f for v in self._of(one) if v.scrapes and (f := gpu.figures(v, tokens, requests)) is not None]
        return found

    def html(self, environment: Environment) -> str:
        charts = "".join(report.gauge_chart(v) for v in self.views if v.scrapes)
        return report.html_section(self.server_rows(), self.checks(environment), charts)

    def checks(self, environment: Environment) -> list[dict[str, Any]]:
        """The reconciliation, of each host's servers with that host's requests (each check marked [A], [B])."""
        rows = []
        for side in self.sides():
            for row in report.reconciliation(self._of(side), client_side(environment, self, side)):
                rows.append(row if side is None else {**row, "Check": f"{row['Check']} [{side}]"})
        return rows

    def as_dict(self, environment: Environment) -> dict[str, Any]:
        """What the JSON result holds (results/document.py): both tables, as the CSV files have them."""
        return {
            "servers": self.server_rows(),
            "reconciliation": self.checks(environment),
            "gpus": [asdict(f) for f in self.gpus()],
        }


def client_side(environment: Environment, state: Scraping, side: str | None = None) -> report.Client:
    """The client's figures the server's are reconciled with: the whole run's, or with --ab-host one host's
    (`side`, "A" or "B": its request names, marked so, and the reference requests sent to it)."""
    pooling = stats_of(environment)
    names = [name for name in pooling.entries if side is None or side_of(name) == side]
    picked = [pooling.entries[name] for name in names] if side is not None else [pooling.total]
    runner = environment.runner
    e2e_mean = None
    if runner is not None:
        entries = [runner.stats.entries.get((name, "POST")) for name in names]
        done = sum(e.num_requests for e in entries if e is not None)
        if done:
            e2e_mean = sum(e.total_response_time for e in entries if e is not None) / done
    # A worker's reference requests of the consistency check came after the scrape's baseline: the server
    # counted them, the stats did not (B's are B's server's).
    sent = between_of(environment).sent if side == "B" else consistency_of(environment).sent
    if side is None:
        sent = Sent(sent.requests, sent.sequences, sent.input_tokens)
        sent.add(between_of(environment).sent)
    return report.Client(
        successes=sum(e.requests - e.failures for e in picked) + sent.requests,
        sequences=sum(e.sequences for e in picked) + sent.sequences,
        input_tokens=sum(e.input_tokens for e in picked) + sent.input_tokens,
        e2e_mean_ms=e2e_mean,
        # each user has one request in flight at most, to one host or (--ab-paired) to both, at each end of the
        # counted span the server's count may hold and the client's not: at the stop (Locust's stop race: a
        # request sent as the stop lands), and after a rebase at its start (begun before, counted by no client)
        in_flight=_in_flight(state.scraper),
    )


def _in_flight(scraper: Scraper | None) -> int:
    if scraper is None:
        return 0
    return scraper.peak_users * (2 if scraper.rebased else 1)


_SCRAPING: Slot[Scraping] = Slot("server_metrics")


def start_scraping(environment: Environment) -> Scraping:
    """This process scrapes (the master, or the one process): its state, made now."""
    state = _SCRAPING.put(environment, Scraping())
    state.client = lambda side: client_side(environment, state, side)
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
