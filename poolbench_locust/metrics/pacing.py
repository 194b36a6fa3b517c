"""Whether the client kept up: the open loop's rate sent against its target, how late requests left,
and each process's CPU, so that a client that falls behind is never read as a slow server.

Each process that runs the schedule (the local runner, or each worker) watches itself once a second:
the arrivals its schedule made due against those that left (workload/arrival.py's Tally), and its own
CPU. Locust's runner samples its CPU every 10 s (CPU_MONITOR_INTERVAL), and a worker's heartbeat
carries that sample: too coarse for a short run's measured window, or to tell "stays above 90 %" from
a spike, so the watcher takes psutil's figure (Locust's own source) once a second instead.

"Behind" is measured against the arrivals the schedule actually made due, not against the target
times the seconds: a Poisson schedule's count strays from its mean by its square root, which is not
the client's fault and would make a client that keeps up look 10 % short in a short window.

A process that fell behind for want of free slots is told the users to give, by Little's law: the rate
times the time a request held a user (its E2E less its wait in the client's own queue), with headroom.
More processes would share the same -u: they are named only where the CPU was the limit.

A worker ships its figures (cumulative: a lost report costs nothing) with each of Locust's reports and
once more when it stops; the master checks every value, keeps each worker's latest, and says the
warnings, once per process and kind.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil
from locust.env import Environment

from poolbench_locust.locust_options import locust_options
from poolbench_locust.metrics.collector import stats_of
from poolbench_locust.metrics.histogram import HIGHEST_MS, MAX_BUCKETS, ZERO_KEY, Histogram, bucket_key, bucket_value
from poolbench_locust.options import settings_of
from poolbench_locust.store import Slot
from poolbench_locust.workload.arrival import OpenLoop, open_loop_of

logger = logging.getLogger("poolbench_locust")

TICK_S = 1.0
WINDOW_S = 3.0
"""The window over which the rate sent is compared with the arrivals due."""
SUSTAINED_TICKS = 3
"""Ticks in a row a condition must hold before it is said: 'stays' for a few seconds, not a GC pause."""
BEHIND_RATIO = 0.95
MIN_SHORTFALL = 2
"""Arrivals: a window short by fewer is never behind (at 1 request/s one in dispatch is 33 % of 3 s)."""
CPU_BUSY_PERCENT = 90.0
CPU_IDLE_PERCENT = 50.0
"""Below this peak, in % of one core, the client's CPU was idle: one gevent loop with half its core to
spare hands every arrival over in time, so a process that fell behind with every user busy was short of
users, not of CPU, and the warning and the capacity answer say so (more processes would only share the
same -u). A capacity probe with no request timed names the users on this figure alone."""
USERS_HEADROOM = 1.5
"""The users advised are Little's law's (the rate x the time a request held a user) times this: random
arrivals come in bursts, and a server's latency grows with its load."""
LATE_MS = 5.0
"""A request that left more than this after its scheduled time was sent late. gevent's timers and a
loaded machine's scheduler account for a few ms: below this, lateness says nothing about the client."""
PACE_REPORT_KEY = "poolbench_pace"
FINAL_MESSAGE = "poolbench_pace_final"
CAUSES = {
    "slots": "no free slot: every user was busy with a request when its arrival fell due",
    "cpu": "client CPU: the process could not run its schedule in time (add --processes or workers)",
}
SLOTS_LEVER = "raise -u or --max-concurrency"
"""The slots' advice where no request ended to size it by (users_advice gives the figure otherwise)."""
SERVER_CAUSE = "server saturated"
"""The Likely Cause of a process short of free slots while the server's own queue grew (pace_causes.py)."""
LATENCY_NOTE = "its latencies then include the client's own queueing"

MAX_COUNT = 10**12
MAX_RATE = 1e9
MAX_SECONDS = 1e7
MAX_CPU = 100_000.0
"""A process's CPU in % of one core: 1,000 cores at most."""


