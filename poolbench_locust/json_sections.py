"""What poolbench-locust's rooms add to the JSON result (--json-result): their keys of the document and
their parts of its schema.

The JSON result (results/document.py) holds the run, its options, the pooling table and Locust's tables
itself; every other figure is pushed by the room that has it, as the rooms push their sections of the HTML
report (locust_pages). A room adds to the document by listening to the one event of `result_events`, as
to Locust's own events (locust.event.EventHook):

- `json_sections(sections)` is fired once for each document built (when the run quits) and once each time
  the whole schema is composed (results/schema.py). Each listener appends its `JsonSection`: its place in
  the document (`order`), its part of the schema (the `properties` of its keys, the ones `required`, any
  `$defs`), and `fields(environment)`, its keys and their values for a run. The keys go into the document
  in the order of their `order`, after its own and before vLLM's names for the run's total; a key a later
  section gives again keeps its place and takes the later value.

Every value is made of JSON types by `json_safe` before it goes into the document.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from locust.env import Environment
from locust.event import EventHook

SERIES_JSON = 10
HISTORY_JSON = 20
SWEEP_JSON = 30
CAPACITY_JSON = 40
SERVER_METRICS_JSON = 50
CLIENT_LOAD_JSON = 60
INPUTS_JSON = 62
REPEATS_JSON = 70
REPEATED_SEARCHES_JSON = 80
"""Where each room's keys go in the JSON result, in one place: the blocks' width, the history, the sweep,
the capacity search, the server's metrics, the client load, the inputs sent, the repeats, then a repeated
capacity search's figures in the repeats' keys."""
MAX_TEXT = 1000
"""Longest string kept from a failure message or an option value (they may quote a server)."""


@dataclass(frozen=True)
class JsonSection:
    order: int
    fields: Callable[[Environment], Mapping[str, Any]]
    """The section's keys and their values for the run: JSON types, or what json_safe makes them."""
    properties: Mapping[str, Any] = field(default_factory=dict)
    """The schema of each of its keys (JSON Schema, Draft 2020-12), by key."""
    required: tuple[str, ...] = ()
    """The keys every document has."""
    defs: Mapping[str, Any] = field(default_factory=dict)
    """The schema's `$defs` its properties refer to (`#/$defs/<name>`), by name."""


class ResultEvents:
    json_sections: EventHook

    def __init__(self) -> None:
        self.json_sections = EventHook()


result_events = ResultEvents()


def json_sections(events: ResultEvents = result_events) -> list[JsonSection]:
    """Every room's section, in the order of their `order`."""
    sections: list[JsonSection] = []
    events.json_sections.fire(sections=sections)
    return sorted(sections, key=lambda s: s.order)


def _text(value: str) -> str:
    return value if len(value) <= MAX_TEXT else value[:MAX_TEXT] + "…"


def json_safe(value: Any, depth: int = 0) -> Any:
    """A copy of `value` made of JSON types only: finite numbers, bounded strings, lists and objects."""
    if depth > 20:
        return None
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, Mapping):
        return {_text(str(k)): json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(v, depth + 1) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_safe(dataclasses.asdict(value), depth + 1)
    return _text(str(value))
