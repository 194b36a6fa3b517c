"""The HTML page of a comparison: its verdict first (the gate passed or failed, and which figures),
each run's curves overlaid in inline SVG, then the tables with each change in the colour of what it
did to the figure. No script, nothing fetched: the page opens anywhere, a CI artifact included."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from poolbench_locust import htmltables
from poolbench_locust.charts.svg import Series, line_chart
from poolbench_locust.metrics.collector import AGGREGATED
from poolbench_locust.results.compare import ComparedSection, Run, blocks_of, cells, failed, fmt, percent
from poolbench_locust.results.noise import Change, Figure, chunks, percentile_of, rate_of
from poolbench_locust.results.series import Block

CURVES: tuple[tuple[str, str, Callable[[Block], float | None]], ...] = (
    ("Requests/s", "requests/s", rate_of("requests")),
    ("Input tokens/s", "tokens/s", rate_of("input_tokens")),
    ("E2E 50%", "ms", percentile_of("e2e", 0.5)),
    ("E2E 99%", "ms", percentile_of("e2e", 0.99)),
)
WORSE, BETTER, SAME = "#c62828", "#2e7d32", "rgba(0,0,0,.6)"
WORSE_BACK, BETTER_BACK = "#fde2e1", "#dff5e1"
STYLE = """<style>
.verdict{padding:12px 16px;border-radius:4px;margin:16px 0 24px;font-size:1rem}
.verdict.failed{background:#fde2e1;border-left:6px solid #c62828}
.verdict.passed{background:#dff5e1;border-left:6px solid #2e7d32}
.verdict.none{background:#f5f5f5;border-left:6px solid #9e9e9e}
.verdict ul{margin:6px 0 0}
.charts{display:flex;flex-wrap:wrap;gap:8px}
</style>"""


def _points(run: Run, of_block: Callable[[Block], float | None]) -> list[tuple[float, float]]:
    pieces = chunks(blocks_of(run.doc["total"]))
    if not pieces:
        return []
    start = pieces[0]["time"]
    out = []
    for piece in pieces:
        y = of_block(piece)
        if y is not None:
            out.append((piece["time"] - start + piece["seconds"] / 2, y))
    return out


def _name(i: int) -> str:
    return "base" if i == 0 else f"new {i}"


def chart(title: str, unit: str, runs: Sequence[Run], of_block: Callable[[Block], float | None]) -> str:
    """The runs' curves of one figure over the run, overlaid, with axes, units and a legend."""
    series = [Series(_name(i), _points(run, of_block)) for i, run in enumerate(runs)]
    if not any(s.points for s in series):
        return ""
    return line_chart(f"{title}, whole run", series, y_unit=unit, x_label="elapsed (m:ss)", x_from_zero=True)


def _verdict_of(c: Change, figure: Figure) -> str:
    """worse, better, or '' (no change beyond noise)."""
    if not c.significant:
        return ""
    return _direction(c, figure)


def _direction(c: Change, figure: Figure) -> str:
    """What the change did to the figure, beyond noise or not: worse, better, or '' (none)."""
    if not c.delta:
        return ""
    return "worse" if c.worse_by(figure) > 0 else "better"


def _table(section: ComparedSection, runs: Sequence[Run]) -> str:
    head = "<th>figure</th><th>base</th>" + "".join(
        f"<th>{_name(i)}</th><th>change</th><th>%</th><th></th>" for i in range(1, len(runs))
    )
    body = []
    for figure in section.figures:
        shown = cells(section, figure)
        tds = [f"<td>{html.escape(c)}</td>" for c in shown[:2]]
        for i, changes in enumerate(section.changes):
            c = changes[figure.title]
            verdict = _verdict_of(c, figure)
            value, delta, rel, sign = shown[2 + 4 * i : 6 + 4 * i]
            # the direction's colour on every change; beyond noise, a background too
            colour = {"worse": WORSE, "better": BETTER}.get(_direction(c, figure), SAME)
            back = {"worse": WORSE_BACK, "better": BETTER_BACK}.get(verdict)
            style = f"color:{colour}" + (f";background:{back};font-weight:500" if back else ";opacity:.75")
            tds.append(f"<td>{html.escape(value)}</td>")
            tds += [f'<td style="{style}">{html.escape(t)}</td>' for t in (delta, rel)]
            tds.append(f'<td style="{style}">{html.escape(" ".join(filter(None, (sign, verdict))))}</td>')
        body.append("<tr>" + "".join(tds) + "</tr>")
    return (
        f"<h3>{html.escape(section.title)}</h3>"
        f'<div class="poolbench-box"><table class="poolbench-table"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _changes(found: Sequence[ComparedSection], runs: Sequence[Run], verdict: str) -> list[str]:
    """Each marked change of that verdict, once (a request name equal to the total is the total's)."""
    lines, seen = [], set()
    for section in sorted(found, key=lambda s: s.title != AGGREGATED):
        for i, changes in enumerate(section.changes, start=1):
            for figure in section.figures:
                c = changes[figure.title]
                key = (i, figure.title, c.base, c.new)
                if _verdict_of(c, figure) != verdict or key in seen:
                    continue
                seen.add(key)
                lines.append(
                    f"{_name(i)} ({runs[i].label}), {section.title}: {figure.label} {fmt(c.base)} → {fmt(c.new)} "
                    f"({percent(c.relative)})"
                )
    return lines


def _listed(lines: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul>" if lines else ""


def verdict(found: Sequence[ComparedSection], runs: Sequence[Run], limit: float | None) -> str:
    """What the comparison says, before any table: the gate's verdict and which figures made it."""
    worse, better = _changes(found, runs, "worse"), _changes(found, runs, "better")
    if limit is not None:
        bad = failed(found, limit)
        if bad:
            return (
                f'<div class="verdict failed"><b>Failed the gate</b> (--max-regression {limit * 100:g}%): '
                f"{len(bad)} figure{'s' if len(bad) != 1 else ''} worse by more than that."
                + _listed([r.line(runs, limit) for r in bad])
                + "</div>"
            )
        head = (
            f'<div class="verdict passed"><b>Passed the gate</b> (--max-regression {limit * 100:g}%): no figure '
            "worse by more than that beyond noise."
        )
    else:
        head = (
            '<div class="verdict none"><b>No gate given</b> (--max-regression): '
            f"{len(worse)} change{'s' if len(worse) != 1 else ''} worse and {len(better)} better beyond noise."
        )
    parts = [head]
    if worse:
        parts.append(f'<p style="color:{WORSE};margin:8px 0 0">Worse beyond noise:</p>' + _listed(worse))
    if better:
        parts.append(f'<p style="color:{BETTER};margin:8px 0 0">Better beyond noise:</p>' + _listed(better))
    return "".join(parts) + "</div>"


def html_page(found: Sequence[ComparedSection], runs: Sequence[Run], limit: float | None = None) -> str:
    listing = "".join(f"<li>{_name(i)}: {html.escape(run.path)}</li>" for i, run in enumerate(runs))
    charts = "".join(chart(title, unit, runs, of_block) for title, unit, of_block in CURVES)
    tables = "".join(_table(section, runs) for section in found)
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>poolbench-compare</title>'
        f"{htmltables.STYLE}{STYLE}</head><body>"
        '<div class="poolbench-section"><h2>poolbench-compare</h2>'
        f"{verdict(found, runs, limit)}<ul>{listing}</ul>"
        f'<h3>The runs over time</h3><div class="charts">{charts}</div>{tables}'
        "<p>Changes in red made a figure worse, in green better (a throughput down and a time up are both "
        "worse); on a shaded cell and marked * the change is beyond run-to-run noise: it exceeds 3 standard "
        "errors of the difference (bootstrap over each run's seconds) and the histogram's resolution; "
        "unshaded, it is within the noise; ? the run is too short to estimate its noise. Curves: the "
        "Aggregated row, per chunk of seconds.</p>"
        "</div></body></html>"
    )