@dataclass
class PaceFigures:
    """One process's figures since its measured window began (what a worker ships, cumulative)."""

    target_rate: float | None = None
    """Requests/s this process was to send (its share of the run's rate); None in a closed loop."""
    scheduled: int = 0
    dispatched_late: int = 0
    """Of the scheduled, those the dispatcher itself put in the queue late (workload/arrival.py)."""
    sent: int = 0
    late: int = 0
    seconds: float = 0.0
    lateness: Histogram = field(default_factory=Histogram)
    cpu_peak: float | None = None
    cpu_busy: bool = False
    behind: bool = False
    cause: str | None = None
    """A key of CAUSES, set when it fell behind."""
    behind_sent_rate: float | None = None
    behind_scheduled_rate: float | None = None
    """The window's rates when it first fell behind, for the warning."""

    def dump(self) -> dict[str, Any]:
        return {
            "target_rate": self.target_rate,
            "scheduled": self.scheduled,
            "dispatched_late": self.dispatched_late,
            "sent": self.sent,
            "late": self.late,
            "seconds": self.seconds,
            "lateness": self.lateness.dump(),
            "cpu_peak": self.cpu_peak,
            "cpu_busy": self.cpu_busy,
            "behind": self.behind,
            "cause": self.cause,
            "behind_sent_rate": self.behind_sent_rate,
            "behind_scheduled_rate": self.behind_scheduled_rate,
        }

    def sent_rate(self) -> float | None:
        return self.sent / self.seconds if self.target_rate is not None and self.seconds > 0 else None

    def scheduled_rate(self) -> float | None:
        return self.scheduled / self.seconds if self.target_rate is not None and self.seconds > 0 else None

    def ratio(self) -> float | None:
        """The share of the scheduled requests that were sent (1 when the client kept up)."""
        if self.target_rate is None or not self.scheduled:
            return None
        return min(self.sent / self.scheduled, 1.0)


def users_needed(rate: float, held_ms: float, users: int = 0, headroom: float = USERS_HEADROOM) -> int:
    """Little's law: `rate` requests/s that each hold a user `held_ms` keep rate x held_ms / 1000 users busy
    on average. That times `headroom`, rounded up; more than the `users` that fell short, and at least 1."""
    if not (math.isfinite(rate) and math.isfinite(held_ms)) or rate < 0 or held_ms < 0:
        raise ValueError(f"users_needed: a rate and a time of at least 0, not {rate!r} and {held_ms!r}")
    busy = round(rate * held_ms / 1000 * headroom, 6)  # 400/s x 20 ms x 1.5 is 12, not 12.000000000000002
    return max(math.ceil(busy), users + 1, 1)


def users_advice(rate: float, held_ms: float, needed: int, option: str = "-u") -> str:
    """The slots' lever, sized (`needed`: users_needed's): "raise -u to at least 12 (Little's law: ...)"."""
    return (
        f"raise {option} to at least {needed:,} (Little's law: {rate:,.1f} requests/s x "
        f"{held_ms:,.1f} ms a request held a user, x{USERS_HEADROOM:g})"
    )


def held_ms(e2e: Histogram, queue: Histogram) -> float | None:
    """The mean time a request held a user: its E2E less its wait for a free slot in the client's own queue
    (E2E counts from the arrival's due time), from the histograms' bucket middles (to 0.05 %). None without a
    request. What Little's law takes: the queue's wait is the users' shortage, not the time they were busy."""
    if not e2e.n:
        return None
    total = sum(bucket_value(key) * count for key, count in e2e.items())
    waited = sum(bucket_value(key) * count for key, count in queue.items())
    return max(total - waited, 0.0) / e2e.n


def slots_advice(environment: Environment, rate: float | None) -> str | None:
    """users_advice for the run's rate `rate`, the time a request held a user over the measured window so
    far (the run's pooling stats), and the option that caps the slots (-u, or a lower --max-concurrency);
    None without a rate or a request ended."""
    total = stats_of(environment).total
    held = held_ms(total.timings["e2e"], total.timings["queue"])
    if not rate or held is None:
        return None
    users = locust_options(environment).num_users or 0
    cap = settings_of(environment).max_concurrency
    slots, option = (cap, "--max-concurrency") if cap and (not users or cap < users) else (users, "-u")
    return users_advice(rate, held, users_needed(rate, held, slots), option)


class Refused(ValueError):
    """A worker's figures that are not what a worker sends."""


