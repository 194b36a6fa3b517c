"""The web UI's secret fields (the registry's `secret` options, such as --api-key): never in the page.

Locust puts the value of every web-UI option in its page, as the form's default, secret ones too
(locust.argument_parser.ui_extra_args_dict: only the input box is masked). The page gets a placeholder
instead; a form sent back with it keeps the value the run started with.
"""

from __future__ import annotations

from typing import Any

from locust.env import Environment

from poolbench_locust.options import ALL_OPTIONS

SECRET_DESTS = frozenset(opt.dest for opt in ALL_OPTIONS if opt.secret)
PLACEHOLDER = "(unchanged)"
"""What the web UI's form shows in a secret field that has a value; sent back, it keeps that value."""


def kept(environment: Environment) -> dict[str, str]:
    """The secrets the run goes with, by dest: the ones it started with, or typed into the form since."""
    return getattr(environment, "poolbench_secrets", {})


def keep_out_of_the_page(environment: Environment, web_ui: Any) -> None:
    """Put the placeholder in the page where Locust would put a secret's value, and keep the value."""
    options = environment.parsed_options
    environment.poolbench_secrets = {  # type: ignore[attr-defined]
        dest: value for dest in SECRET_DESTS if (value := getattr(options, dest, None))
    }
    update = web_ui.update_template_args

    def update_without_secrets() -> None:
        update()
        for dest, option in (web_ui.template_args.get("extra_options") or {}).items():
            if dest in SECRET_DESTS and option.get("default_value"):
                option["default_value"] = PLACEHOLDER

    web_ui.update_template_args = update_without_secrets
    update_without_secrets()  # the page args Locust already built hold the values too


def form_value(environment: Environment, dest: str, value: str) -> str:
    """What a form's field means: the value kept for a secret sent back with its placeholder."""
    if dest in SECRET_DESTS and value == PLACEHOLDER:
        return kept(environment).get(dest, "")
    return value


def restore(environment: Environment) -> None:
    """The web UI's form sent its fields into parsed_options: a placeholder means "unchanged"."""
    secrets = kept(environment)
    for dest in SECRET_DESTS:
        value = getattr(environment.parsed_options, dest, None)
        if value == PLACEHOLDER and dest in secrets:
            setattr(environment.parsed_options, dest, secrets[dest])
        elif value:
            secrets[dest] = value  # a new value typed into the form is the one to keep from now on
