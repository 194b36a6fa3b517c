"""`Settings`: every option's value, statically typed, parsed and checked together; the one way to read
an option of the plugin. A field per option of the registry (tests/test_options.py fails when a field
and an option part, or when a field's type is not what the option's parser returns).

The rules between options live here too, all of them, in `_refused`: a combination that cannot run
stops the run at start with the option named. A check that needs more than the options (a file, a User
class, the host) is the start checks' (start_checks.configuration_error); a check on measured
figures is metrics/checks.py's."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

from poolbench_locust.options.parsers import HOST_LABELS, OptionError
from poolbench_locust.options.registry import ALL_OPTIONS, BY_FLAG, Option
from poolbench_locust.options.values import ExtraBody, Slo, Span
from poolbench_locust.wire import TOKEN_POOLING_TASKS


def _parsed(options: Any, opt: Option) -> Any:
    """One option's value from Locust's options (command line, env, or a web UI string), parsed again;
    its default when the options do not have it; OptionError on a bad value."""
    raw = getattr(options, opt.dest, opt.default) if options is not None else opt.default
    return opt.value(raw)


_ONE, _128, _EIGHT = Span(1, 1), Span(128, 128), Span(8, 8)
"""Spans are frozen: a default shared by every Settings is safe."""


@dataclass(frozen=True)
class Settings:
    """The options a run goes with, parsed and checked once: one field per option of the registry,
    named by its dest (`--batch-size` -> `batch_size`), its default the option's parsed default."""

    # Request
    model: str = ""
    encoding_format: str = "float"
    embed_dtype: str = "float32"
    endianness: str = "native"
    dimensions: int | None = None
    pooling_task: str | None = None
    late_chunk_size: int | None = None
    embedding_type: str | None = None
    truncate: str | None = None
    input_type: str | None = None
    extra_body: ExtraBody | None = None
    extra_body_overrides: bool = False
    endpoint_path: str | None = None
    infer_input: str | None = None
    infer_output: str | None = None
    api_key: str | None = field(default=None, repr=False)  # a secret: never in a text
    api_key_from_env: bool = False
    api_key_over_http: bool = False
    tls_verify: bool = False
    ca_bundle: str | None = None
    request_timeout: float = 60.0
    max_body_mb: int = 256
    max_header_kb: int = 64
    no_validate: bool = False
    check_vectors: bool = False
    require_server_tokens: bool = False
    no_preflight: bool = False
    consistency_inputs: int = 8
    no_consistency: bool = False
    consistency_rate: float = 0.01
    consistency_reference: str | None = None
    consistency_save: str | None = None
    mock_drift_above: int | None = None
    mock_cache_drift: bool = False
    mock_flip_above: int | None = None
    # Workload
    batch_size: Span = _ONE
    input_len: Span = _128
    input_len_range: Span | None = None
    images: int = 0
    image_size: tuple[int, int] = (512, 512)
    image_format: str = "png"
    image_pool: int = 0
    documents: Span = _EIGHT
    dataset: str = "random"
    dataset_column: str | None = None
    seed: int = 0
    repeat_ratio: float = 0.0
    shared_prefix_tokens: int = 0
    tokenizer: str | None = None
    count_tokens_with_server: bool = False
    warmup: float = 0.0
    repeat: int = 1
    max_requests: int | None = None
    # Open loop
    request_rate: float | None = None
    burstiness: float = 1.0
    max_concurrency: int | None = None
    trace_speed: float = 1.0
    # Sweep
    sweep_rates: tuple[float, ...] | None = None
    sweep_users: tuple[int, ...] | None = None
    sweep_step_time: float = 30.0
    # Capacity
    find_capacity: bool = False
    capacity_attainment: float = 0.99
    capacity_precision: float = 0.05
    capacity_start_rate: float = 1.0
    # Checks
    check_p95_ms: float | None = None
    check_fail_ratio: float | None = None
    check_min_tokens_per_s: float | None = None
    slo: Slo | None = None
    check_min_goodput: float | None = None
    check_min_cosine: float | None = None
    check_max_top1_changed: float | None = None
    check_min_rate_ratio: float | None = None
    # A/B
    ab_host: str | None = None
    ab_paired: bool = False
    # Cost
    gpu_hour_cost: tuple[float, ...] | None = None
    gpus: tuple[int, ...] = (1,)
    # Server metrics
    server_metrics: str = "auto"
    server_metrics_interval: float = 5.0
    # Prometheus
    prometheus_port: int | None = None
    prometheus_host: str = ""
    prometheus_linger: float = 0.0
    # Results
    json_result: str | None = None
    console_width: int = 120

    @classmethod
    def from_options(cls, options: argparse.Namespace | Any | None) -> Settings:
        """Parse Locust's options (command line, env, or web UI strings), then apply the rules between
        them; raise OptionError with the option's one line on a bad value or combination."""
        settings = cls(**{opt.dest: _parsed(options, opt) for opt in ALL_OPTIONS})
        if settings.input_len_range is not None:  # the older spelling of --input-len LOW:HIGH
            settings = dataclasses.replace(settings, input_len=settings.input_len_range)
        for refusal in _refused(settings):
            raise refusal
        return settings

    @property
    def trace(self) -> str | None:
        """The file of a replayed trace (--dataset trace:FILE), else None."""
        return self.dataset.removeprefix("trace:") if self.dataset.startswith("trace:") else None

    @cached_property  # asked on every request
    def open_loop(self) -> bool:
        """An open loop: requests leave on a schedule of their own, not when an answer came back. The
        schedule is a rate (--request-rate), a sweep's rates (--sweep-rates), a capacity search's probes
        (--find-capacity) or a trace's timestamps (--dataset trace:); its requests are counted as
        scheduled and sent, and wait for a free slot (--max-concurrency, the users) when they fall due.
        The one definition: every check and the docs (docs/workloads.md) mean this."""
        return bool(self.request_rate or self.sweep_rates or self.trace or self.find_capacity)

    @property
    def binary(self) -> bool:
        return self.encoding_format in ("bytes", "bytes_only")

    @property
    def validate(self) -> bool:
        """Check the answers: --no-validate not given."""
        return not self.no_validate


