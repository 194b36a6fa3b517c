"""The options page's tables, made from the option registry (`poolbench_locust.options.ALL_OPTIONS`)
so that the page cannot drift from the code."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from poolbench_locust.options import ALL_OPTIONS

MARKER = "<!-- options-table -->"


def all_options() -> list[Any]:
    """Every option of the plugin, as the registry declares it."""
    return list(ALL_OPTIONS)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _default(opt: Any) -> str:
    if opt.is_flag:
        return "off"
    if opt.default is None or opt.default == "":
        return "none"
    value = opt.default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


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
    """The options page with its marker replaced by the tables; an error if the marker is gone."""
    if MARKER not in markdown:
        raise ValueError(f"docs/options.md has lost its {MARKER} line")
    return markdown.replace(MARKER, tables(all_options()))
