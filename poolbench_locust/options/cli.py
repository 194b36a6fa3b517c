"""The registry on Locust's parser, as locust-plugins adds its options: each in its --help group, with its
`LOCUST_*` env var, shown in the web UI's form (a secret one as a secret field) unless it says not."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from poolbench_locust.options.registry import ALL_OPTIONS, GROUPS, Option

HELP_TITLE = "poolbench-locust"


def _show_in_web_ui(action: Any, opt: Option) -> Any:
    # LocustArgumentParser.add_argument sets these, but an argument group's add_argument does not
    # pass them on; setting them on the action is what Locust reads.
    action.include_in_web_ui = opt.web_ui
    action.is_secret = opt.secret
    action.is_required = False
    action.is_multiple = False
    return action


def shown_default(opt: Option) -> str:
    """An option's default as --help, the web form and docs/options.md say it: `off` for a flag, `not set`
    where there is none (the option then does nothing unless given), a whole float without its `.0`."""
    if opt.is_flag:
        return "off"
    if opt.default is None or opt.default == "":
        return "not set"
    value = opt.default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def help_text(opt: Option) -> str:
    """The option's help with its default, as `--help` shows it (argparse formats help with %: escaped)."""
    return f"{opt.help} Default: {shown_default(opt)}.".replace("%", "%%")


def _checked_text(parse: Callable[[str], Any]) -> Callable[[str], str]:
    """For argparse: check the value at start, keep it as text. The master sends parsed_options to its
    workers with msgpack, which knows no Span; Settings.from_options parses the text again."""

    def check(text: str) -> str:
        parse(text)
        return text

    return check


def register(parser: Any, title: str, options: Iterable[Option]) -> None:
    """Add options to Locust's parser in one --help group."""
    group = parser.add_argument_group(title)
    for opt in options:
        if opt.is_flag:
            action = group.add_argument(
                opt.flag, action="store_true", default=False, env_var=opt.env_var, help=help_text(opt)
            )
            _show_in_web_ui(action, opt)
            continue
        checked = _checked_text(opt.parse) if opt.parse is not None else None
        # A default kept as text too: the web UI's /swarm casts a typed value to the type of the
        # current one, and int("1:16") for --batch-size was an HTTP 500 instead of a run.
        default = str(opt.default) if opt.default is not None and opt.parse is not None else opt.default
        choices, metavar = opt.choices, None
        if choices is not None and opt.default is None:
            # The web form selects a field's first choice when it has no default: --truncate was sent as "end"
            # by every run started from the form. An empty first choice is "not given" (Option.value), the text
            # still refused on the command line by the option's parser.
            choices, metavar = ("", *choices), "{" + ",".join(choices) + "}"
        action = group.add_argument(
            opt.flag,
            type=checked,
            default=default,
            env_var=opt.env_var,
            help=help_text(opt),
            choices=choices,
            metavar=metavar,
        )
        _show_in_web_ui(action, opt)


def add_arguments(parser: Any) -> None:
    """Every option of the registry on Locust's parser: the one call, from an init_command_line_parser
    listener."""
    for title in GROUPS:
        register(parser, f"{HELP_TITLE} {title.lower()}", (opt for opt in ALL_OPTIONS if opt.group == title))
