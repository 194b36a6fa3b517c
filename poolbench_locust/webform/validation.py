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
from locust import events
from locust.env import Environment
from locust.runners import WorkerRunner

from poolbench_locust.engine.limits import LIMITS
from poolbench_locust.hooks import SECRET_PLACEHOLDER, configuration_error, host_error
from poolbench_locust.options import FLAGS, OPTIONS
from poolbench_locust.workload.source_options import SOURCE_OPTIONS

logger = logging.getLogger("poolbench_locust")

FORM_FIELDS = frozenset(opt.dest for opt in (*OPTIONS, *LIMITS, *SOURCE_OPTIONS))
FORM_FLAGS = frozenset(flag.lstrip("-").replace("-", "_") for flag, _ in FLAGS)


def form_error(environment: Environment, form: Any) -> str | None:
    """Why the run the form asks for cannot start, or None: the options as they will be once Locust
    has copied the form into them, checked like the command line's."""
    options = argparse.Namespace(**vars(environment.parsed_options or argparse.Namespace()))
    secrets: dict[str, str] = getattr(environment, "poolbench_secrets", {})
    for key, value in form.items():
        if key in FORM_FLAGS:
            setattr(options, key, value == "true")
        elif key in FORM_FIELDS:
            setattr(options, key, secrets.get(key, "") if value == SECRET_PLACEHOLDER else value)
    host = str(form.get("host") or environment.host or "")
    options.host = host  # --count-tokens-with-server asks this host's /tokenize while it plans
    if (error := configuration_error(environment, options)) is not None:
        return error
    if host and host != getattr(environment, "poolbench_checked_host", None):
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


@events.init.add_listener
def _on_init(environment: Environment, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
    if web_ui is not None and not isinstance(runner, WorkerRunner):
        install(environment, web_ui)
