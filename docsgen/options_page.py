"""The options page's tables, made from the option registry (`poolbench_locust.options.ALL_OPTIONS`) and
written into docs/options.md itself, between its two marker lines, so that they read on GitHub as in the
site; tests/test_docs.py fails when the file's tables are not what the registry makes.

    python -m docsgen.options_page     # rewrites the tables in docs/options.md
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from poolbench_locust.options import ALL_OPTIONS
from poolbench_locust.options.cli import shown_default

MARKER = "<!-- options-table -->"
END_MARKER = "<!-- end of options-table: made by `python -m docsgen.options_page` from the registry -->"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "options.md"


def all_options() -> list[Any]:
    """Every option of the plugin, as the registry declares it."""
    return list(ALL_OPTIONS)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _default(opt: Any) -> str:
    shown = shown_default(opt)
    return shown if opt.is_flag or opt.default is None or opt.default == "" else f"`{shown}`"


def _help(opt: Any) -> str:
    text = opt.help
    if opt.choices:
        text += " One of " + ", ".join(f"`{c}`" for c in opt.choices) + "."
    if opt.secret:
        text += " A secret field in the web UI; never logged or written to a file."
    return _cell(text)


def tables(opts: Iterable[Any]) -> str:
    """Markdown: one table per web-form group, in the registry's order."""
    by_group: dict[str, list[Any]] = {}
    for opt in opts:
        by_group.setdefault(opt.group, []).append(opt)
    out = []
    for group, members in by_group.items():
        out += [f"### {group}\n", "| option | env var | default | web form label | meaning |", "|---|---|---|---|---|"]
        for opt in members:
            label = _cell(opt.label) if getattr(opt, "web_ui", True) else "*command line only*"
            out.append(f"| `{opt.flag}` | `{opt.env_var}` | {_default(opt)} | {label} | {_help(opt)} |")
        out.append("")
    return "\n".join(out)


def render(markdown: str) -> str:
    """The options page with the tables between its two markers made again from the registry; an error if
    a marker is gone."""
    for marker in (MARKER, END_MARKER):
        if marker not in markdown:
            raise ValueError(f"docs/options.md has lost its {marker} line")
    before, rest = markdown.split(MARKER, 1)
    after = rest.split(END_MARKER, 1)[1]
    return f"{before}{MARKER}\n\n{tables(all_options())}\n{END_MARKER}{after}"


def main() -> None:
    PAGE.write_text(render(PAGE.read_text(encoding="utf-8")), encoding="utf-8")


if __name__ == "__main__":
    main()