def _refused(s: Settings) -> Iterator[OptionError]:
    """Every rule between options: the combinations that cannot run, each with the option to change."""
    if s.sweep_rates and s.sweep_users:
        yield OptionError("--sweep-rates", "choose --sweep-rates or --sweep-users, not both")
    if s.repeat > 1 and (s.sweep_rates or s.sweep_users):
        yield OptionError("--repeat", "a sweep's steps share -t already: leave --repeat out, or the sweep")
    if s.sweep_rates and s.request_rate:
        yield OptionError("--request-rate", "--sweep-rates sets the rate of each step: leave --request-rate out")
    if s.encoding_format == "float":  # JSON numbers have no dtype or byte order to ask for
        for flag in ("--embed-dtype", "--endianness"):
            opt = BY_FLAG[flag]
            if getattr(s, opt.dest) != opt.default_value:
                yield OptionError(flag, "applies to base64, bytes and bytes_only; --encoding-format is float")
    if s.require_server_tokens and s.encoding_format == "bytes_only":
        yield OptionError(
            "--require-server-tokens", "a bytes_only answer carries no token count: use bytes, or leave it out"
        )
    yield from _token_level_refused(s)
    if s.trace is not None:  # a trace says when each request leaves
        for flag in ("--request-rate", "--sweep-rates", "--sweep-users"):
            if getattr(s, BY_FLAG[flag].dest):
                yield OptionError(flag, "a trace (--dataset trace:) sets every request's time: leave it out")
    yield from _capacity_refused(s)
    yield from _max_requests_refused(s)
    if s.max_concurrency and not s.open_loop:
        yield OptionError("--max-concurrency", "caps an open-loop run: give --request-rate, --sweep-rates or a trace")
    if s.dataset_column is not None and not s.dataset.startswith(("file:", "hf:")):
        yield OptionError(
            "--dataset-column", f"names a column of a file or Hugging Face dataset; --dataset is {s.dataset}"
        )
    if s.image_pool and not s.images:
        yield OptionError("--image-pool", "sets how many generated images recur: give --images too")
    yield from _cache_load_refused(s)
    if s.extra_body_overrides and s.extra_body is None:
        yield OptionError(
            "--extra-body-overrides", "lets --extra-body replace the class's own fields: give --extra-body"
        )
    if s.check_min_goodput is not None and s.slo is None:
        yield OptionError("--check-min-goodput", "goodput counts the requests that met --slo: give --slo too")
    if s.gpus != (1,) and s.gpu_hour_cost is None:
        yield OptionError("--gpus", "prices the GPUs at --gpu-hour-cost: give --gpu-hour-cost too")
    for flag, values in (("--gpu-hour-cost", s.gpu_hour_cost), ("--gpus", s.gpus)):
        if values is not None and len(values) > 1 and s.ab_host is None:
            yield OptionError(flag, "two values are one per host of --ab-host (A,B): give --ab-host, or one value")
    yield from _ab_refused(s)
    if s.check_min_rate_ratio is not None and not s.open_loop:
        yield OptionError(
            "--check-min-rate-ratio",
            "the rate sent is an open loop's: give --request-rate or --sweep-rates (or replay a trace, "
            "--dataset trace:) too",
        )


