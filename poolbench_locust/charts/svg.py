"""Line charts as inline SVG, written by hand: no charting dependency, no script, no network.

One renderer serves the web UI's Pooling tab (the master renders, the browser only shows it), the
HTML report and `poolbench-plot`, so every picture of a run looks the same wherever it is seen.
Every value is checked here: a point that is not a finite number is left out, never drawn.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from html import escape

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")
WIDTH = 560
HEIGHT = 240
MARGIN_LEFT = 64
MARGIN_RIGHT = 16
MARGIN_TOP = 40
MARGIN_BOTTOM = 40
TICKS = 5

Point = tuple[float, float]


@dataclass(frozen=True)
class Series:
    label: str
    points: Sequence[Point]
    notes: Sequence[str] = ()
    """With markers: a short text by each point (a sweep's step), in the order of `points`."""


def finite(value: object) -> float | None:
    """The value as a float if it is a finite number (or text of one), else None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


DURATION_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
"""Seconds between ticks of a time axis: whole seconds, minutes and hours."""


def nice_ticks(low: float, high: float, count: int = TICKS, steps: Sequence[float] = ()) -> list[float]:
    """Round tick values covering [low, high]: one of `steps` apart, else 1, 2, 2.5 or 5 times a power of ten."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    candidates = [*steps] or [m * power for m in (1, 2, 2.5, 5, 10)]
    step = next((c for c in candidates if c >= raw), candidates[-1] * math.ceil(raw / candidates[-1]))
    first = math.floor(low / step) * step
    ticks = []
    value = first
    while value < high + step * 0.999:
        ticks.append(round(value, 10))
        value += step
    return ticks


def number_label(value: float) -> str:
    if abs(value) >= 1_000_000:
        return f"{value / 1_000_000:g}M"
    if abs(value) >= 10_000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


def duration_label(seconds: float) -> str:
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def thin(points: Iterable[Point], to_pixel: Callable[[float], float]) -> list[Point]:
    """At most the lowest and the highest point of each pixel column, in order: a long run draws
    as many points as the chart is wide, and no spike is lost."""
    out: list[Point] = []
    column: list[Point] = []
    column_x: int | None = None

    def flush() -> None:
        if not column:
            return
        low = min(column, key=lambda p: p[1])
        high = max(column, key=lambda p: p[1])
        out.extend(sorted({low, high}, key=column.index))

    for point in points:
        x = int(to_pixel(point[0]))
        if x != column_x:
            flush()
            column, column_x = [], x
        column.append(point)
    flush()
    return out


def line_chart(
    title: str,
    series: Sequence[Series],
    *,
    y_unit: str = "",
    x_label: str = "elapsed",
    x_format: Callable[[float], str] = duration_label,
    markers: bool = False,
    x_from_zero: bool = False,
    width: int = WIDTH,
    height: int = HEIGHT,
) -> str:
    """One chart: a title, axes with round ticks, a line per series and its legend."""
    clean = []
    for s in series:
        kept = [
            (point, note)
            for point, note in zip(s.points, [*s.notes, *[""] * (len(s.points) - len(s.notes))], strict=True)
            if finite(point[0]) is not None and finite(point[1]) is not None
        ]
        clean.append(Series(s.label, [p for p, _ in kept], [n for _, n in kept]))
    xs = [x for s in clean for x, _ in s.points]
    ys = [y for s in clean for _, y in s.points]
    plot_w = width - MARGIN_LEFT - MARGIN_RIGHT
    plot_h = height - MARGIN_TOP - MARGIN_BOTTOM
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11" role="img" '
        f'aria-label="{escape(title)}">',
        f'<rect width="{width}" height="{height}" fill="#fff"/>',
        f'<text x="{MARGIN_LEFT}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>',
    ]
    if not xs:
        parts.append(
            f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" fill="#888">no data yet</text></svg>'
        )
        return "".join(parts)
    noted = any(s.notes and any(s.notes) for s in clean)
    # room above the highest point for its note
    y_ticks = nice_ticks(min(0.0, min(ys)), max(ys) * (1.1 if noted and max(ys) > 0 else 1.0))
    # The x axis ends where the data ends (a run in progress fills it); the y axis at a round tick.
    x_lo = min(0.0, min(xs)) if x_from_zero else min(xs)
    x_hi = max(xs) if max(xs) > x_lo else x_lo + 1.0
    if markers and not x_from_zero:  # room for the first and last marker and their notes
        pad = (x_hi - x_lo) * 0.06
        x_lo, x_hi = (x_lo - pad if x_lo - pad >= 0 or x_lo < 0 else 0.0), x_hi + pad
    steps = DURATION_STEPS if x_format is duration_label else ()
    x_ticks = [t for t in nice_ticks(x_lo, x_hi, steps=steps) if x_lo <= t <= x_hi]
    y_lo, y_hi = y_ticks[0], y_ticks[-1]

    def px(x: float) -> float:
        return MARGIN_LEFT + (x - x_lo) / (x_hi - x_lo) * plot_w

    def py(y: float) -> float:
        return MARGIN_TOP + plot_h - (y - y_lo) / (y_hi - y_lo) * plot_h

    for tick in y_ticks:
        y = py(tick)
        parts.append(
            f'<line x1="{MARGIN_LEFT}" x2="{width - MARGIN_RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e5e5"/>'
        )
        parts.append(f'<text x="{MARGIN_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{number_label(tick)}</text>')
    for tick in x_ticks:
        x = px(tick)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{MARGIN_TOP}" y2="{MARGIN_TOP + plot_h}" stroke="#f0f0f0"/>')
        parts.append(
            f'<text x="{x:.1f}" y="{MARGIN_TOP + plot_h + 14}" text-anchor="middle">{escape(x_format(tick))}</text>'
        )
    parts.append(
        f'<text x="{MARGIN_LEFT + plot_w / 2}" y="{height - 6}" text-anchor="middle" fill="#555">'
        f"{escape(x_label)}</text>"
    )
    if y_unit:
        parts.append(
            f'<text x="12" y="{MARGIN_TOP + plot_h / 2}" text-anchor="middle" fill="#555" '
            f'transform="rotate(-90 12 {MARGIN_TOP + plot_h / 2})">{escape(y_unit)}</text>'
        )
    parts.append(
        f'<rect x="{MARGIN_LEFT}" y="{MARGIN_TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>'
    )
    legend_x = float(width - MARGIN_RIGHT)
    for index, s in reversed(list(enumerate(clean))):
        colour = COLOURS[index % len(COLOURS)]
        points = thin(s.points, px)
        if points:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" points="{path}"/>')
        if markers:
            for (x, y), note in zip(s.points, s.notes, strict=True):
                tip = f"{s.label}: {number_label(y)} at {x_format(x)}" + (f" ({note})" if note else "")
                parts.append(
                    f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}">'
                    f"<title>{escape(tip)}</title></circle>"
                )
                if note:  # beside the frame, the note leans inwards
                    anchor = (
                        "start"
                        if px(x) < MARGIN_LEFT + 20
                        else "end"
                        if px(x) > width - MARGIN_RIGHT - 20
                        else "middle"
                    )
                    parts.append(
                        f'<text x="{px(x):.1f}" y="{py(y) - 6:.1f}" text-anchor="{anchor}" font-size="10" '
                        f'fill="{colour}">{escape(note)}</text>'
                    )
        label = escape(s.label)
        legend_x -= 7 * len(s.label) + 26
        parts.append(f'<rect x="{legend_x:.0f}" y="24" width="12" height="3" fill="{colour}"/>')
        parts.append(f'<text x="{legend_x + 16:.0f}" y="29">{label}</text>')
    parts.append("</svg>")
    return "".join(parts)
