"""Worker reports that arrive whole, or a master that says loudly that one did not.

A worker's pooling figures travel inside Locust's own report. One value msgpack cannot pack (a
2**63 token count was seen) made Locust's worker report greenlet die on every report after it:
the master's pooling CSV showed 0 requests and the run exited 0. Here a worker checks that its
report packs before it goes (else it sends what went wrong instead), numbers every report, and
the master checks that each worker's reports come one after another and merge; when one does
not, it logs an error that says the figures are incomplete and the run exits with REPORT_EXIT_CODE.
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
SEQUENCE = "seq"
ERROR = "error"


class Outbox:
    """A worker's side: its next report number."""

    def __init__(self) -> None:
        self.sent = 0

    def report(self, stats: PoolingStats) -> dict[str, Any]:
        """What the worker sends: everything since its last report, known to pack, numbered."""
        report = stats.take_report()
        try:
            msgpack.packb(report)  # what Locust's Message.serialize does with it, on a value at a time
        except (OverflowError, TypeError, ValueError) as e:
            report = {ERROR: f"the worker's report could not be packed ({type(e).__name__}: {e})"}
        self.sent += 1
        report[SEQUENCE] = self.sent
        return report


class Inbox:
    """The master's side: the last report number of every worker, and how reports that fail end."""

    def __init__(self, environment: Environment, stats: PoolingStats) -> None:
        self.environment = environment
        self.stats = stats
        self.last: dict[str, int] = {}
        self.lost = 0

    def merge(self, client_id: str, report: Any) -> None:
        if not isinstance(report, dict):
            self._lost(client_id, "the report is not a mapping")
            return
        number = report.get(SEQUENCE)
        expected = self.last.get(client_id, 0) + 1
        if isinstance(number, int):
            self.last[client_id] = number
            if number != expected:
                self._lost(client_id, f"{number - expected} report(s) before report {number} never arrived")
        if ERROR in report:
            self._lost(client_id, str(report[ERROR])[:300])
            return
        try:
            self.stats.merge_report(report)
        except Exception as e:  # a report that merges half is still counted as lost: the run must say so
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
