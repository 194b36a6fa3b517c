"""Command-line options of poolbench-locust, registered the way locust-plugins does it.

Every option has a `LOCUST_*` environment variable and shows in Locust's web UI (the API key as
a secret field). Values may come back from the web UI as strings, so `Settings.from_options`
parses every value again with the same parsers argparse uses: one rule per option, one place.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from locust import events

from poolbench_locust.wire import DTYPE_SIZES, ENCODINGS, ENDIANNESS


class OptionError(ValueError):
    """A bad option value or combination; its text is the one line the user sees."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option


def whole(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {value}")
        return value

    return parse


def seconds(text: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {value}")
    return value


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"must be one of {', '.join(choices)}; got {text!r}")
        return text

    return parse


def _path(text: str) -> str:
    if not text.startswith("/"):
        raise argparse.ArgumentTypeError(f"must start with '/', got {text!r}")
    return text


@dataclass(frozen=True)
class Option:
    flag: str
    parse: Callable[[str], Any] | None
    default: Any
    help: str
    secret: bool = False
    choices: tuple[str, ...] | None = None

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def env_var(self) -> str:
        return "LOCUST_" + self.dest.upper()


OPTIONS: tuple[Option, ...] = (
    Option("--model", str, "", "Model name sent in every request (empty: the server's default)."),
    Option(
        "--encoding-format",
        _one_of(ENCODINGS),
        "float",
        "How embeddings come back: float (JSON numbers), base64, bytes (binary body + metadata header) "
        "or bytes_only (binary body, no metadata: tokens counted by the client).",
        choices=ENCODINGS,
    ),
    Option(
        "--embed-dtype",
        _one_of(tuple(DTYPE_SIZES)),
        "float32",
        "Element type of base64/bytes embeddings.",
        choices=tuple(DTYPE_SIZES),
    ),
    Option("--endianness", _one_of(ENDIANNESS), "native", "Byte order of base64/bytes embeddings.", choices=ENDIANNESS),
    Option("--dimensions", whole(1), None, "Ask for embeddings of this many dimensions (Matryoshka models)."),
    Option("--batch-size", whole(1), 1, "Inputs per request."),
    Option("--input-len", whole(1), 128, "Words per synthetic input (the client-side token estimate counts words)."),
    Option("--documents", whole(1), 8, "Documents per query for rerank and score."),
    Option("--api-key", str, None, "Sent as 'Authorization: Bearer'. Falls back to $OPENAI_API_KEY.", secret=True),
    Option("--request-timeout", seconds, 60.0, "Whole-request deadline in seconds, headers and body together."),
    Option("--endpoint-path", _path, None, "Override the route of the User class (e.g. /v2/rerank)."),
)
FLAGS: tuple[tuple[str, str], ...] = (
    ("--no-validate", "Do not check the answers (counts of embeddings, byte sizes)."),
    ("--check-vectors", "Check that the first vector of every answer is finite and not all zero."),
)


def _show_in_web_ui(action: Any, secret: bool = False) -> Any:
    # LocustArgumentParser.add_argument sets these, but an argument group's add_argument does not
    # pass them on; setting them on the action is what Locust reads.
    action.include_in_web_ui = True
    action.is_secret = secret
    action.is_required = False
    action.is_multiple = False
    return action


def register(parser: Any, title: str, options: tuple[Option, ...], flags: tuple[tuple[str, str], ...] = ()) -> None:
    """Add options to Locust's parser in their own --help group, each shown in the web UI."""
    group = parser.add_argument_group(title)
    for opt in options:
        action = group.add_argument(
            opt.flag, type=opt.parse, default=opt.default, env_var=opt.env_var, help=opt.help, choices=opt.choices
        )
        _show_in_web_ui(action, opt.secret)
    for flag, help_text in flags:
        env_var = "LOCUST_" + flag.lstrip("-").replace("-", "_").upper()
        _show_in_web_ui(group.add_argument(flag, action="store_true", default=False, env_var=env_var, help=help_text))


@events.init_command_line_parser.add_listener
def add_arguments(parser: Any) -> None:
    register(parser, "poolbench-locust", OPTIONS, FLAGS)


@dataclass(frozen=True)
class Settings:
    """The options one User class runs with, parsed and checked once."""

    model: str = ""
    encoding_format: str = "float"
    embed_dtype: str = "float32"
    endianness: str = "native"
    dimensions: int | None = None
    batch_size: int = 1
    input_len: int = 128
    documents: int = 8
    api_key: str | None = field(default=None, repr=False)
    request_timeout: float = 60.0
    endpoint_path: str | None = None
    validate: bool = True
    check_vectors: bool = False

    @classmethod
    def from_options(cls, options: argparse.Namespace | None) -> Settings:
        """Parse Locust's options (command line, env, or web UI strings); raise OptionError on a bad value."""
        values: dict[str, Any] = {}
        for opt in OPTIONS:
            raw = getattr(options, opt.dest, opt.default) if options is not None else opt.default
            if raw == "" and opt.default is None:
                raw = None
            if raw is not None and opt.parse is not None:
                try:
                    raw = opt.parse(str(raw))
                except argparse.ArgumentTypeError as e:
                    raise OptionError(opt.flag, str(e)) from None
            values[opt.dest] = raw
        values["api_key"] = values["api_key"] or os.environ.get("OPENAI_API_KEY") or None
        values["validate"] = not bool(getattr(options, "no_validate", False))
        values["check_vectors"] = bool(getattr(options, "check_vectors", False))
        return cls(**values)

    @property
    def binary(self) -> bool:
        return self.encoding_format in ("bytes", "bytes_only")
