"""The HTML page of a comparison: its tables, and each run's curves overlaid in inline SVG (no
script, nothing fetched, so the page opens anywhere, a CI artifact included)."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from poolbench_locust.results.compare import Run, Section, blocks_of, cells, mark
from poolbench_locust.results.noise import chunks, percentile_of, rate_of
from poolbench_locust.results.series import Block

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")
WIDTH, HEIGHT, PAD = 640, 220, 56
CURVES: tuple[tuple[str, Callable[[Block], float | None]], ...] = (
    ("Requests/s", rate_of("requests")),
    ("Input Tokens/s", rate_of("input_tokens")),
    ("E2E 50% (ms)", percentile_of("e2e", 0.5)),
    ("E2E 99% (ms)", percentile_of("e2e", 0.99)),
)


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


def _short(x: float) -> str:
    """An axis label that fits the margin: 1.44M, 711k, 90.2."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


def chart(title: str, runs: Sequence[Run], of_block: Callable[[Block], float | None]) -> str:
    curves = [_points(run, of_block) for run in runs]
    xs = [x for c in curves for x, _ in c]
    ys = [y for c in curves for _, y in c]
    if not xs:
        return ""
    x_max, y_max = max(xs) or 1.0, max(ys) * 1.1 or 1.0

    def sx(x: float) -> float:
        return PAD + x / x_max * (WIDTH - 2 * PAD)

    def sy(y: float) -> float:
        return HEIGHT - PAD + 0.0 - y / y_max * (HEIGHT - 2 * PAD)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" role="img">',
        f"<title>{html.escape(title)}</title>",
        f'<text x="{PAD}" y="16" font-size="13">{html.escape(title)}, whole run</text>',
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" stroke="#888"/>',
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{HEIGHT - PAD}" stroke="#888"/>',
        f'<text x="{PAD - 4}" y="{PAD + 4}" font-size="11" text-anchor="end">{_short(y_max)}</text>',
        f'<text x="{PAD - 4}" y="{HEIGHT - PAD + 4}" font-size="11" text-anchor="end">0</text>',
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - PAD + 16}" font-size="11" text-anchor="end">{x_max:.0f} s</text>',
    ]
    for i, (run, curve) in enumerate(zip(runs, curves, strict=True)):
        colour = COLOURS[i % len(COLOURS)]
        points = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in curve)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>')
        label = html.escape(("base: " if i == 0 else f"new {i}: ") + run.label)
        x = PAD + (WIDTH - 2 * PAD) * i / len(runs)  # the legend: a line of its own above the plot
        parts.append(f'<text x="{x:.0f}" y="34" font-size="11" fill="{colour}">{label}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(section: Section, runs: Sequence[Run]) -> str:
    head = "<th>figure</th><th>base</th>" + "".join(
        f"<th>new {i}</th><th>change</th><th>%</th><th></th>" for i in range(1, len(runs))
    )
    body = []
    for figure in section.figures:
        tds = [f"<td>{html.escape(c)}</td>" for c in cells(section, figure)]
        for i, changes in enumerate(section.changes):
            c = changes[figure.title]
            if c.significant:  # the mark's cell: red when the figure got worse, green when better
                colour = "#fde2e1" if c.worse_by(figure) > 0 else "#dff5e1"
                at = 2 + 4 * i + 3
                tds[at] = f'<td style="background:{colour}">{html.escape(mark(c))}</td>'
        body.append("<tr>" + "".join(tds) + "</tr>")
    return (
        f"<h2>{html.escape(section.title)}</h2>"
        f'<table border="1" cellspacing="0" cellpadding="4"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def html_page(found: Sequence[Section], runs: Sequence[Run]) -> str:
    listing = "".join(
        f"<li>{'base' if i == 0 else f'new {i}'}: {html.escape(run.path)}</li>" for i, run in enumerate(runs)
    )
    charts = "".join(chart(title, runs, of_block) for title, of_block in CURVES)
    tables = "".join(_table(section, runs) for section in found)
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>poolbench-compare</title></head>'
        '<body style="font-family:sans-serif;margin:2em">'
        f"<h1>poolbench-compare</h1><ul>{listing}</ul>"
        f"<section>{charts}</section>{tables}"
        "<p>* beyond run-to-run noise: the change exceeds 3 standard errors of the difference (bootstrap "
        "over each run's seconds) and the histogram's resolution; ? the run is too short to estimate "
        "its noise. Curves: the Aggregated row, per chunk of seconds.</p></body></html>"
    )
