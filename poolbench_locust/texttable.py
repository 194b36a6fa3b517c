"""The one way a table is aligned as text: the console summaries, the Client load and server tables,
poolbench-compare."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence


def aligned(rows: Sequence[Sequence[str]], right: bool = True) -> list[str]:
    """`rows` (the header first, every cell already text) as lines two spaces apart: the first column
    to the left, the others to the right as numbers are (or to the left too, when not `right`);
    no line ends in spaces."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))] if rows else []
    return [
        "  ".join(
            cell.rjust(width) if right and i else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


NAME_WIDTH = 40
"""The most characters of a fitted table's first column (a request name, a server's URL): cut in the middle."""
ELLIPSIS = "..."


def cut(text: str, limit: int) -> str:
    """`text`, or its start and end around `...` so that it is `limit` characters long."""
    if len(text) <= limit:
        return text
    keep = max(limit - len(ELLIPSIS), 2)
    return text[: keep // 2] + ELLIPSIS + text[len(text) - (keep - keep // 2) :]


def wrapped(text: str, width: int | None) -> list[str]:
    """A title or a note as lines of at most `width` characters (at spaces); whole when `width` is 0 or None."""
    if not width or len(text) <= width:
        return [text]
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)


def fitted(rows: Sequence[Sequence[str]], width: int | None, right: bool = True) -> list[list[str]]:
    """`rows` (the header first) as one or more aligned tables whose lines are at most `width` characters:
    the columns empty in every row but the header left out, the first column's cells cut to NAME_WIDTH,
    and the other columns, in their order, shared out among as few tables as fit, each table repeating the
    first column. `width` 0 or None: one table, every column, whole (what the CSV files hold)."""
    if not rows:
        return []
    if not width:
        return [aligned(rows, right)]
    keep = [0, *(i for i in range(1, len(rows[0])) if any(row[i] for row in rows[1:]))]
    rows = [[cut(row[0], NAME_WIDTH), *(row[i] for i in keep[1:])] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    groups = _packed(widths, width)
    # As many tables, as even as they come: the narrowest width that needs no more of them.
    for narrower in range(widths[0] + 2 + max(widths[1:], default=0), width):
        if len(even := _packed(widths, narrower)) == len(groups):
            groups = even
            break
    return [aligned([[row[0], *(row[i] for i in group)] for row in rows], right) for group in groups]


def _packed(widths: Sequence[int], width: int) -> list[list[int]]:
    """The columns after the first, in order, in groups whose line (the first column, two spaces, each of the
    group's columns) is at most `width`; a column wider than that alone in its group."""
    groups: list[list[int]] = [[]]
    used = widths[0]
    for i in range(1, len(widths)):
        if groups[-1] and used + 2 + widths[i] > width:
            groups.append([])
            used = widths[0]
        groups[-1].append(i)
        used += 2 + widths[i]
    return groups


def fitted_lines(rows: Sequence[Sequence[str]], width: int | None, right: bool = True) -> list[str]:
    """`fitted`'s tables as lines, a blank line between two tables."""
    lines: list[str] = []
    for table in fitted(rows, width, right):
        lines += [*([""] if lines else []), *table]
    return lines
