"""One process's state of the consistency check (docs/consistency.md): its references, its tallies, the
reference requests a worker sent that the server counts and the stats do not (the server metrics'
reconciliation adds them to the client's side), and the load windows.

A load window is a sweep step, a capacity probe's measured window or a repeat: the room that drives the
load opens one with a label that says its load ("sweep step 3 (users 8)") and closes it at its boundary,
as it takes Locust's stats there; its comparisons are those tallied in between (a master's: merged from
the workers' reports as they arrive). The gates (gates.py) read the windows closed so far to say at
what load answers first drifted."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

from locust.env import Environment

from poolbench_locust.consistency.measures import Comparison
from poolbench_locust.consistency.tally import MAX_COUNT, Tally
from poolbench_locust.store import Slot

logger = logging.getLogger("poolbench_locust")

TOTAL = "total"
FIGURES = (
    "compared",
    "identical_ratio",
    "cosine_min",
    "cosine_p01",
    "abs_diff_max",
    "top1_changed_ratio",
    "kendall_tau_min",
    "labels_changed_ratio",
    "hamming_max",
)
"""The figures shown, in the order shown; each present only where it applies (Tally.figures)."""


def cell(value: Any) -> str:
    """A figure as the console and the web UI show it: blank where it does not apply, ratios and cosines to six
    places, counts with thousands separators."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6f}"
    return f"{value:,}"


WINDOW_COLUMNS = (
    ("Compared", "compared"),
    ("Identical Ratio", "identical_ratio"),
    ("Cosine Min", "cosine_min"),
    ("Cosine P01", "cosine_p01"),
    ("Abs Diff Max", "abs_diff_max"),
    ("Top-1 Changed Ratio", "top1_changed_ratio"),
    ("Tau Min", "kendall_tau_min"),
    ("Labels Changed Ratio", "labels_changed_ratio"),
    ("Hamming Max", "hamming_max"),
)
"""A load window's columns in its room's CSV (PREFIX_sweep.csv, _capacity.csv, _repeats.csv): the title, the
total's figure; empty where nothing was compared or the figure does not apply."""
MAX_WINDOWS = 10_000
"""The most closed windows kept: a sweep's steps, a search's probes and the repeats are a few dozen; a web
UI's run left going for days with the form's sweep must not grow without bound."""
FIGURES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["compared"],
    "properties": {
        "compared": {"type": "integer", "minimum": 0},
        "identical_ratio": {"type": "number", "minimum": 0, "maximum": 1},
        "cosine_min": {"type": "number", "minimum": -1, "maximum": 1},
        "cosine_p01": {"type": "number", "minimum": -1, "maximum": 1},
        "abs_diff_max": {"type": "number", "minimum": 0},
        "top1_changed_ratio": {"type": "number", "minimum": 0, "maximum": 1},
        "kendall_tau_min": {"type": "number", "minimum": -1, "maximum": 1},
        "labels_changed_ratio": {"type": "number", "minimum": 0, "maximum": 1},
        "hamming_max": {"type": "integer", "minimum": 0},
    },
}
"""One name's figures (Tally.figures) in the JSON result."""
WINDOW_SCHEMA: dict[str, Any] = {
    "description": "The answers compared with their reference in this window alone (docs/consistency.md, Gates "
    "and load windows): each request name's figures and the total's; null when none was compared.",
    "oneOf": [{"type": "null"}, {"type": "object", "required": [TOTAL], "additionalProperties": FIGURES_SCHEMA}],
}
"""A sweep step's, capacity probe's or repeat's `consistency` in the JSON result."""


@dataclasses.dataclass
class Sent:
    """Reference requests answered well: what the server counts of them."""

    requests: int = 0
    sequences: int = 0
    input_tokens: int = 0

    def add(self, other: Sent) -> None:
        self.requests += other.requests
        self.sequences += other.sequences
        self.input_tokens += other.input_tokens


def merge_shipped(shipped: Any, into: Callable[[str, Tally], None], client_id: str, what: str) -> None:
    """A worker's shipped tallies by request name, each checked (Tally.from_wire), merged by `into`; what
    is refused is logged, saying whose and `what` it was."""
    if not isinstance(shipped, dict):
        logger.error("consistency: worker %.100s shipped no mapping of %s: ignored", client_id, what)
        return
    for name, wire in shipped.items():
        try:
            tally = Tally.from_wire(wire)
        except ValueError as e:
            logger.error("consistency: worker %.100s's %s of %r refused: %s", client_id, what, str(name)[:100], e)
            continue
        into(str(name)[:1000], tally)


def shipped_sent(shipped: Any, client_id: str, what: str) -> Sent | None:
    """A worker's reference requests: three whole numbers (requests, sequences, input tokens), else None
    (logged)."""
    if isinstance(shipped, list) and len(shipped) == 3 and all(type(n) is int and 0 <= n <= MAX_COUNT for n in shipped):
        return Sent(*shipped)
    logger.error("consistency: worker %.100s's count of %s refused: %.100r", client_id, what, shipped)
    return None


