"""Command-line options of poolbench-locust, registered the way locust-plugins does it.

Every option has a `LOCUST_*` environment variable and shows in Locust's web UI (the API key as
a secret field). Values may come back from the web UI as strings, so `Settings.from_options`
parses every value again with the same parsers argparse uses: one rule per option, one place.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
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


@dataclass(frozen=True, slots=True)
class Span:
    """A whole number, fixed (`8`) or drawn uniformly from a range (`4:16`) for each request."""

    lo: int
    hi: int

    def draw(self, rng: random.Random) -> int:
        return self.lo if self.lo == self.hi else rng.randint(self.lo, self.hi)

    def __str__(self) -> str:
        return str(self.lo) if self.lo == self.hi else f"{self.lo}:{self.hi}"


def span(minimum: int) -> Callable[[str], Span]:
    one = whole(minimum)

    def parse(text: str) -> Span:
        lo, _, hi = str(text).partition(":")
        low = one(lo)
        high = one(hi) if hi else low
        if high < low:
            raise argparse.ArgumentTypeError(f"range must be LOW:HIGH with LOW <= HIGH, got {text!r}")
        return Span(low, high)

    return parse


def _rates(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be numbers separated by commas, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"must be numbers > 0 separated by commas, got {text!r}")
    return values


def _counts(text: str) -> tuple[int, ...]:
    one = whole(1)
    return tuple(one(v) for v in text.split(",") if v.strip()) or (one(text),)


DATASET_FORMS = ("file:", "trace:", "hf:")


def _dataset(text: str) -> str:
    if text != "random" and not any(text.startswith(form) and len(text) > len(form) for form in DATASET_FORMS):
        raise argparse.ArgumentTypeError(
            f"must be 'random', 'file:PATH', 'trace:FILE.jsonl' or 'hf:NAME[:SPLIT]', got {text!r}"
        )
    return text


def non_negative(text: str) -> float:
    try:
        value = float(text.removesuffix("s"))
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {value}")
    return value


def positive(text: str) -> float:
    value = non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


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
    Option("--batch-size", span(1), 1, "Inputs per request: N, or LOW:HIGH drawn per request."),
    Option(
        "--input-len",
        span(1),
        128,
        "Length of each random input: tokens with --tokenizer, else words. N, or LOW:HIGH drawn per input.",
    ),
    Option("--input-len-range", span(1), None, "LOW:HIGH: draw each random input's length uniformly (overrides N)."),
    Option("--documents", span(1), 8, "Documents per query for rerank and score: N, or LOW:HIGH."),
    Option(
        "--dataset",
        _dataset,
        "random",
        "random; file:PATH of .txt (a line an input), .jsonl (text; query+documents; messages), .csv, "
        ".parquet or a datasets save_to_disk directory; hf:NAME[:SPLIT] from the local Hugging Face cache; "
        "or trace:FILE.jsonl, timestamped requests replayed at their times (docs/traces.md).",
    ),
    Option("--seed", whole(0), 0, "Seed of the random inputs and batch shapes: the same seed sends the same requests."),
    Option("--tokenizer", str, None, "Path of a local tokenizer.json: exact client-side token counts and lengths."),
    Option("--request-rate", positive, None, "Open loop: requests/s of the whole run (all workers together)."),
    Option("--burstiness", positive, 1.0, "Gamma shape of the arrivals: 1 is Poisson, < 1 burstier, > 1 steadier."),
    Option("--max-concurrency", whole(1), None, "Open loop: requests in flight at most (the whole run)."),
    Option("--warmup", non_negative, 0.0, "Seconds from the start whose requests are sent but counted nowhere."),
    Option("--sweep-rates", _rates, None, "Sweep: open-loop request rates, one step each (e.g. 10,20,40)."),
    Option("--sweep-users", _counts, None, "Sweep: concurrency levels (users), one step each (e.g. 8,16,32)."),
    Option("--sweep-step-time", positive, 30.0, "Seconds per sweep step."),
    Option(
        "--api-key",
        str,
        None,
        "Sent as 'Authorization: Bearer' ($OPENAI_API_KEY only with --api-key-from-env).",
        secret=True,
    ),
    Option("--request-timeout", seconds, 60.0, "Whole-request deadline in seconds, headers and body together."),
    Option("--endpoint-path", _path, None, "Override the route of the User class (e.g. /v2/rerank)."),
)
FLAGS: tuple[tuple[str, str], ...] = (
    ("--no-validate", "Do not check the answers (counts of embeddings, byte sizes)."),
    ("--check-vectors", "Check that the first vector of every answer is finite and not all zero."),
    ("--count-tokens-with-server", "Count client-side tokens with the server's /tokenize route, before the test."),
)


def _show_in_web_ui(action: Any, secret: bool = False) -> Any:
    # LocustArgumentParser.add_argument sets these, but an argument group's add_argument does not
    # pass them on; setting them on the action is what Locust reads.
    action.include_in_web_ui = True
    action.is_secret = secret
    action.is_required = False
    action.is_multiple = False
    return action


def _checked_text(parse: Callable[[str], Any]) -> Callable[[str], str]:
    """For argparse: check the value at start, keep it as text. The master sends parsed_options to its
    workers with msgpack, which knows no Span; Settings.from_options parses the text again."""

    def check(text: str) -> str:
        parse(text)
        return text

    return check


def register(parser: Any, title: str, options: tuple[Option, ...], flags: tuple[tuple[str, str], ...] = ()) -> None:
    """Add options to Locust's parser in their own --help group, each shown in the web UI."""
    group = parser.add_argument_group(title)
    for opt in options:
        checked = _checked_text(opt.parse) if opt.parse is not None else None
        # A default kept as text too: the web UI's /swarm casts a typed value to the type of the
        # current one, and int("1:16") for --batch-size was an HTTP 500 instead of a run.
        default = str(opt.default) if opt.default is not None and opt.parse is not None else opt.default
        action = group.add_argument(
            opt.flag, type=checked, default=default, env_var=opt.env_var, help=opt.help, choices=opt.choices
        )
        _show_in_web_ui(action, opt.secret)
    for flag, help_text in flags:
        env_var = "LOCUST_" + flag.lstrip("-").replace("-", "_").upper()
        _show_in_web_ui(group.add_argument(flag, action="store_true", default=False, env_var=env_var, help=help_text))


