"""The web UI's secret fields (the registry's `secret` options, such as --api-key): never in the page.

Locust puts the value of every web-UI option in its page, as the form's default, secret ones too
(locust.argument_parser.ui_extra_args_dict: only the input box is masked). The page gets a placeholder
instead; a form sent back with it keeps the value the run goes with: the placeholder is swapped for
that value before Locust (or the form's checks) read the form, so no option ever holds it.
"""

from __future__ import annotations

from typing import Any

from flask import request
from locust.env import Environment
from werkzeug.datastructures import ImmutableMultiDict

from poolbench_locust.options import ALL_OPTIONS

SECRET_DESTS = frozenset(opt.dest for opt in ALL_OPTIONS if opt.secret)
PLACEHOLDER = "(unchanged)"
"""What the web UI's form shows in a secret field that has a value; sent back, it keeps that value."""


def kept(environment: Environment) -> dict[str, str]:
    """The secrets the run goes with, by dest: the ones it started with, or the last run's from the form."""
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
    """A run starts with the options the form set: a secret typed into it is the one to keep from now on."""
    secrets = kept(environment)
    for dest in SECRET_DESTS:
        if value := getattr(environment.parsed_options, dest, None):
            secrets[dest] = value


def install(environment: Environment, web_ui: Any) -> None:
    """Keep the secrets out of the page, and put them back into the forms sent with their placeholder."""
    keep_out_of_the_page(environment, web_ui)
    environment.events.test_start.add_listener(lambda **_: restore(environment))

    @web_ui.app.before_request
    def put_the_kept_secrets_back() -> None:
        if request.method != "POST" or not request.path.endswith("/swarm"):
            return
        if any(request.form.get(dest) == PLACEHOLDER for dest in SECRET_DESTS):
            fields = [(key, form_value(environment, key, value)) for key, value in request.form.items(multi=True)]
            request.form = ImmutableMultiDict(fields)
