"""The master's board of whether the client kept up (metrics/pacing.py measures it on each process):
each process's figures as they arrive, the warnings said once per process and kind, the Client load
table of the web UI, the console and the JSON result."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from locust.env import Environment

from poolbench_locust import texttable
from poolbench_locust.metrics.pace_causes import server_cause
from poolbench_locust.metrics.pacing import (
    BEHIND_RATIO,
    CAUSES,
    CPU_BUSY_PERCENT,
    LATE_MS,
    SERVER_CAUSE,
    PaceFigures,
    behind_warning,
    cpu_warning,
    slots_advice,
)
from poolbench_locust.store import Slot

logger = logging.getLogger("poolbench_locust")


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


HEADER = (
    "Process",
    "Target Requests/s",
    "Scheduled Requests/s",
    "Sent Requests/s",
    "Sent Ratio",
    "Sent",
    "Late %",
    "Lateness 50%",
    "Lateness 99%",
    "Lateness Max",
    "Peak CPU %",
    "Fell Behind",
    "Likely Cause",
)
TOTAL = "Total"


def _likely_cause(figures: PaceFigures, server: str | None) -> str | None:
    if not figures.cause:
        return None
    return SERVER_CAUSE if server and figures.cause == "slots" else CAUSES[figures.cause].split(":")[0]


def _row(process: str, figures: PaceFigures, server: str | None = None) -> dict[str, Any]:
    open_loop = figures.target_rate is not None
    lateness = figures.lateness

    def rounded(value: float | None, digits: int = 1) -> float | None:
        return None if value is None else round(value, digits)

    return {
        "Process": process,
        "Target Requests/s": rounded(figures.target_rate),
        "Scheduled Requests/s": rounded(figures.scheduled_rate()),
        "Sent Requests/s": rounded(figures.sent_rate()),
        "Sent Ratio": rounded(figures.ratio(), 3),
        "Sent": figures.sent if open_loop else None,
        "Late %": rounded(100 * figures.late / figures.sent) if open_loop and figures.sent else None,
        "Lateness 50%": _ms(lateness.percentile(0.5)) if open_loop else None,
        "Lateness 99%": _ms(lateness.percentile(0.99)) if open_loop else None,
        "Lateness Max": _ms(lateness.max) if open_loop and lateness.n else None,
        "Peak CPU %": rounded(figures.cpu_peak, 0),
        "Fell Behind": ("yes" if figures.behind else "no") if open_loop else None,
        "Likely Cause": _likely_cause(figures, server),
    }


class Board:
    """The master's (or the only process's) view: each process's latest figures, and the warnings said."""

    def __init__(
        self,
        server: Callable[[], str | None] = lambda: None,
        advice: Callable[[float | None], str | None] = lambda rate: None,
    ) -> None:
        self.server = server
        """The server's own word that it was saturated (pace_causes.py), asked whenever a cause is worded."""
        self.advice = advice
        """The slots' lever sized for a rate by Little's law (pacing.slots_advice), asked with the run's target."""
        self.processes: dict[str, PaceFigures] = {}
        self._said: set[tuple[str, str]] = set()
        self._refused: set[str] = set()

    def clear(self) -> None:
        self.processes.clear()
        self._said.clear()

    def update(self, process: str, figures: PaceFigures) -> None:
        self.processes[process] = figures
        for kind, flagged in (("behind", figures.behind), ("cpu", figures.cpu_busy)):
            if flagged and (process, kind) not in self._said:
                self._said.add((process, kind))
                if kind == "behind":
                    text = behind_warning(process, figures, True, self.server(), self._advice())
                else:
                    text = cpu_warning(process, figures)
                logger.warning("%s", text)

    def refuse(self, process: str, why: str) -> None:
        if process not in self._refused:  # once per worker: it would say the same every 3 s
            self._refused.add(process)
            logger.warning("Pacing figures from %s refused (%s): its rate and CPU are left out", process, why[:200])

    def total(self) -> PaceFigures | None:
        """The open loop over all processes: targets, counts and rates add up; None in a closed loop."""
        senders = [f for f in self.processes.values() if f.target_rate is not None]
        if not senders:
            return None
        total = PaceFigures(target_rate=sum(f.target_rate or 0.0 for f in senders))
        for figures in senders:
            total.scheduled += figures.scheduled
            total.dispatched_late += figures.dispatched_late
            total.sent += figures.sent
            total.late += figures.late
            total.lateness.merge(figures.lateness.dump())
            total.behind = total.behind or figures.behind
        total.seconds = max(f.seconds for f in senders)
        return total

    def rows(self) -> list[dict[str, Any]]:
        server = self._server()
        table = [_row(name, self.processes[name], server) for name in sorted(self.processes, key=_process_order)]
        total = self.total()
        if total is not None and len(self.processes) > 1:
            senders = [f for f in self.processes.values() if f.target_rate is not None]
            row = _row(TOTAL, total)
            # each process's rate over its own window, added: the workers' windows do not start together
            row["Sent Requests/s"] = round(sum(f.sent_rate() or 0.0 for f in senders), 1)
            row["Scheduled Requests/s"] = round(sum(f.scheduled_rate() or 0.0 for f in senders), 1)
            row["Peak CPU %"] = None
            table.append(row)
        return table

    def sent_ratio(self) -> float | None:
        """The run's share of its scheduled requests that were sent; None in a closed loop."""
        total = self.total()
        return None if total is None else total.ratio()

    def _server(self) -> str | None:
        """The server's word, asked only when some process lacked free slots (it reads the scrapes)."""
        return self.server() if any(f.cause == "slots" for f in self.processes.values()) else None

    def _advice(self) -> str | None:
        """The slots' lever for the run's target rate (every process's together: -u is the run's); asked only
        when some process lacked free slots (it reads the pooling stats' histograms)."""
        if not any(f.cause == "slots" for f in self.processes.values()):
            return None
        total = self.total()
        try:
            return self.advice(total.target_rate if total is not None else None)
        except Exception:  # a warning is never lost to the figures that would have sized its lever
            logger.debug("the users a fell-behind warning asks for", exc_info=True)
            return None

    def summary_warnings(self) -> list[str]:
        server, advice = self._server(), self._advice()
        return [
            behind_warning(name, figures, False, server, advice)
            for name, figures in sorted(self.processes.items(), key=lambda item: _process_order(item[0]))
            if figures.behind
        ]

    def as_dict(self) -> dict[str, Any]:
        return {
            "late_ms": LATE_MS,
            "behind_ratio": BEHIND_RATIO,
            "cpu_busy_percent": CPU_BUSY_PERCENT,
            "sent_ratio": self.sent_ratio(),
            "rows": self.rows(),
            "warnings": self.summary_warnings()
            + [cpu_warning(name, f) for name, f in sorted(self.processes.items()) if f.cpu_busy],
        }


