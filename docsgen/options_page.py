"""The options page's tables, made from the option declarations so that the page cannot drift.

The option registry (issue 21: `poolbench_locust.options.ALL_OPTIONS`) is the source. Until it lands,
`_declared_today` builds the same view from today's declarations: the `Option` tuples that each room
registers, and the web form's groups and labels.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MARKER = "<!-- options-table -->"
NO_GROUP = "Command line only"


@dataclass(frozen=True)
class OptionView:
    """The registry's contract: what the page shows of one option."""

    flag: str
    dest: str
    env_var: str
    default: Any
    group: str
    label: str
    help: str
    secret: bool
    is_flag: bool
    choices: tuple[str, ...] | None


def _declared_today() -> list[OptionView]:
    from poolbench_locust import access, options, preflight
    from poolbench_locust.engine import limits
    from poolbench_locust.metrics import checks, goodput
    from poolbench_locust.results import writer
    from poolbench_locust.servermetrics import wiring
    from poolbench_locust.webform.layout import GROUPS

    where = {flag: (title, label) for title, fields in GROUPS for flag, label in fields}
    valued = (
        *options.OPTIONS,
        *access.OPTIONS,
        *limits.LIMITS,
        *goodput.OPTIONS,
        *checks.CHECKS,
        *wiring.OPTIONS,
        *writer.OPTIONS,
    )
    flags = (*options.FLAGS, *access.FLAGS, *preflight.FLAGS)
    views = []
    for opt in valued:
        group, label = where.get(opt.flag, (NO_GROUP, opt.flag))
        views.append(
            OptionView(
                opt.flag, opt.dest, opt.env_var, opt.default, group, label, opt.help, opt.secret, False, opt.choices
            )
        )
    for flag, help_text in flags:
        dest = flag.lstrip("-").replace("-", "_")
        group, label = where.get(flag, (NO_GROUP, flag))
        views.append(
            OptionView(flag, dest, "LOCUST_" + dest.upper(), False, group, label, help_text, False, True, None)
        )
    return views


def all_options() -> list[Any]:
    """Every option of the plugin, from the registry when it is there."""
    from poolbench_locust import options

    registry = getattr(options, "ALL_OPTIONS", None)
    return list(registry) if registry is not None else _declared_today()


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
    """Markdown: one table per web-form group, in the form's order; options outside the form last."""
    by_group: dict[str, list[Any]] = {}
    for opt in opts:
        by_group.setdefault(opt.group or NO_GROUP, []).append(opt)
    order = sorted(by_group, key=lambda g: (g == NO_GROUP, list(by_group).index(g)))
    out = []
    for group in order:
        out.append(f"### {group}\n")
        if group == NO_GROUP:
            out.append("On the command line or in the environment only: not in the web UI's form.\n")
        out.append("| option | env var | default | web form label | meaning |")
        out.append("|---|---|---|---|---|")
        for opt in by_group[group]:
            label = "" if opt.label == opt.flag else _cell(opt.label)
            out.append(f"| `{opt.flag}` | `{opt.env_var}` | {_default(opt)} | {label} | {_help(opt)} |")
        out.append("")
    return "\n".join(out)


def render(markdown: str) -> str:
    """The options page with its marker replaced by the tables; an error if the marker is gone."""
    if MARKER not in markdown:
        raise ValueError(f"docs/options.md has lost its {MARKER} line")
    return markdown.replace(MARKER, tables(all_options()))
