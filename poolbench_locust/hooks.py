"""The web UI's secret options: kept out of its page, and restored when its form sends the placeholder back."""

from __future__ import annotations

from typing import Any

from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner

from poolbench_locust.options import OPTIONS

SECRET_DESTS = frozenset(opt.dest for opt in OPTIONS if opt.secret)
SECRET_PLACEHOLDER = "(unchanged)"
"""What the web UI's form shows in a secret field that has a value; sent back, it keeps that value."""


def _keep_secrets_out_of_the_page(environment: Environment, web_ui: Any) -> None:
    """Locust puts the value of every web-UI option in its page, as the form's default, secret ones
    too (locust.argument_parser.ui_extra_args_dict: only the input box is masked). The page gets a
    placeholder instead; a form sent back with it keeps the value the run started with."""
    options = environment.parsed_options
    environment.poolbench_secrets = {  # type: ignore[attr-defined]
        dest: value for dest in SECRET_DESTS if (value := getattr(options, dest, None))
    }
    update = web_ui.update_template_args

    def update_without_secrets() -> None:
        update()
        for dest, option in (web_ui.template_args.get("extra_options") or {}).items():
            if dest in SECRET_DESTS and option.get("default_value"):
                option["default_value"] = SECRET_PLACEHOLDER

    web_ui.update_template_args = update_without_secrets
    update_without_secrets()  # the page args Locust already built hold the values too


def _restore_secrets(environment: Environment) -> None:
    """The web UI's form sent its fields into parsed_options: a placeholder means "unchanged"."""
    secrets: dict[str, str] = getattr(environment, "poolbench_secrets", {})
    for dest in SECRET_DESTS:
        value = getattr(environment.parsed_options, dest, None)
        if value == SECRET_PLACEHOLDER and dest in secrets:
            setattr(environment.parsed_options, dest, secrets[dest])
        elif value:
            secrets[dest] = value  # a new value typed into the form is the one to keep from now on


def on_init(environment: Environment, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
    if web_ui is not None and not isinstance(runner, WorkerRunner):
        _keep_secrets_out_of_the_page(environment, web_ui)


def on_test_start(environment: Environment, **_: Any) -> None:
    if not isinstance(environment.runner, WorkerRunner):
        _restore_secrets(environment)


def setup(events: Events) -> None:
    """Before the start checks: they check the values the form's placeholders stand for."""
    events.init.add_listener(on_init)
    events.test_start.add_listener(on_test_start)
