"""The options of the input sources beyond --dataset itself: which column of a table holds the texts,
and how fast a trace is replayed. Declared here once, read through `SourceOptions.from_options`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from locust import events

from poolbench_locust.options import Option, parsed, positive, register

SOURCE_OPTIONS = (
    Option(
        "--dataset-column",
        str,
        None,
        "Column of a Parquet file or Hugging Face dataset that holds the texts (default: text; "
        "rerank/score read query and documents).",
    ),
    Option(
        "--trace-speed",
        positive,
        1.0,
        "Replay a trace (--dataset trace:) this many times faster: 2 sends it in half its time.",
    ),
)


@events.init_command_line_parser.add_listener
def add_arguments(parser: Any) -> None:
    register(parser, "poolbench-locust inputs", SOURCE_OPTIONS)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    dataset_column: str | None = None
    trace_speed: float = 1.0

    @classmethod
    def from_options(cls, options: Any) -> SourceOptions:
        """Parse the options (command line, env or web UI strings); raise OptionError on a bad value."""
        values = {opt.dest: parsed(options, opt) for opt in SOURCE_OPTIONS}
        return cls(dataset_column=values["dataset_column"] or None, trace_speed=values["trace_speed"])