def _cache_load_refused(s: Settings) -> Iterator[OptionError]:
    """--repeat-ratio and --shared-prefix-tokens shape the inputs a pool builds; a trace's are its own."""
    if s.trace is not None:
        for flag in ("--repeat-ratio", "--shared-prefix-tokens"):
            if getattr(s, BY_FLAG[flag].dest):
                yield OptionError(flag, "a trace (--dataset trace:) replays its own requests: leave it out")
    if s.dataset == "random" and s.shared_prefix_tokens and s.shared_prefix_tokens >= s.input_len.lo:
        yield OptionError(
            "--shared-prefix-tokens",
            f"{s.shared_prefix_tokens} tokens leave no room in an input of --input-len {s.input_len}: the prefix "
            "is part of each input's length, so it must be shorter than the shortest",
        )


def _capacity_refused(s: Settings) -> Iterator[OptionError]:
    """--find-capacity sets each probe's rate itself, and judges each probe by --slo."""
    if not s.find_capacity:
        return
    if s.slo is None:
        yield OptionError("--find-capacity", "the capacity is the highest rate that meets --slo: give --slo")
    for flag in ("--sweep-rates", "--sweep-users", "--request-rate"):
        if getattr(s, BY_FLAG[flag].dest):
            yield OptionError(flag, "--find-capacity sets the rate of each probe itself: leave it out")
    if s.trace is not None:
        yield OptionError("--find-capacity", "a trace (--dataset trace:) sets every request's time: leave one out")


def _ab_refused(s: Settings) -> Iterator[OptionError]:
    """--ab-host shares one schedule between two hosts: not a schedule whose every request is its own (a
    trace), nor figures taken of one host alone; a capacity search probes each host alone (capacity/lanes.py),
    never both at once. Which host each --server-metrics URL is of is checked at start, with --host
    (servermetrics/hosts.py)."""
    if s.ab_paired and s.ab_host is None:
        yield OptionError("--ab-paired", "sends each input to both hosts: give --ab-host too")
    if s.ab_host is None:
        if any(u.strip().startswith(HOST_LABELS) for u in s.server_metrics.split(",")):
            yield OptionError("--server-metrics", "A= and B= say which host of --ab-host a URL is of: give --ab-host")
        return
    if s.trace is not None:
        yield OptionError("--ab-host", "a trace (--dataset trace:) replays each request once: leave one out")
    if s.find_capacity and s.ab_paired:
        yield OptionError("--ab-paired", "--find-capacity probes each host alone, in turn: leave --ab-paired out")


