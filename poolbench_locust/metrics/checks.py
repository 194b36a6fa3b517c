"""Pass/fail checks at the end of a run (names in locust-plugins' style), for CI to gate on."""

from __future__ import annotations

import argparse
from typing import Any

from locust import events
from locust.env import Environment

from poolbench_locust.metrics import goodput
from poolbench_locust.metrics.collector import PoolingStats
from poolbench_locust.metrics.pacing import board_of
from poolbench_locust.options import Option, OptionError, non_negative, register

EXIT_CODE = 3
"""The exit code of a run whose checks failed (2 is Locust's for a bad command line)."""


def _ratio(text: str) -> float:
    value = non_negative(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be a ratio from 0 to 1, got {value}")
    return value


CHECKS = (
    Option("--check-p95-ms", non_negative, None, "Fail the run if Locust's total p95 response time exceeds this."),
    Option("--check-fail-ratio", _ratio, None, "Fail the run if the ratio of failed requests exceeds this (0-1)."),
    Option("--check-min-tokens-per-s", non_negative, None, "Fail the run if input tokens/s stay below this."),
    Option(
        "--check-min-goodput",
        non_negative,
        None,
        "Fail the run if goodput (requests/s that met every objective of --slo) stays below this.",
    ),
    Option(
        "--check-min-rate-ratio",
        _ratio,
        None,
        "Open loop: fail the run if the requests sent are fewer than this share (0-1) of those the "
        "schedule made due (the client fell behind its --request-rate).",
    ),
)


@events.init_command_line_parser.add_listener
def add_arguments(parser: Any) -> None:
    register(parser, "poolbench-locust checks", CHECKS)


def start_error(options: Any) -> str | None:
    """The one line that says why --slo or the checks cannot run (checked at start), or None."""
    try:
        slo = goodput.slo_of(options)
    except OptionError as e:
        return str(e)
    if _limit(options, "check_min_goodput", non_negative) is not None and slo is None:
        return "--check-min-goodput: goodput counts the requests that met --slo: give --slo too"
    if _limit(options, "check_min_rate_ratio", _ratio) is not None and not (
        getattr(options, "request_rate", None) or getattr(options, "sweep_rates", None)
    ):
        return "--check-min-rate-ratio: the rate sent is an open loop's: give --request-rate or --sweep-rates too"
    return None


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)


def _limit(options: Any, dest: str, parse: Any) -> float | None:
    value = getattr(options, dest, None)
    return None if value in (None, "") else parse(str(value))


def evaluate(environment: Environment, stats: PoolingStats) -> list[str]:
    """The checks that failed, each as one line saying which and why."""
    options = environment.parsed_options
    runner = environment.runner
    if options is None or runner is None:
        return []
    total = runner.stats.total
    failed = []
    if (p95 := _limit(options, "check_p95_ms", non_negative)) is not None:
        measured = total.get_response_time_percentile(0.95) or 0
        if measured > p95:
            failed.append(f"--check-p95-ms {_number(p95)}: p95 response time was {measured} ms")
    if (ratio := _limit(options, "check_fail_ratio", _ratio)) is not None and total.fail_ratio > ratio:
        failed.append(
            f"--check-fail-ratio {_number(ratio)}: {total.num_failures} of {total.num_requests} failed "
            f"({total.fail_ratio:.3f})"
        )
    entry = stats.total
    if (floor := _limit(options, "check_min_tokens_per_s", non_negative)) is not None:
        rate = stats.per_second(entry, entry.input_tokens)
        if rate < floor:
            failed.append(f"--check-min-tokens-per-s {_number(floor)}: input tokens/s was {rate:.1f}")
    if (floor := _limit(options, "check_min_goodput", non_negative)) is not None:
        rate = stats.per_second(entry, entry.good_requests)
        if rate < floor:
            failed.append(
                f"--check-min-goodput {_number(floor)}: goodput was {rate:.1f} requests/s "
                f"({entry.good_requests} of {entry.requests} requests met --slo {stats.slo})"
            )
    if (floor := _limit(options, "check_min_rate_ratio", _ratio)) is not None:
        board = board_of(environment)
        total = board.total()
        ratio = board.sent_ratio()
        if total is not None and ratio is not None and ratio < floor:
            failed.append(
                f"--check-min-rate-ratio {_number(floor)}: the open loop sent {total.sent} of the "
                f"{total.scheduled} requests it scheduled (ratio {ratio:.3f}; target "
                f"{total.target_rate or 0:.1f} requests/s)"
            )
    return failed