def figures_of(tallies: dict[str, Tally]) -> dict[str, dict[str, Any]] | None:
    """Each name's figures and the total's, or None when nothing was compared."""
    if not tallies:
        return None
    found = {name: tallies[name].figures() for name in sorted(tallies)}
    total = Tally()
    for tally in tallies.values():
        total.merge(tally)
    found[TOTAL] = total.figures()
    return found


def window_cells(figures: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
    """A window's CSV cells (WINDOW_COLUMNS), by title: the total's figures, None where there is none."""
    total = (figures or {}).get(TOTAL, {})
    return {title: total.get(figure) for title, figure in WINDOW_COLUMNS}


@dataclasses.dataclass
class Window:
    """A closed load window: its load, and each name's comparisons in it."""

    label: str
    tallies: dict[str, Tally]


@dataclasses.dataclass
class Consistency:
    """One process's references and tallies."""

    references: dict[str, dict[int, Sequence[float]]] = dataclasses.field(default_factory=dict)
    """By request name (the event's `name`, the plan's label): reference id -> its values."""
    kinds: dict[str, str] = dataclasses.field(default_factory=dict)
    """By request name: "vectors" or "scores", how its answers are compared."""
    tallies: dict[str, Tally] = dataclasses.field(default_factory=dict)
    """By request name, since the run began (the master's: merged from the workers)."""
    unshipped: dict[str, Tally] = dataclasses.field(default_factory=dict)
    """A worker's: what it tallied since its last report to the master."""
    skipped: int = 0
    """Answers that could not be compared (a value the measures refuse)."""
    sent: Sent = dataclasses.field(default_factory=Sent)
    """Reference requests sent after the server metrics' baseline: a worker's (its test_start comes after
    the master's, where the scrape begins; a local run takes its references before), and the master's
    merged from them. The reconciliation counts them on the client's side."""
    unshipped_sent: Sent = dataclasses.field(default_factory=Sent)
    window: dict[str, Tally] = dataclasses.field(default_factory=dict)
    """By request name, since the current load window opened (or the last one closed)."""
    window_label: str | None = None
    """The open window's load, None when no room opened one."""
    windows: list[Window] = dataclasses.field(default_factory=list)
    """The windows closed since the run began, in order (at most MAX_WINDOWS)."""
    window_of_ended_run: bool = False
    """The open window was opened before the last run stopped: the next run's start ends it."""

    def reset(self) -> None:
        """The stats were reset (a start, the end of --warmup, a repeat's end, the web UI's button): the
        figures count from now, the open window's too; the closed windows stay, as their rooms' rows do."""
        self.tallies.clear()
        self.unshipped.clear()
        self.window.clear()
        self.skipped = 0
        self.sent = Sent()
        self.unshipped_sent = Sent()

    def restart(self) -> None:
        """A run begins: nothing of the one before is kept, no window either. A window opened for this run
        stays open: a load shape's first tick (a sweep's first step) comes before Locust's test_start."""
        self.reset()
        self.windows.clear()
        if self.window_of_ended_run:
            self.window_label = None

    def stopped(self) -> None:
        """The run stopped: its open window is still judged and closed at quitting, but is none of the next
        run's."""
        self.window_of_ended_run = True

    def add(self, name: str, comparison: Comparison, ship: bool) -> None:
        self.tallies.setdefault(name, Tally()).add(comparison)
        self.window.setdefault(name, Tally()).add(comparison)
        if ship:
            self.unshipped.setdefault(name, Tally()).add(comparison)

    def merge(self, name: str, tally: Tally) -> None:
        """A worker's shipped tally of `name` (checked by Tally.from_wire): into the run's and the window's."""
        self.tallies.setdefault(name, Tally()).merge(tally)
        self.window.setdefault(name, Tally()).merge(tally)

    def open_window(self, label: str) -> None:
        """A load window begins now, its load said by `label`: what was tallied before is no part of it."""
        self.window = {}
        self.window_label = label
        self.window_of_ended_run = False

    def close_window(self) -> dict[str, dict[str, Any]] | None:
        """The open window ends now: its figures (each name's and the total's; None when nothing was
        compared), kept for the gates with its label; the next comparisons are in no window until one opens."""
        tallies, label = self.window, self.window_label
        self.window, self.window_label = {}, None
        if label is not None and len(self.windows) < MAX_WINDOWS:
            self.windows.append(Window(label, tallies))
        return figures_of(tallies)

    def total(self) -> Tally:
        total = Tally()
        for tally in self.tallies.values():
            total.merge(tally)
        return total

    def figures(self) -> dict[str, dict[str, Any]] | None:
        """Each name's figures and the total's, or None when nothing was compared."""
        return figures_of(self.tallies)

    def rows(self) -> list[dict[str, Any]]:
        """The table: each name's row, then the total's; a figure that does not apply is None."""
        figures = self.figures() or {}
        return [{"Name": name, **{f: found.get(f) for f in FIGURES}} for name, found in figures.items()]


_STATE = Slot("consistency", Consistency)


def consistency_of(environment: Environment) -> Consistency:
    return _STATE.of(environment)
