"""Pass/fail checks at the end of a run (names in locust-plugins' style), for CI to gate on: checks on the
measured figures only. Whether the options let a check run at all (--check-min-goodput without --slo,
--check-min-rate-ratio without an open loop) is a rule between options: poolbench_locust/options/settings.py.

A room above this one adds its own checks by listening to `check_events.checks` (as a room adds its keys
to the JSON result): fired with the environment and the list of failed lines, it appends its own, which
then fail the run with EXIT_CODE as these do (the consistency room's gates: consistency/gates.py)."""

from __future__ import annotations

from locust import log
from locust.env import Environment
from locust.event import EventHook

from poolbench_locust.metrics.client_board import board_of
from poolbench_locust.metrics.collector import PoolingStats
from poolbench_locust.options import settings_of

EXIT_CODE = 3
"""The exit code of a run whose checks failed (2 is Locust's for a bad command line)."""


class CheckEvents:
    checks: EventHook
    """Fired once at the end of a run, with `environment` and `failed`: a listener appends a line for each of
    its checks that failed."""

    def __init__(self) -> None:
        self.checks = EventHook()


check_events = CheckEvents()


def exit_code(environment: Environment, failed: list[str]) -> int | None:
    """The exit code the checks set, or None to leave it to Locust (and to the rooms that set their own).

    A failed check: EXIT_CODE. All passed with `--check-fail-ratio` given: 0, even where some requests
    failed. Locust would exit with `--exit-code-on-error` (1) on a single failed request, which would
    override the ratio the user allowed; the ratio is the user's word on failed requests, so it decides.
    A task that raised (Locust's exceptions table) or a greenlet that died is a broken run, not failed
    requests: Locust's exit code stays."""
    if failed:
        return EXIT_CODE
    runner = environment.runner
    if environment.parsed_options is None or runner is None or settings_of(environment).check_fail_ratio is None:
        return None
    if runner.exceptions or log.unhandled_greenlet_exception:
        return None
    return 0


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)


def evaluate(environment: Environment, stats: PoolingStats) -> list[str]:
    """The checks that failed, each as one line saying which and why."""
    runner = environment.runner
    if environment.parsed_options is None or runner is None:
        return []
    settings = settings_of(environment)
    total = runner.stats.total
    failed = []
    if (p95 := settings.check_p95_ms) is not None:
        measured = total.get_response_time_percentile(0.95) or 0
        if measured > p95:
            failed.append(f"--check-p95-ms {_number(p95)}: p95 response time was {measured} ms")
    if (ratio := settings.check_fail_ratio) is not None and total.fail_ratio > ratio:
        failed.append(
            f"--check-fail-ratio {_number(ratio)}: {total.num_failures} of {total.num_requests} failed "
            f"({total.fail_ratio:.3f})"
        )
    entry = stats.total
    if (floor := settings.check_min_tokens_per_s) is not None:
        rate = stats.per_second(entry, entry.input_tokens)
        if rate < floor:
            failed.append(f"--check-min-tokens-per-s {_number(floor)}: input tokens/s was {rate:.1f}")
    if (floor := settings.check_min_goodput) is not None:
        rate = stats.per_second(entry, entry.good_requests)
        if rate < floor:
            failed.append(
                f"--check-min-goodput {_number(floor)}: goodput was {rate:.1f} requests/s "
                f"({entry.good_requests} of {entry.requests} requests met --slo {stats.slo})"
            )
    if (floor := settings.check_min_rate_ratio) is not None:
        board = board_of(environment)
        sent = board.total()
        share = board.sent_ratio()
        if sent is not None and share is not None and share < floor:
            failed.append(
                f"--check-min-rate-ratio {_number(floor)}: the open loop sent {sent.sent} of the "
                f"{sent.scheduled} requests it scheduled (ratio {share:.3f}"
                # a trace's schedule is its timestamps: it has no target rate to name
                + (f"; target {sent.target_rate:.1f} requests/s)" if sent.target_rate else ")")
            )
    check_events.checks.fire(environment=environment, failed=failed)
    return failed
