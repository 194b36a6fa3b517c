"""Worker reports that arrive whole, or a master that says loudly that one did not.

A worker's pooling figures travel inside Locust's own report. One value msgpack cannot pack (a
2**63 token count was seen) made Locust's worker report greenlet die on every report after it:
the master's pooling CSV showed 0 requests and the run exited 0. Here a worker checks that its
report packs before it goes (else it sends what went wrong instead) and says how many requests its
earlier reports held; the master checks that against what it merged. When a report is lost or
cannot be merged, the master logs an error that says the figures are incomplete, and the run exits
with REPORT_EXIT_CODE.
"""

from __future__ import annotations

import logging
from typing import Any

import msgpack
from locust.env import Environment

from poolbench_locust.metrics.collector import PoolingStats

logger = logging.getLogger("poolbench_locust")

REPORT_EXIT_CODE = 4
"""The exit code of a run whose pooling figures lost a worker's report (3 is a failed check)."""
BEFORE = "requests_before"
"""In each report: the requests of all the worker's earlier reports. The master compares it with what
it merged from that worker, so a lost report shows however it was lost (Locust's master also misses
a worker's first report when it comes before the master's listeners exist: an empty one, which costs
nothing and is not counted as lost)."""
REQUESTS = "requests"
ERROR = "error"


class Outbox:
    """A worker's side: how many requests its reports held so far."""

    def __init__(self) -> None:
        self.requests_sent = 0

    def report(self, stats: PoolingStats) -> dict[str, Any]:
        """What the worker sends: everything since its last report, known to pack, with its running count."""
        report = stats.take_report()
        requests = sum(entry["requests"] for entry in report["entries"])  # a worker ships no total
        try:
            msgpack.packb(report)  # what Locust's Message.serialize will do with it, inside Locust's report
        except (OverflowError, TypeError, ValueError) as e:
            report = {ERROR: f"the worker's report could not be packed ({type(e).__name__}: {e})"}
        report[BEFORE] = self.requests_sent
        report[REQUESTS] = requests
        self.requests_sent += requests
        return report


class Inbox:
    """The master's side: the requests merged from every worker, and what happens when a report is lost."""

    def __init__(self, environment: Environment, stats: PoolingStats) -> None:
        self.environment = environment
        self.stats = stats
        self.merged: dict[str, int] = {}
        self.lost = 0

    def merge(self, client_id: str, report: Any) -> None:
        if not isinstance(report, dict):
            self._lost(client_id, "the report is not a mapping")
            return
        before, requests = report.get(BEFORE), report.get(REQUESTS)
        if isinstance(before, int) and isinstance(requests, int):
            if (missing := before - self.merged.get(client_id, 0)) != 0:
                self._lost(client_id, f"the figures of {missing} request(s) in earlier reports never arrived")
            self.merged[client_id] = before + requests
        if ERROR in report:
            self._lost(client_id, f"{str(report[ERROR])[:300]}; the figures of {requests} request(s) are lost")
            return
        try:
            self.stats.merge_report(report)
        except Exception as e:  # a report that merges half is lost as well: the run must say so
            self._lost(client_id, f"it could not be merged ({type(e).__name__}: {e})"[:300])

    def _lost(self, client_id: str, why: str) -> None:
        self.lost += 1
        logger.error(
            "POOLING REPORT LOST from worker %s: %s. The pooling figures of this run are incomplete; "
            "the run will exit with code %d.",
            client_id,
            why,
            REPORT_EXIT_CODE,
        )
        if self.environment.process_exit_code in (None, 0):
            self.environment.process_exit_code = REPORT_EXIT_CODE
