"""A warning, once per request name and run, when the server's token count stays far from the
client's: Infinity's default `usage` counts characters, and a run that reports them as input
tokens per second looks four times faster than it is. The console and the Pooling tab show the gap
(`Token Gap %`); this puts it in the log, where a headless run's reader looks."""

from __future__ import annotations

import logging
from typing import Any

import gevent
from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner

from poolbench_locust.metrics.collector import Entry, PoolingStats, stats_of

logger = logging.getLogger("poolbench_locust")

GAP_PERCENT = 20.0
"""Beyond ±this, the two counts are not of the same thing (special tokens and tokenizer versions
differ by a few per cent; characters are about four times tokens)."""
MIN_REQUESTS = 10
"""Fewer compared requests than this are too few to say the gap stays."""
CHECK_EVERY_S = 10.0


class GapWatch:
    def __init__(self) -> None:
        self.warned: set[str] = set()

    def check(self, stats: PoolingStats) -> list[str]:
        """Log (and return) the warnings not given yet in this run."""
        lines = []
        for entry in stats.sorted_entries():
            if entry.name in self.warned or not self._beyond(entry):
                continue
            self.warned.add(entry.name)
            line = (
                f"Token Gap % of {entry.name} is {entry.token_gap_percent():+.1f} %: the server counted "
                f"{entry.server_tokens_compared:,} input tokens where the client counted "
                f"{entry.client_tokens_compared:,}. The server's usage is probably not tokens (Infinity "
                "counts characters unless started to count tokens): Input Tokens/s shows its figure."
            )
            logger.warning("%s", line)
            lines.append(line)
        return lines

    @staticmethod
    def _beyond(entry: Entry) -> bool:
        gap = entry.token_gap_percent()
        return gap is not None and entry.requests - entry.failures >= MIN_REQUESTS and abs(gap) > GAP_PERCENT


def _on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner):
        return  # a worker holds only what it counted since its last report: the master decides
    watch = GapWatch()
    stats = stats_of(environment)
    checker: list[gevent.Greenlet[..., Any]] = []

    def keep_checking() -> None:
        while True:
            gevent.sleep(CHECK_EVERY_S)
            watch.check(stats)

    @environment.events.test_start.add_listener
    def start(**_: Any) -> None:
        watch.warned.clear()
        checker.append(gevent.spawn(keep_checking))

    @environment.events.test_stop.add_listener
    def stop(**_: Any) -> None:
        while checker:
            checker.pop().kill(block=False)
        watch.check(stats)  # a run shorter than CHECK_EVERY_S is checked at its end


def setup(events: Events) -> None:
    events.init.add_listener(_on_init)