def _max_requests_refused(s: Settings) -> Iterator[OptionError]:
    """--max-requests ends a run at a count of Locust's stats: not a run whose length is set otherwise, nor
    one whose stats are reset on the way."""
    if s.max_requests is None:
        return
    if s.find_capacity:
        yield OptionError("--max-requests", "--find-capacity's probes set the run's length: leave one out")
    if s.sweep_rates or s.sweep_users:
        yield OptionError(
            "--max-requests", "a sweep's steps set the run's length (--sweep-step-time each): leave one out"
        )
    if s.repeat > 1:
        yield OptionError(
            "--max-requests",
            "--repeat resets the stats between repeats, which would start the count again: leave one out",
        )


def _token_level_refused(s: Settings) -> Iterator[OptionError]:
    """The rules of token-level answers (--pooling-task token_embed, token_classify) and late chunking."""
    token_level = s.pooling_task in TOKEN_POOLING_TASKS
    exact = s.tokenizer or s.count_tokens_with_server
    if token_level and s.dimensions is not None:
        yield OptionError("--dimensions", f"a {s.pooling_task} answer's rows are the model's own size: leave it out")
    if s.late_chunk_size is not None and s.pooling_task != "token_embed":
        yield OptionError(
            "--late-chunk-size", "late chunking is a token_embed model's: give --pooling-task token_embed"
        )
    if s.late_chunk_size is not None and s.truncate in ("end", "start"):
        yield OptionError("--truncate", "vLLM's late chunking refuses truncation: leave --truncate out")
    if s.late_chunk_size is not None and s.encoding_format == "bytes_only" and not exact:
        # Its body is sum(chunks) x hidden x width: a chunk's row does not say how many tokens it holds, so
        # only an exact count of each request's tokens can check it. (Without late chunking, a token-level
        # body's size gives its tokens once a row is known: engine/row_probe.py.)
        yield OptionError(
            "--tokenizer",
            "a late-chunked bytes_only body holds one row per chunk, which does not give its tokens: give "
            "--tokenizer or --count-tokens-with-server, or use bytes",
        )


def options_error(options: Any) -> str | None:
    """The one line that says why the options cannot run (a bad value, or a rule between them), or None."""
    try:
        Settings.from_options(options)
    except OptionError as e:
        return str(e)
    return None


_DESTS = tuple(opt.dest for opt in ALL_OPTIONS)
_RAW_DEFAULTS = tuple((opt.dest, opt.default) for opt in ALL_OPTIONS)
_DEFAULTS = Settings()


@lru_cache(maxsize=16)
def _settings_of_raw(raw: tuple[tuple[type, Hashable], ...]) -> Settings:
    values = {dest: value for dest, (_, value) in zip(_DESTS, raw, strict=True)}
    return Settings.from_options(argparse.Namespace(**values))


def settings_of(environment: Any) -> Settings:
    """The Settings of a Locust environment's options as they are now; OptionError on a bad one.

    Kept by the options' raw values, not by the options object: the web UI's form writes its values
    into the same parsed_options before each run. Looking them up costs a getattr per option; parsing
    them (every option and every rule) is done once per set of values."""
    options = getattr(environment, "parsed_options", None)
    if options is None:
        return _DEFAULTS
    # Keyed by type too: 1 and True are one key to a dict, not one value to a parser.
    raw = tuple((type(value), value) for value in (getattr(options, dest, default) for dest, default in _RAW_DEFAULTS))
    try:
        hash(raw)
    except TypeError:  # a value the web UI made a list: parse it, uncached
        return Settings.from_options(options)
    return _settings_of_raw(raw)
