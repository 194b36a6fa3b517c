"""The web UI's form: a bad value typed into it is refused before the run starts, with its one line
shown in the form (Locust's /swarm answer `{"success": false, "message": ...}`) and logged once.

Without this, Locust starts the run, the check at test_start stops it again with 0 requests, and its
reason is only in the Logs tab; a value Locust cannot convert to the default's type (text in a
number field) made /swarm fail with a traceback of its own.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from flask import Response, jsonify, request
from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner

from poolbench_locust.host_probe import host_error, probed
from poolbench_locust.options import ALL_OPTIONS
from poolbench_locust.start_checks import configuration_error
from poolbench_locust.webform import secrets

logger = logging.getLogger("poolbench_locust")

FORM_OPTIONS = {opt.dest: opt for opt in ALL_OPTIONS if opt.web_ui}


def form_options(environment: Environment, form: Any) -> argparse.Namespace:
    """The options as they will be once Locust has copied the form into them (web.py's /swarm: a
    flag's field is "true" or "false", every other field its text)."""
    options = argparse.Namespace(**vars(environment.parsed_options or argparse.Namespace()))
    for key, value in form.items():
        if (opt := FORM_OPTIONS.get(key)) is not None:
            setattr(options, key, value == "true" if opt.is_flag else value)
    return options


def form_error(environment: Environment, form: Any) -> str | None:
    """Why the run the form asks for cannot start, or None: the checks a run makes at start
    (start_checks.configuration_error: every option of the registry parsed and checked together with every
    rule between them, as Settings; each User class's plan with its access and limits), then the host."""
    options = form_options(environment, form)
    host = str(form.get("host") or environment.host or "")
    options.host = host  # --count-tokens-with-server asks this host's /tokenize while it plans
    if (error := configuration_error(environment, options)) is not None:
        return error
    if host and host != probed(environment).host:
        return host_error(host)
    return None


def install(environment: Environment, web_ui: Any) -> None:
    @web_ui.app.before_request
    def refuse_a_bad_form() -> Response | None:
        if request.method != "POST" or not request.path.endswith("/swarm"):
            return None
        if (error := form_error(environment, request.form)) is None:
            return None
        logger.error("%s", error)
        return jsonify({"success": False, "message": error, "host": environment.host})


def _on_init(environment: Environment, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
    if web_ui is not None and not isinstance(runner, WorkerRunner):
        secrets.install(environment, web_ui)  # first: the form's checks read it with the secrets put back
        install(environment, web_ui)


def setup(events: Events) -> None:
    events.init.add_listener(_on_init)
