"""The one way a table is aligned as text: the console summaries, the Client load and server tables,
poolbench-compare."""

from __future__ import annotations

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