def _int(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_COUNT:
        raise Refused(f"{key} is not a count")
    return value


def _float(data: dict[str, Any], key: str, top: float, optional: bool = True) -> float | None:
    value = data.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0.0 <= value <= top:
        raise Refused(f"{key} is not a number in 0..{top:g}")
    return float(value)


def _bool(data: dict[str, Any], key: str) -> bool:
    value = data.get(key)
    if not isinstance(value, bool):
        raise Refused(f"{key} is not true or false")
    return value


def _histogram(data: Any) -> Histogram:
    if not isinstance(data, dict):
        raise Refused("lateness is not a histogram")
    steps, counts, n, top = data.get("keys"), data.get("counts"), data.get("n"), data.get("max")
    if not isinstance(steps, list) or not isinstance(counts, list) or len(steps) != len(counts):
        raise Refused("lateness: keys and counts are not lists of one length")
    if len(steps) > MAX_BUCKETS:
        raise Refused("lateness has more buckets than a histogram holds")
    highest = bucket_key(HIGHEST_MS)
    key = 0
    for i, (step, count) in enumerate(zip(steps, counts, strict=True)):
        if not isinstance(step, int) or isinstance(step, bool) or (i > 0 and step < 1):
            raise Refused("lateness: a key out of order")
        key += step
        if not ZERO_KEY <= key <= highest:
            raise Refused("lateness: a key out of range")
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_COUNT:
            raise Refused("lateness: a count out of range")
    if n != sum(counts):
        raise Refused("lateness: n is not the sum of its counts")
    if not isinstance(top, int | float) or isinstance(top, bool) or not 0.0 <= top <= HIGHEST_MS:
        raise Refused("lateness: max out of range")
    histogram = Histogram()
    histogram.merge({"keys": steps, "counts": counts, "n": n, "max": float(top)})
    return histogram


def parse(data: Any) -> PaceFigures:
    """A worker's figures, every value checked for type and range (Refused names the first wrong one)."""
    if not isinstance(data, dict):
        raise Refused("not a mapping")
    cause = data.get("cause")
    if cause is not None and cause not in CAUSES:
        raise Refused("cause is not one of " + ", ".join(CAUSES))
    figures = PaceFigures(
        target_rate=_float(data, "target_rate", MAX_RATE),
        scheduled=_int(data, "scheduled"),
        dispatched_late=_int(data, "dispatched_late"),
        sent=_int(data, "sent"),
        late=_int(data, "late"),
        seconds=_float(data, "seconds", MAX_SECONDS, optional=False) or 0.0,
        lateness=_histogram(data.get("lateness")),
        cpu_peak=_float(data, "cpu_peak", MAX_CPU),
        cpu_busy=_bool(data, "cpu_busy"),
        behind=_bool(data, "behind"),
        cause=cause,
        behind_sent_rate=_float(data, "behind_sent_rate", MAX_RATE),
        behind_scheduled_rate=_float(data, "behind_scheduled_rate", MAX_RATE),
    )
    if figures.late > figures.sent or figures.lateness.n > figures.sent:
        raise Refused("more late requests than requests sent")
    if figures.dispatched_late > figures.scheduled:
        raise Refused("more arrivals dispatched late than scheduled")
    return figures


class Watcher:
    """One process watching itself: its schedule's tally, the lateness of what it sent, its CPU."""

    def __init__(self, open_loop: OpenLoop, sends: bool = True, cpu_percent: Callable[[], float] | None = None) -> None:
        self.open_loop = open_loop
        """This process's schedule (its run state's): its tally is what the watcher reads."""
        self.sends = sends
        """False on a master: it runs no schedule, only its CPU is watched."""
        process = psutil.Process()
        self._cpu_percent = cpu_percent or (lambda: process.cpu_percent(None))
        """This process's CPU since the last call, in % of one core."""
        self.figures = PaceFigures()
        self._window: deque[tuple[float, int, int]] = deque()
        self._behind_ticks = 0
        self._busy_ticks = 0
        self._started = time.monotonic()
        self._stopped: float | None = None
        self._counting_cpu = False
        open_loop.tally.on_sent = self._on_sent

    def _on_sent(self, lateness_ms: float) -> None:
        figures = self.figures
        figures.lateness.add(lateness_ms)
        if lateness_ms > LATE_MS:
            figures.late += 1

    def reset(self) -> None:
        """A new measured window: the run's start, or the end of its warm-up."""
        self.figures = PaceFigures()
        self.open_loop.tally.clear()
        self._window.clear()
        self._behind_ticks = self._busy_ticks = 0
        self._started = time.monotonic()
        self._stopped = None
        self._cpu_percent()  # the next figure counts from here
        self._counting_cpu = True

    def stop(self) -> None:
        """The users are stopping: what falls due from here has nobody to send it."""
        self.open_loop.tally.counting = False
        self._stopped = time.monotonic()
        self._counting_cpu = False

    def current(self, environment: Environment) -> PaceFigures:
        """The figures as of now (or as of the stop)."""
        figures = self.figures
        figures.seconds = (self._stopped or time.monotonic()) - self._started
        if not self.sends:
            return figures
        rate = settings_of(environment).request_rate
        if self.open_loop.rate_override is not None or rate or self.open_loop.tally.scheduled > 0:
            runner = environment.runner
            # Read while the users run: a process's share is its users over the run's, and at the
            # stop it has none left (its share then reads as the whole).
            if figures.target_rate is None or (runner is not None and runner.user_count > 0 and self._stopped is None):
                figures.target_rate = self.open_loop.current_rate(environment, rate)
        figures.scheduled = self.open_loop.tally.scheduled
        figures.dispatched_late = self.open_loop.tally.dispatched_late
        figures.sent = self.open_loop.tally.sent
        return figures

    def tick(self, environment: Environment) -> list[str]:
        """One second's look; the kinds of warning that became due now ("behind", "cpu")."""
        due: list[str] = []
        figures = self.current(environment)
        cpu = self._cpu_percent() if self._counting_cpu else 0.0
        if self._counting_cpu:
            figures.cpu_peak = cpu if figures.cpu_peak is None else max(figures.cpu_peak, cpu)
        self._busy_ticks = self._busy_ticks + 1 if cpu > CPU_BUSY_PERCENT else 0
        if self._busy_ticks >= SUSTAINED_TICKS and not figures.cpu_busy:
            figures.cpu_busy = True
            due.append("cpu")
        if figures.target_rate is None:
            return due
        now = time.monotonic()
        window = self._window
        window.append((now, figures.scheduled, figures.sent))
        while len(window) > 1 and now - window[1][0] >= WINDOW_S:
            window.popleft()
        then, scheduled_then, sent_then = window[0]
        scheduled, sent, seconds = figures.scheduled - scheduled_then, figures.sent - sent_then, now - then
        short = seconds >= WINDOW_S * 0.9 and scheduled - sent >= MIN_SHORTFALL and sent < BEHIND_RATIO * scheduled
        self._behind_ticks = self._behind_ticks + 1 if short else 0
        if self._behind_ticks >= SUSTAINED_TICKS and not figures.behind:
            figures.behind = True
            # Arrivals queued while a user waited for one: the process did not get round to handing them
            # over. Arrivals queued while every user was busy: no slot was free.
            cpu_bound = cpu > CPU_BUSY_PERCENT or self.open_loop.tally.idle_users > 0
            figures.cause = "cpu" if cpu_bound else "slots"
            figures.behind_sent_rate = sent / seconds
            figures.behind_scheduled_rate = scheduled / seconds
            due.append("behind")
        return due


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def behind_warning(
    process: str, figures: PaceFigures, during: bool, server: str | None = None, advice: str | None = None
) -> str:
    """The warning's one line: the target, the rate sent, the likely cause. `server`: the server's own
    figures saying it was saturated (pace_causes.py): they, not the slots, are then the cause. `advice`:
    the slots' lever sized by Little's law (slots_advice), said when the slots were the cause."""
    if during:
        sent, scheduled = figures.behind_sent_rate, figures.behind_scheduled_rate
        span = f"over the last {WINDOW_S:g} s"
    else:
        sent, scheduled = figures.sent_rate(), figures.scheduled_rate()
        span = f"over the whole run ({figures.seconds:.0f} s)"
    share = (
        "" if not scheduled or sent is None else f", {100 * sent / scheduled:.0f} % of the {scheduled:,.1f} scheduled"
    )
    if server and figures.cause == "slots":
        cause = server
    elif figures.cause == "slots":
        peak = figures.cpu_peak
        idle = ""
        if peak is not None and peak < CPU_IDLE_PERCENT:
            idle = f", not the client's CPU (peak {peak:.0f} % of a core)"
        cause = f"{CAUSES['slots']}; the users were the limit{idle}: {advice or SLOTS_LEVER}"
    else:
        cause = CAUSES.get(figures.cause or "", "unknown")
    return (
        f"The open loop fell behind on {process}: target {_rate(figures.target_rate)} requests/s, "
        f"sent {_rate(sent)} requests/s {span}{share}. Likely cause: {cause}. The latencies include the "
        "client's own wait (Queue); the server was not sent the load asked for."
    )


def cpu_warning(process: str, figures: PaceFigures) -> str:
    return (
        f"The client's CPU stayed above {CPU_BUSY_PERCENT:g} % on {process} (peak {figures.cpu_peak or 0:.0f} %): "
        f"{LATENCY_NOTE}. Add --processes or workers."
    )


_WATCHER: Slot[Watcher] = Slot("pacing_watcher")
"""This process watching its own schedule's tally and CPU: made by watcher_of, on the schedule."""


def watcher_of(environment: Environment, sends: bool = True) -> Watcher:
    """The run's watcher of this process (made on first use, on this environment's schedule)."""
    if (watcher := _WATCHER.peek(environment)) is None:
        watcher = _WATCHER.put(environment, Watcher(open_loop_of(environment), sends=sends))
    return watcher