def _process_order(name: str) -> tuple[int, int, str]:
    kind, _, number = name.partition(" ")
    return (
        ("master", "local", "worker").index(kind) if kind in ("master", "local", "worker") else 3,
        int(number) if number.isdigit() else 0,
        name,
    )


_BOARD: Slot[Board] = Slot("client_load")
"""Each process's rate sent, lateness and CPU, on the master or the one process."""


def board_of(environment: Environment) -> Board:
    """The run's client-load board (made on first use, one per environment), asking the environment's
    registered server causes (pace_causes.py) and the users Little's law asks for (the run's pooling stats)
    when it words a fell-behind warning."""
    if (board := _BOARD.peek(environment)) is None:
        board = _BOARD.put(
            environment, Board(lambda: server_cause(environment), lambda rate: slots_advice(environment, rate))
        )
    return board


def board_if_any(environment: Environment) -> Board | None:
    """The run's client-load board, or None where nothing made one (a worker)."""
    return _BOARD.peek(environment)


def _cells(header: Sequence[str], table: Sequence[dict[str, Any]]) -> list[list[str]]:
    return [list(header)] + [
        ["" if r[c] is None else f"{r[c]:,}" if isinstance(r[c], int | float) else str(r[c]) for c in header]
        for r in table
    ]


def aligned(header: Sequence[str], table: Sequence[dict[str, Any]]) -> list[str]:
    return texttable.aligned(_cells(header, table))


def console_lines(board: Board, width: int | None = None) -> list[str]:
    """The Client load table for the console, fitted to `width` (--console-width; 0 or None: whole)."""
    table = board.rows()
    if not table:
        return []
    open_loop = any(row["Target Requests/s"] is not None for row in table)
    header = HEADER if open_loop else ("Process", "Peak CPU %")
    title = (
        f"Client load (open loop: requests/s scheduled and sent; late: sent over {LATE_MS:g} ms after "
        "the scheduled time; lateness in ms; CPU in % of one core)"
        if open_loop
        else "Client load (CPU in % of one core)"
    )
    return [*texttable.wrapped(title, width), *texttable.fitted_lines(_cells(header, table), width)]
