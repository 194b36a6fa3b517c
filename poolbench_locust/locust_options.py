"""Locust's own options (-u, -t, --csv, --html, --headless, ...), each read here once with one coercion.

The plugin's own options have Settings (poolbench_locust/options). Locust's are in the same
parsed_options, written by its parser, by the web UI's form before each run (its values as Locust
converts them, or as the form's text where the option had no value), or by a test's Namespace, which
may leave any of them out. Each property below says what an unset value means, so that no caller
guesses again. They are read when asked for: the web form changes them between runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from locust.util.timespan import parse_timespan

T = TypeVar("T")


def _count(unset: int) -> Callable[[Any], int]:
    """A whole number: `unset` for None or an empty text, else the number (an int, or the digits of a text)."""
    return lambda value: unset if value is None or value == "" else int(value)


def _seconds(value: Any) -> float | None:
    """A time span in seconds (a number, or a text as -t takes it: 20, 1m30s); None for unset or 0."""
    if not value:
        return None
    return float(parse_timespan(value) if isinstance(value, str) else value)


def _text(value: Any) -> str | None:
    """A name (a file, a prefix, a URL): None for None or an empty text."""
    return str(value) if value else None


def _base_path(value: Any) -> str:
    """A path prefix without its last slash; "" for none."""
    return str(value or "").rstrip("/")


class _Option(Generic[T]):
    """One of Locust's options, read from the view's parsed_options under its own name, with its coercion."""

    __slots__ = ("coerce", "dest")

    def __init__(self, coerce: Callable[[Any], T]) -> None:
        self.coerce = coerce
        self.dest = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.dest = name

    def __get__(self, view: LocustOptions, owner: type | None = None) -> T:
        return self.coerce(getattr(view._parsed, self.dest, None))


class LocustOptions:
    """A view of one parsed_options (None, or a namespace that lacks some of Locust's options, is all unset)."""

    __slots__ = ("_parsed",)

    def __init__(self, parsed: Any) -> None:
        self._parsed = parsed

    num_users = _Option(_count(0))
    """-u, or the web form's Users: the peak number of users; 0 when not given."""
    run_time = _Option(_seconds)
    """-t, or the web form's run time, in seconds; None when not given (0 too: Locust runs forever then)."""
    host = _Option(_text)
    """--host, or the web form's Host; None when not given."""
    csv_prefix = _Option(_text)
    """--csv: the prefix of the CSV files; None when no CSV file is asked for."""
    stats_history_enabled = _Option(bool)
    """--csv-full-history: every row of the stats in the history, not only the total."""
    html_file = _Option(_text)
    """--html: the report's file; None when no file is asked for."""
    web_base_path = _Option(_base_path)
    """--web-base-path without its last slash: the prefix of every route of the web UI; "" for none."""
    headless = _Option(bool)
    """--headless: no web UI."""
    autostart = _Option(bool)
    """--autostart: a web UI's run starts without its form."""
    processes = _Option(_count(0))
    """--processes: how many worker processes Locust forks (-1: one per core); 0 when it forks none."""
    expect_workers = _Option(_count(1))
    """--expect-workers: how many workers the master waits for; 1 when not given (Locust's default)."""


def locust_options(environment: Any) -> LocustOptions:
    """Locust's own options of the environment, as they are now."""
    return LocustOptions(getattr(environment, "parsed_options", None))
