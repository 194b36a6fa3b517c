"""Every text a server wrote, on its way to a failure row, a log line or a report.

A server's words are untrusted: an error message can be 60 kB, hold ANSI escapes that repaint the
terminal, echo the API key back (`Incorrect API key provided: sk-...`), or differ on every request.
Locust keys its failures table by the message, so unique messages alone grew a client to 699 MB.
Here the text is cleaned once, in this order: secrets redacted (before any cut, so that no part of
a key survives the cut), control characters escaped, length bounded; then the number of distinct
failure rows is bounded, the rest grouped by the message's leading words (status, kind). The bound
counts the rows of the failures table as it stands: when the stats are reset (Locust's *Reset stats*,
the end of --warmup, a new run) the messages seen start again from none, in every process.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner

from poolbench_locust.store import Slot
from poolbench_locust.workload.warmup import warmup_of

MESSAGE_LIMIT = 300
"""Characters of one message shown; the rest is cut and marked."""
DISTINCT_MESSAGES = 100
"""Distinct failure messages one process reports as they are; later new ones are grouped."""
DISTINCT_GROUPS = 20
"""Groups (leading words such as `HTTP 500`) the grouped messages may form; past them, one row."""
GROUP_LIMIT = 60
REDACTED = "***"
_CUT = "..."
_MIN_SECRET = 4
"""A secret shorter than this is not replaced: redacting `a` would blank every message."""


def _escaped(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def redact(text: str, secrets: Iterable[str | None]) -> str:
    for secret in secrets:
        if secret and len(secret) >= _MIN_SECRET:
            text = text.replace(secret, REDACTED)
    return text


def clean(text: str, secrets: Iterable[str | None] = (), limit: int = MESSAGE_LIMIT) -> str:
    """The text as it may be shown anywhere: secrets redacted, control characters escaped, at most ~limit chars."""
    text = redact(text, secrets)
    # Escaping can only lengthen the text: cutting the raw text first keeps a 64 kB message cheap.
    shown = _escaped(text[: limit + 1])
    if len(shown) > limit or len(text) > limit:
        shown = shown[:limit] + _CUT
    return shown


class FailureRows:
    """Keeps the distinct failure messages of one process bounded, as Locust's failures table keys by message."""

    def __init__(self, distinct: int = DISTINCT_MESSAGES, groups: int = DISTINCT_GROUPS) -> None:
        self._distinct = distinct
        self._groups = groups
        self._seen: set[str] = set()
        self._grouped: set[str] = set()

    def row(self, message: str) -> str:
        """The failure message to report: itself while there are few, else its group's row."""
        if message in self._seen:
            return message
        if len(self._seen) < self._distinct:
            self._seen.add(message)
            return message
        group = message.split(":", 1)[0][:GROUP_LIMIT]
        if group in self._grouped or len(self._grouped) < self._groups:
            self._grouped.add(group)
            return f"{group}: (messages grouped: more than {self._distinct} distinct failure messages)"
        return f"other failures (more than {self._distinct} distinct failure messages)"

    def clear(self, **_: Any) -> None:
        """The failures table was emptied: the messages seen so far are in no row any more."""
        self._seen.clear()
        self._grouped.clear()


_ROWS = Slot("failure_rows", FailureRows)
"""The bounded failure rows of a Locust process: they outlive a run, and are emptied with the stats."""


def failure_rows(owner: object) -> FailureRows:
    """The FailureRows of an environment (one per Locust process), made on first use."""
    return _ROWS.of(owner)


CLEAR_MESSAGE = "poolbench_clear_failure_rows"
"""The master's word to its workers that the stats were reset: Locust's *Reset stats* button resets
the master's stats only, while the failure messages are seen and counted on the workers."""


def _clear_with_the_stats(environment: Environment, runner: Any = None, **_: Any) -> None:
    rows = failure_rows(environment)
    environment.events.reset_stats.add_listener(rows.clear)  # *Reset stats*, and the end of --warmup
    environment.events.test_start.add_listener(rows.clear)  # a new run starts from zero, as Locust's stats do
    if isinstance(runner, WorkerRunner):
        runner.register_message(CLEAR_MESSAGE, rows.clear)
    elif isinstance(runner, MasterRunner):

        @environment.events.reset_stats.add_listener
        def clear_the_workers_rows(**_: Any) -> None:
            # At the end of --warmup each worker clears its own rows as it resets (workload.warmup's
            # message): a second clear would let a worker show more than its bound of messages.
            if warmup_of(environment).counting:
                runner.send_message(CLEAR_MESSAGE)


def setup(events: Events) -> None:
    events.init.add_listener(_clear_with_the_stats)
