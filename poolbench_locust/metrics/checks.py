"""Pass/fail checks at the end of a run (names in locust-plugins' style), for CI to gate on."""

from __future__ import annotations

from typing import Any

from locust.env import Environment

from poolbench_locust.metrics import goodput
from poolbench_locust.metrics.client_board import board_of
from poolbench_locust.metrics.collector import PoolingStats
from poolbench_locust.options import OptionError, parsed

EXIT_CODE = 3
"""The exit code of a run whose checks failed (2 is Locust's for a bad command line)."""


def start_error(options: Any) -> str | None:
    """The one line that says why --slo or the checks cannot run (checked at start), or None."""
    try:
        slo = goodput.slo_of(options)
        goodput_floor = parsed(options, "--check-min-goodput")
        rate_floor = parsed(options, "--check-min-rate-ratio")
        open_loop = parsed(options, "--request-rate") or parsed(options, "--sweep-rates")
    except OptionError as e:
        return str(e)
    if goodput_floor is not None and slo is None:
        return "--check-min-goodput: goodput counts the requests that met --slo: give --slo too"
    if rate_floor is not None and not open_loop:
        return "--check-min-rate-ratio: the rate sent is an open loop's: give --request-rate or --sweep-rates too"
    return None


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)


def evaluate(environment: Environment, stats: PoolingStats) -> list[str]:
    """The checks that failed, each as one line saying which and why."""
    options = environment.parsed_options
    runner = environment.runner
    if options is None or runner is None:
        return []
    total = runner.stats.total
    failed = []
    if (p95 := parsed(options, "--check-p95-ms")) is not None:
        measured = total.get_response_time_percentile(0.95) or 0
        if measured > p95:
            failed.append(f"--check-p95-ms {_number(p95)}: p95 response time was {measured} ms")
    if (ratio := parsed(options, "--check-fail-ratio")) is not None and total.fail_ratio > ratio:
        failed.append(
            f"--check-fail-ratio {_number(ratio)}: {total.num_failures} of {total.num_requests} failed "
            f"({total.fail_ratio:.3f})"
        )
    entry = stats.total
    if (floor := parsed(options, "--check-min-tokens-per-s")) is not None:
        rate = stats.per_second(entry, entry.input_tokens)
        if rate < floor:
            failed.append(f"--check-min-tokens-per-s {_number(floor)}: input tokens/s was {rate:.1f}")
    if (floor := parsed(options, "--check-min-goodput")) is not None:
        rate = stats.per_second(entry, entry.good_requests)
        if rate < floor:
            failed.append(
                f"--check-min-goodput {_number(floor)}: goodput was {rate:.1f} requests/s "
                f"({entry.good_requests} of {entry.requests} requests met --slo {stats.slo})"
            )
    if (floor := parsed(options, "--check-min-rate-ratio")) is not None:
        board = board_of(environment)
        sent = board.total()
        share = board.sent_ratio()
        if sent is not None and share is not None and share < floor:
            failed.append(
                f"--check-min-rate-ratio {_number(floor)}: the open loop sent {sent.sent} of the "
                f"{sent.scheduled} requests it scheduled (ratio {share:.3f}; target "
                f"{sent.target_rate or 0:.1f} requests/s)"
            )
    return failed
