"""The tables and section headings poolbench-locust adds to Locust's HTML report, styled like the
report's own (Material UI's: Roboto, no vertical rules, a light line under each row, a raised
paper), and never wider than the page: a wide table scrolls sideways inside its box. Plain HTML and one
style element: the report stays one file.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Any

STYLE = """<style>
.poolbench-section{font-family:Roboto,Helvetica,Arial,sans-serif;margin:24px;color:rgba(0,0,0,.87)}
.poolbench-section h2{font-weight:400;font-size:2.125rem;line-height:1.235;margin:32px 0 16px}
.poolbench-section h3{font-weight:400;font-size:1.5rem;line-height:1.334;margin:24px 0 12px}
.poolbench-box{width:fit-content;max-width:100%;overflow-x:auto;border-radius:4px;background:#fff;
box-shadow:0 2px 1px -1px rgba(0,0,0,.2),0 1px 1px 0 rgba(0,0,0,.14),0 1px 3px 0 rgba(0,0,0,.12)}
.poolbench-section>svg{display:block;margin-top:16px}
.poolbench-table{border-collapse:collapse;font-size:.875rem;line-height:1.43}
.poolbench-table th,.poolbench-table td{padding:12px 14px;text-align:left;
border-bottom:1px solid rgba(224,224,224,1);background:#fff}
.poolbench-table th{font-weight:500;min-width:4.5em;vertical-align:bottom}
.poolbench-table tbody tr:last-child td{border-bottom:0}
</style>"""


def _cell(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def table(header: Sequence[str], rows: Iterable[dict[str, Any]]) -> str:
    """A table in a box that scrolls sideways when it is wider than the page."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in header)
    body = "".join("<tr>" + "".join(f"<td>{_cell(r[c])}</td>" for c in header) + "</tr>" for r in rows)
    return (
        f'<div class="poolbench-box"><table class="poolbench-table"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def section(section_id: str, title: str, body: str) -> str:
    """A section of the report: its heading in the report's own style, then the body."""
    return f'{STYLE}<section id="{section_id}" class="poolbench-section"><h2>{html.escape(title)}</h2>{body}</section>'
