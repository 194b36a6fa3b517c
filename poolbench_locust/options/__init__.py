"""Command-line options of poolbench-locust: every one declared once in options/registry.py (read its
docstring to add one), parsed by options/parsers.py, gathered in the typed `Settings` (the one way to read an option:
`settings_of(environment).batch_size`) with every rule between options, put on Locust's parser by
`add_arguments` (options/cli.py)."""

from __future__ import annotations

from poolbench_locust.options.cli import add_arguments, register
from poolbench_locust.options.parsers import (
    OptionError,
    non_negative,
    one_of,
    positive,
    ratio,
    seconds,
    span,
    whole,
)
from poolbench_locust.options.registry import ALL_OPTIONS, BY_FLAG, GROUPS, Option, flag
from poolbench_locust.options.settings import Settings, options_error, settings_of
from poolbench_locust.options.values import SLO_KEYS, ExtraBody, Slo, Span

__all__ = [
    "ALL_OPTIONS",
    "BY_FLAG",
    "GROUPS",
    "SLO_KEYS",
    "ExtraBody",
    "Option",
    "OptionError",
    "Settings",
    "Slo",
    "Span",
    "add_arguments",
    "flag",
    "non_negative",
    "one_of",
    "options_error",
    "positive",
    "ratio",
    "register",
    "seconds",
    "settings_of",
    "span",
    "whole",
]