@events.init_command_line_parser.add_listener
def add_arguments(parser: Any) -> None:
    register(parser, "poolbench-locust", OPTIONS, FLAGS)


def parsed(options: argparse.Namespace | None, opt: Option) -> Any:
    """One option's value from Locust's options (command line, env, or a web UI string), parsed again;
    OptionError on a bad value."""
    raw = getattr(options, opt.dest, opt.default) if options is not None else opt.default
    if raw == "" and opt.default is None:
        raw = None
    if raw is not None and opt.parse is not None:
        try:
            raw = opt.parse(str(raw))
        except argparse.ArgumentTypeError as e:
            raise OptionError(opt.flag, str(e)) from None
    return raw


@dataclass(frozen=True)
class Settings:
    """The options one User class runs with, parsed and checked once."""

    model: str = ""
    encoding_format: str = "float"
    embed_dtype: str = "float32"
    endianness: str = "native"
    dimensions: int | None = None
    batch_size: Span = Span(1, 1)
    input_len: Span = Span(128, 128)
    input_len_range: Span | None = None
    documents: Span = Span(8, 8)
    dataset: str = "random"
    seed: int = 0
    tokenizer: str | None = None
    request_rate: float | None = None
    burstiness: float = 1.0
    max_concurrency: int | None = None
    warmup: float = 0.0
    sweep_rates: tuple[float, ...] | None = None
    sweep_users: tuple[int, ...] | None = None
    sweep_step_time: float = 30.0
    api_key: str | None = field(default=None, repr=False)
    request_timeout: float = 60.0
    endpoint_path: str | None = None
    validate: bool = True
    check_vectors: bool = False
    count_tokens_with_server: bool = False

    @classmethod
    def from_options(cls, options: argparse.Namespace | None) -> Settings:
        """Parse Locust's options (command line, env, or web UI strings); raise OptionError on a bad value."""
        values: dict[str, Any] = {opt.dest: parsed(options, opt) for opt in OPTIONS}
        values["validate"] = not bool(getattr(options, "no_validate", False))
        values["check_vectors"] = bool(getattr(options, "check_vectors", False))
        values["count_tokens_with_server"] = bool(getattr(options, "count_tokens_with_server", False))
        if values["input_len_range"] is not None:
            values["input_len"] = values["input_len_range"]
        if values["sweep_rates"] and values["sweep_users"]:
            raise OptionError("--sweep-rates", "choose --sweep-rates or --sweep-users, not both")
        if values["sweep_rates"] and values["request_rate"]:
            raise OptionError("--request-rate", "--sweep-rates sets the rate of each step: leave --request-rate out")
        if values["encoding_format"] == "float":  # JSON numbers have no dtype or byte order to ask for
            for flag, default in (("--embed-dtype", "float32"), ("--endianness", "native")):
                if values[flag[2:].replace("-", "_")] != default:
                    raise OptionError(flag, "applies to base64, bytes and bytes_only; --encoding-format is float")
        if values["dataset"].startswith("trace:"):  # a trace says when each request leaves
            for flag in ("--request-rate", "--sweep-rates", "--sweep-users"):
                if values[flag[2:].replace("-", "_")]:
                    raise OptionError(flag, "a trace (--dataset trace:) sets every request's time: leave it out")
        if values["max_concurrency"] and not (
            values["request_rate"] or values["sweep_rates"] or values["dataset"].startswith("trace:")
        ):
            raise OptionError(
                "--max-concurrency", "caps an open-loop run: give --request-rate, --sweep-rates or a trace"
            )
        return cls(**values)

    @property
    def trace(self) -> str | None:
        """The file of a replayed trace (--dataset trace:FILE), else None."""
        return self.dataset.removeprefix("trace:") if self.dataset.startswith("trace:") else None

    @cached_property  # asked on every request
    def open_loop(self) -> bool:
        return bool(self.request_rate or self.sweep_rates or self.trace)

    @property
    def binary(self) -> bool:
        return self.encoding_format in ("bytes", "bytes_only")
