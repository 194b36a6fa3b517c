"""poolbench-compare BASE.json NEW.json [more...]: run against run, figure by figure.

For each request name (and the total, each sweep step, and each name's answer consistency:
compare_consistency.py) a table of the key figures: the base
run's, and for each other run its value, the change and the relative change, marked `*` where the
change is beyond the run-to-run noise (noise.py). `--max-regression 5%` exits 1 when a marked
change makes a figure worse by more than that (a throughput down, a time up); `--html FILE` writes
the tables and the runs' curves overlaid, one page with inline SVG and nothing fetched.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from poolbench_locust import texttable
from poolbench_locust.metrics.collector import AGGREGATED
from poolbench_locust.results import compare_consistency
from poolbench_locust.results.document import FORMAT, FORMAT_VERSION
from poolbench_locust.results.noise import (
    FIGURES,
    REPEAT_FIGURES,
    STEP_FIGURES,
    Change,
    Figure,
    change,
    chunks,
    relative_error,
    repeat_error,
    value,
)
from poolbench_locust.results.series import LATER_COUNTS, Block

EXIT_REGRESSION = 1
EXIT_USAGE = 2
MAX_FILE_BYTES = 1 << 30


class ResultError(ValueError):
    """A file that is not a poolbench-locust JSON result this version reads; its text is the one line."""


@dataclass
class ComparedSection:
    """What one table compares: a request name's figures, or a sweep step's, in each run."""

    title: str
    figures: tuple[Figure, ...]
    rows: list[dict[str, dict[str, Any]] | None]
    """Per run: {"pooling": row, "locust": row} or {"step": row}; None where the run lacks it."""
    blocks: list[list[Block]]
    changes: list[dict[str, Change]] = field(default_factory=list)
    """Per run after the base: figure title -> change."""
    errors: list[dict[str, float | None]] | None = None
    """Per run: figure title -> relative error, where it is known without the blocks (--repeat's spread)."""
    of_a_name: bool = False
    """A request name's table (or the total's), not a sweep step's or the repeats'."""
    judge: Callable[[Figure, float | None, float | None, float | None, float | None], Change] = change
    """How a figure's change is judged (the consistency tables judge a share's in points)."""


@dataclass
class Run:
    path: str
    doc: dict[str, Any]

    @property
    def label(self) -> str:
        return Path(self.path).name


def load(path: str) -> Run:
    try:
        size = Path(path).stat().st_size
        if size > MAX_FILE_BYTES:
            raise ResultError(f"{path}: {size} bytes, more than a result ever holds")
        doc = orjson.loads(Path(path).read_bytes())
    except OSError as e:
        raise ResultError(f"{path}: {e.strerror or e}") from None
    except orjson.JSONDecodeError as e:
        raise ResultError(f"{path}: not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ResultError(f'{path}: not a poolbench-locust result (no "format": "{FORMAT}")')
    if doc.get("format_version") != FORMAT_VERSION:
        raise ResultError(f"{path}: format_version {doc.get('format_version')!r}; this version reads {FORMAT_VERSION}")
    for key in ("requests", "total"):
        if not isinstance(doc.get(key), list if key == "requests" else dict):
            raise ResultError(f"{path}: field {key!r} missing or of the wrong type")
    return Run(path, doc)


def _entries(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    entries = [e for e in doc["requests"] if isinstance(e, dict) and isinstance(e.get("name"), str)]
    by_name = {f"{e.get('method') or ''} {e['name']}".strip(): e for e in entries}
    by_name[AGGREGATED] = doc["total"]
    return by_name


def blocks_of(entry: dict[str, Any] | None) -> list[Block]:
    series = (entry or {}).get("series")
    return [b for b in series if _is_block(b)] if isinstance(series, list) else []


def _is_block(block: Any) -> bool:
    counts = ("seconds", "requests", "failures", "e2e_sum_ms", "input_tokens", "sequences", "bytes")
    return (
        isinstance(block, dict)
        and all(value(block.get(k)) is not None and block[k] >= 0 for k in counts)
        and all(k not in block or (value(block[k]) is not None and block[k] >= 0) for k in LATER_COUNTS)
        and isinstance(block.get("timings"), dict)
        and all(
            isinstance(h, dict) and all(k.isdigit() and value(n) is not None and n >= 0 for k, n in h.items())
            for h in block["timings"].values()
        )
    )


def sections(runs: Sequence[Run]) -> list[ComparedSection]:
    per_run = [_entries(r.doc) for r in runs]
    names = [n for n in per_run[0] if n != AGGREGATED]
    names += [n for entries in per_run[1:] for n in entries if n != AGGREGATED and n not in names]
    out = []
    for name in [*names, AGGREGATED]:
        entries = [entries.get(name) for entries in per_run]
        rows = [
            None if e is None else {"pooling": e.get("pooling") or {}, "locust": e.get("locust") or {}} for e in entries
        ]
        out.append(ComparedSection(name, _shown(FIGURES, rows), rows, [blocks_of(e) for e in entries], of_a_name=True))
    out.extend(_step_sections(runs))
    out.extend(_repeat_sections(runs))
    for table in compare_consistency.tables([r.doc for r in runs]):
        blocks: list[list[Block]] = [[] for _ in runs]
        out.append(
            ComparedSection(
                table.title, table.figures, table.rows, blocks, errors=table.errors, judge=compare_consistency.judge
            )
        )
    return out


def _shown(figures: tuple[Figure, ...], rows: list[dict[str, dict[str, Any]] | None]) -> tuple[Figure, ...]:
    """The figures but those that equal their `same_as` column in every run (Vectors/s of one vector per input)."""

    def same(f: Figure, same_as: str) -> bool:
        cells = [(row or {}).get(f.source) or {} for row in rows]
        return all(value(c.get(f.column)) == value(c.get(same_as)) for c in cells)

    return tuple(f for f in figures if f.same_as is None or not same(f, f.same_as))


def _repeat_values(doc: dict[str, Any], key: str) -> list[float]:
    repeats = doc.get("repeats")
    if not isinstance(repeats, list):
        return []
    found = (value(r.get(key)) for r in repeats if isinstance(r, dict))
    return [v for v in found if v is not None]


def _repeat_sections(runs: Sequence[Run]) -> list[ComparedSection]:
    """With --repeat on both sides: each headline figure's mean over the repeats, its noise their
    spread. A run with one repeat (or none) shows its value there, and no noise."""
    counts = [len(_repeat_values(r.doc, "requests_per_s")) for r in runs]
    if counts[0] < 2 or max(counts[1:], default=0) < 2:
        return []
    rows: list[dict[str, dict[str, Any]] | None] = []
    errors: list[dict[str, float | None]] = []
    for run in runs:
        found = {f.column: _repeat_values(run.doc, f.column) for f in REPEAT_FIGURES}
        rows.append({"repeats": {k: sum(v) / len(v) for k, v in found.items() if v}} if any(found.values()) else None)
        errors.append({f.title: repeat_error(found[f.column]) for f in REPEAT_FIGURES})
    title = f"repeats (mean of {counts[0]}" + "".join(f" vs {n}" for n in counts[1:]) + ")"
    return [ComparedSection(title, REPEAT_FIGURES, rows, [[] for _ in runs], errors=errors)]


def _step_sections(runs: Sequence[Run]) -> list[ComparedSection]:
    sweeps = [r.doc.get("sweep") if isinstance(r.doc.get("sweep"), dict) else None for r in runs]
    if sweeps[0] is None or not isinstance(sweeps[0].get("steps"), list):
        return []
    out = []
    for i, _ in enumerate(sweeps[0]["steps"]):
        rows: list[dict[str, dict[str, Any]] | None] = []
        blocks: list[list[Block]] = []
        for run, sweep in zip(runs, sweeps, strict=True):
            steps = sweep.get("steps") if sweep else None
            step = steps[i] if isinstance(steps, list) and i < len(steps) and isinstance(steps[i], dict) else None
            rows.append(None if step is None else {"step": step})
            blocks.append(_step_blocks(run, step))
        target = (rows[0] or {}).get("step", {}).get("Target")
        by = sweeps[0].get("by", "")
        out.append(ComparedSection(f"sweep step {i + 1} ({by} {target})", STEP_FIGURES, rows, blocks))
    return out


def _step_blocks(run: Run, step: dict[str, Any] | None) -> list[Block]:
    start, end = (value((step or {}).get(k)) for k in ("start_time", "end_time"))
    if start is None or end is None:
        return []
    return [b for b in blocks_of(run.doc["total"]) if start <= b["time"] < end]


def figure_value(figure: Figure, row: dict[str, dict[str, Any]] | None) -> float | None:
    return None if row is None else value(row.get(figure.source, {}).get(figure.column))


def compare(runs: Sequence[Run]) -> list[ComparedSection]:
    out = sections(runs)
    for section in out:
        pieces = [chunks(blocks) for blocks in section.blocks]
        errors = section.errors or [{f.title: relative_error(f, p) for f in section.figures} for p in pieces]
        for i in range(1, len(runs)):
            section.changes.append(
                {
                    f.title: section.judge(
                        f,
                        figure_value(f, section.rows[0]),
                        figure_value(f, section.rows[i]),
                        errors[0][f.title],
                        errors[i][f.title],
                    )
                    for f in section.figures
                }
            )
    return out


@dataclass(frozen=True)
class Regression:
    """A figure made worse beyond the gate: which run, where, and by how much."""

    run: int
    section: str
    figure: Figure
    change: Change
    noise_known: bool

    def line(self, runs: Sequence[Run], limit: float) -> str:
        c = self.change
        why = "beyond noise" if self.noise_known else "noise unknown (a run too short)"
        return (
            f"{runs[self.run].label}: {self.section}: {self.figure.title} {fmt(c.base)} -> {fmt(c.new)} "
            f"({percent(c.relative)}), {why}, worse than --max-regression {limit * 100:g}%"
        )


def failed(found: Sequence[ComparedSection], limit: float) -> list[Regression]:
    """Each figure made worse by more than `limit` (a fraction): by a marked change, or, where a run was
    too short to estimate its noise, by the change alone (a gate never passes unseen). Once each: a
    request name whose figure is the total's own (a run of one name) is left to the Aggregated line."""
    out = []
    for section in found:
        for i, changes in enumerate(section.changes, start=1):
            for figure in section.figures:
                c = changes[figure.title]
                unknown = c.noise is None
                if (c.significant or unknown) and c.worse_by(figure) > limit:
                    out.append(Regression(i, section.title, figure, c, not unknown))
    totals = {(r.run, r.figure.title, r.change.base, r.change.new) for r in out if r.section == AGGREGATED}
    names = {s.title for s in found if s.of_a_name and s.title != AGGREGATED}
    return [
        r for r in out if not (r.section in names and (r.run, r.figure.title, r.change.base, r.change.new) in totals)
    ]


def regressions(found: Sequence[ComparedSection], runs: Sequence[Run], limit: float) -> list[str]:
    """One line per figure made worse by more than `limit` (see `failed`)."""
    return [r.line(runs, limit) for r in failed(found, limit)]


def fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if abs(x) >= 100 or x == int(x):
        return f"{x:,.0f}" if abs(x) >= 1000 or x == int(x) else f"{x:.1f}"
    return f"{x:.3g}" if abs(x) < 1 else f"{x:.2f}"


def percent(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def signed(x: float | None) -> str:
    return "-" if x is None else ("+" if x >= 0 else "-") + fmt(abs(x))


def mark(c: Change) -> str:
    return "*" if c.significant else ("?" if c.noise is None and c.delta else "")


def cells(section: ComparedSection, figure: Figure) -> list[str]:
    """A figure's row as shown: its name, the base's value, then each run's value, change, % and mark."""
    line = [figure.label, fmt(figure_value(figure, section.rows[0]))]
    for changes in section.changes:
        c = changes[figure.title]
        line += [fmt(c.new), signed(c.delta), percent(c.relative), mark(c)]
    return line


def text_tables(found: Sequence[ComparedSection], runs: Sequence[Run]) -> str:
    lines = [f"base: {runs[0].path}"] + [f"new {i}: {r.path}" for i, r in enumerate(runs[1:], start=1)]
    for section in found:
        header = ["figure", "base"]
        for i in range(1, len(runs)):
            header += [f"new {i}", "change", "%", ""]
        table = [header]
        for figure in section.figures:
            line = [
                figure.title + (f" ({figure.unit})" if figure.unit else ""),
                fmt(figure_value(figure, section.rows[0])),
            ]
            for changes in section.changes:
                c = changes[figure.title]
                line += [fmt(c.new), signed(c.delta), percent(c.relative), mark(c)]
            table.append(line)
        lines += ["", f"== {section.title}"]
        lines += texttable.aligned(table)
    lines += [
        "",
        "* beyond run-to-run noise: the change exceeds 3 standard errors of the difference (bootstrap over",
        "  each run's seconds, or the spread of its --repeat repeats) and the histogram's resolution.",
        "? the run is too short to estimate its noise.",
    ]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def parse_limit(text: str) -> float:
    raw = text.strip().removesuffix("%")
    try:
        percent = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a percentage such as 5%, got {text!r}") from None
    if not 0 <= percent < 1000:
        raise argparse.ArgumentTypeError(f"must be a percentage from 0% to 1000%, got {text!r}")
    return percent / 100
