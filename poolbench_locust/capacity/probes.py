"""One probe of the search: the figures at the start and at the end of its measured window (its marks),
and what they say: its attainment, its failure ratio, the share of its schedule the client sent, the
answers compared with their reference in the window (--slo's cosine= and top1_changed=), whether it
passed, and who was the limit.

The figures are differences of the run's own counters (the pooling stats, the pacing tally), as a sweep's
steps are: nothing is added to the per-request path."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import psutil
from locust.env import Environment
from locust.runners import MasterRunner

from poolbench_locust.capacity.host_figures import host_total
from poolbench_locust.capacity.probe_energy import ProbeEnergy, energy_marks, probe_energy
from poolbench_locust.consistency.state import TOTAL
from poolbench_locust.metrics.client_board import board_of
from poolbench_locust.metrics.histogram import Histogram, difference
from poolbench_locust.metrics.pacing import (
    BEHIND_RATIO,
    CPU_BUSY_PERCENT,
    CPU_IDLE_PERCENT,
    MIN_SHORTFALL,
    SUSTAINED_TICKS,
    held_ms,
    users_needed,
    watcher_of,
)
from poolbench_locust.options import Settings, Slo
from poolbench_locust.servermetrics.gpu import EnergyMark
from poolbench_locust.servermetrics.scraping import scraping_of
from poolbench_locust.workload.arrival import DISPATCH_LATE_S

SENT_RATIO = 0.95
STARVED_SHARE = 0.05
"""A probe whose dispatcher put out this share of its arrivals late (DISPATCH_LATE_S) was starved of CPU."""
"""A probe passes only if the client sent at least this share of its schedule."""
DEFAULT_FAIL_RATIO = 0.01
"""The highest failure ratio of a passing probe, when --check-fail-ratio is not given."""
SERVER = "server"
CLIENT = "client"
USERS = "users"
"""A client verdict's part: too few users (slots) for the rate at the server's latency; more users help."""
CPU = "cpu"
"""A client verdict's part: its CPU could not run the schedule; more processes or workers help."""
USERS_BUSY_SHARE = 0.8
"""The share of the users that Little's law keeps busy at a probe's rate (rate x held / users) from which a
client that fell behind was short of users. Below it the users were mostly free: the process did not hand
them the arrivals in time, whatever its CPU figure says (a machine may give it far less than a core)."""


@dataclass(frozen=True)
class Mark:
    """The run's counters at one moment."""

    at: float
    requests: int
    failures: int
    good: int
    sequences: int
    input_tokens: int
    e2e: dict[str, Any]
    ttfb: dict[str, Any]
    scheduled: int
    sent: int
    cpu_busy: frozenset[str] = frozenset()
    """The processes the pacing board had seen busy (a distributed run's only figure of CPU per probe)."""
    wall: float = 0.0
    """time.time() of the mark: the server's scrapes are stamped with it."""
    energy: dict[str, EnergyMark] = field(default_factory=dict)
    """Each dcgm-exporter target's energy counter at its last scrape (probe_energy.py)."""
    server_latency: tuple[float, float] | None = None
    """The server's own request-latency histogram at its last scrape, summed over its targets: (sum in s, count)."""
    queue: dict[str, Any] | None = None
    """The client's own queue (the wait for a free slot) histogram: E2E less it is the time a request held a user."""
    dispatched_late: int = 0
    """Of the scheduled, the arrivals the client's dispatcher put out late (workload/arrival.py)."""


def server_latency_mark(environment: Environment) -> tuple[float, float] | None:
    """(sum in s, count) of the servers' own request-latency histograms (vLLM's e2e_request_latency_seconds,
    TEI's request duration, ...) as of their last scrapes; None without one."""
    state = scraping_of(environment)
    if state is None:
        return None
    hists = [view.hists["latency"] for view in state.views if view.has("latency")]
    return (sum(h.sum for h in hists), sum(h.count for h in hists)) if hists else None


def server_latency_ms(before: Mark, after: Mark) -> float | None:
    """The servers' own mean latency of the requests they ended between two marks; None without a histogram,
    with no request ended, or across a rebase of the scraped figures (their counts went down)."""
    if before.server_latency is None or after.server_latency is None:
        return None
    total, count = (a - b for a, b in zip(after.server_latency, before.server_latency, strict=True))
    return 1000 * total / count if count > 0 and total >= 0 else None


def mark(environment: Environment, at: float, side: str | None = None) -> Mark:
    """The run's counters now: every request's, or with `side` ("A", "B") one host's (host_figures.py)."""
    total = host_total(environment, side)
    if isinstance(environment.runner, MasterRunner):
        board = board_of(environment)
        pace = board.total()
        scheduled, sent, late = (pace.scheduled, pace.sent, pace.dispatched_late) if pace is not None else (0, 0, 0)
        busy = frozenset(name for name, figures in board.processes.items() if figures.cpu_busy)
    else:
        figures = watcher_of(environment).current(environment)
        scheduled, sent, late, busy = figures.scheduled, figures.sent, figures.dispatched_late, frozenset()
    return Mark(
        at=at,
        requests=total.requests,
        failures=total.failures,
        good=total.good_requests,
        sequences=total.sequences,
        input_tokens=total.input_tokens,
        e2e=total.timings["e2e"].dump(),
        ttfb=total.timings["ttfb"].dump(),
        queue=total.timings["queue"].dump(),
        scheduled=scheduled,
        sent=sent,
        dispatched_late=late,
        cpu_busy=busy,
        wall=time.time(),
        energy=energy_marks(environment),
        server_latency=server_latency_mark(environment),
    )


def server_gauge(environment: Environment, name: str, since: float, until: float) -> float | None:
    """A gauge of the server's own (--server-metrics: "waiting", vLLM's num_requests_waiting, TEI's queue
    size, ...; "running", vLLM's num_requests_running, ...): the mean of its scrapes between two wall-clock
    times (of every target's, with several); None when no scrape of it fell in the window."""
    state = scraping_of(environment)
    if state is None:
        return None
    values = [
        value
        for view in state.views
        for at, gauges in view.history
        if since <= at <= until
        and isinstance(value := gauges.get(name), int | float)
        and math.isfinite(value)
        and value >= 0
    ]
    return sum(values) / len(values) if values else None


class CpuWatch:
    """This process's CPU, once a second during a probe's window: whether it stayed above 90 % for a few
    seconds in a row, as metrics/pacing.py judges it (its own psutil handle: the pacing watcher's figure
    counts from that watcher's last call)."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self.peak: float | None = None
        self.busy = False
        self._ticks = 0

    def start(self) -> None:
        self._process.cpu_percent(None)
        self.peak, self.busy, self._ticks = None, False, 0

    def tick(self) -> None:
        cpu = self._process.cpu_percent(None)
        self.peak = cpu if self.peak is None else max(self.peak, cpu)
        self._ticks = self._ticks + 1 if cpu > CPU_BUSY_PERCENT else 0
        self.busy = self.busy or self._ticks >= SUSTAINED_TICKS


@dataclass
class Probe:
    """A probe's figures over its measured window, and its verdict."""

    number: int
    rate: float
    seconds: float = 0.0
    requests: int = 0
    failures: int = 0
    good: int = 0
    sequences: int = 0
    input_tokens: int = 0
    scheduled: int = 0
    dispatched_late: int = 0
    """Of the scheduled, the arrivals the client's dispatcher itself put out late: its loop was starved."""
    sent: int = 0
    e2e_p50_ms: float | None = None
    e2e_p99_ms: float | None = None
    ttfb_p99_ms: float | None = None
    cpu_peak: float | None = None
    cpu_busy: bool = False
    processes: int = 1
    users: int = 0
    """The most requests in flight: -u (the run's, every process's together); 0 where unknown."""
    held_ms: float | None = None
    """The mean time a request held a user in the window: its E2E less its wait in the client's own queue."""
    server_waiting: float | None = None
    server_running: float | None = None
    server_latency_ms: float | None = None
    """The server's own mean latency of the requests it ended in the window (its histogram's deltas)."""
    """The server's own mean of requests running in the window: where nothing waits (a pooling model on
    vLLM runs every request it holds at once), what grows with the rate."""
    """The mean of the requests waiting in the server's own queue in its scrapes during the probe (--server-metrics)."""
    energy: ProbeEnergy = field(default_factory=ProbeEnergy)
    """The GPUs' energy and mean power in the window (a dcgm-exporter target of --server-metrics)."""
    consistency: dict[str, dict[str, Any]] | None = None
    """The answers compared with their reference in the window: each name's figures and the total's
    (consistency/state.py); None when none was."""
    passed: bool = False
    limited_by: str = SERVER
    client_limit: str | None = None
    """A client verdict's part (USERS or CPU); None for a server verdict."""
    users_needed: int | None = None
    """Where the users were the limit: Little's law's users for the rate (pacing.users_needed), or None
    without a request ended to time."""
    users_option: str = "-u"
    """The option that caps the requests in flight: -u, or a lower --max-concurrency."""
    why: list[str] = field(default_factory=list)
    """Why it failed (or, for a client verdict, why the client was the limit), a phrase each."""

    @property
    def attainment(self) -> float | None:
        """The share of its requests that succeeded and met every objective of --slo."""
        return self.good / self.requests if self.requests else None

    @property
    def fail_ratio(self) -> float | None:
        return self.failures / self.requests if self.requests else None

    @property
    def sent_ratio(self) -> float | None:
        return min(self.sent / self.scheduled, 1.0) if self.scheduled else None

    @property
    def starved(self) -> bool:
        """The client's dispatcher handed out a share of the schedule late (STARVED_SHARE): the process's loop
        did not run it, so the rate was not offered on time, though all it scheduled was sent."""
        late = self.dispatched_late
        return late >= MIN_SHORTFALL and late >= STARVED_SHARE * self.scheduled

    @property
    def behind(self) -> bool:
        """The client fell behind its schedule (pacing's rule, over the whole window)."""
        return self.scheduled - self.sent >= MIN_SHORTFALL and self.sent < BEHIND_RATIO * self.scheduled

    def per_second(self, amount: int) -> float:
        return amount / self.seconds if self.seconds > 0 else 0.0

    def workers_needed(self) -> int:
        """How many processes the next try needs so that the client is not the limit at this rate."""
        n = self.processes
        if self.cpu_busy and self.cpu_peak:
            # each process at about 70 % of a core leaves room for bursts
            return max(n + 1, math.ceil(n * self.cpu_peak / 70.0))
        ratio = self.sent_ratio or 1.0
        return max(n + 1, math.ceil(n / max(ratio, 0.01) * 1.2))


def measure(
    number: int, rate: float, before: Mark, after: Mark, cpu: CpuWatch | None, processes: int, users: int = 0
) -> Probe:
    e2e, ttfb, queue = Histogram(), Histogram(), Histogram()
    e2e.merge(difference(after.e2e, before.e2e))
    ttfb.merge(difference(after.ttfb, before.ttfb))
    if after.queue is not None:
        queue.merge(difference(after.queue, before.queue))
    return Probe(
        number=number,
        rate=rate,
        seconds=max(after.at - before.at, 1e-9),
        requests=after.requests - before.requests,
        failures=after.failures - before.failures,
        good=after.good - before.good,
        sequences=after.sequences - before.sequences,
        input_tokens=after.input_tokens - before.input_tokens,
        scheduled=after.scheduled - before.scheduled,
        dispatched_late=max(after.dispatched_late - before.dispatched_late, 0),
        sent=after.sent - before.sent,
        e2e_p50_ms=e2e.percentile(0.5) if e2e.n else None,
        e2e_p99_ms=e2e.percentile(0.99) if e2e.n else None,
        ttfb_p99_ms=ttfb.percentile(0.99) if ttfb.n else None,
        cpu_peak=cpu.peak if cpu is not None else None,
        cpu_busy=(cpu.busy if cpu is not None else False) or bool(after.cpu_busy - before.cpu_busy),
        processes=processes,
        users=users,
        held_ms=held_ms(e2e, queue),
        energy=probe_energy(
            before.energy, after.energy, max(after.at - before.at, 1e-9), after.input_tokens - before.input_tokens
        ),
        server_latency_ms=server_latency_ms(before, after),
    )


def answers_wrong(found: dict[str, dict[str, Any]] | None, slo: Slo) -> list[str]:
    """Why the probe's answers fail the answers' terms of --slo, a phrase a name: a compared answer's cosine
    below `cosine`, a share of best documents changed above `top1_changed`. A probe with no answer compared
    fails them too: nothing vouches for its answers (docs/consistency.md, Gates and load windows)."""
    if slo.cosine is None and slo.top1_changed is None:
        return []
    if not found:
        return ["no answer was compared with its reference: the answers' terms of --slo judged none"]
    why = []
    for name, figures in found.items():
        if name == TOTAL:
            continue
        cosine, top1 = figures.get("cosine_min"), figures.get("top1_changed_ratio")
        if slo.cosine is not None and cosine is not None and cosine < slo.cosine:
            why.append(f"cosine {cosine:.6g} < {slo.cosine:g} for {name}")
        if slo.top1_changed is not None and top1 is not None and top1 > slo.top1_changed:
            why.append(f"top-1 changed in {100 * top1:.1f} % > {100 * slo.top1_changed:g} % for {name}")
    return why


def judge(probe: Probe, settings: Settings) -> Probe:
    """Set whether the probe passed, why not, and who was the limit."""
    assert settings.slo is not None  # --find-capacity without --slo is refused at start
    slo: Slo = settings.slo
    max_fail = settings.check_fail_ratio if settings.check_fail_ratio is not None else DEFAULT_FAIL_RATIO
    why: list[str] = []
    attainment, fail_ratio, sent_ratio = probe.attainment, probe.fail_ratio, probe.sent_ratio
    if not probe.requests:
        why.append("no request was answered")
    if attainment is not None and attainment < settings.capacity_attainment:
        why.append(f"{100 * attainment:.1f} % of requests met {slo} (needs {100 * settings.capacity_attainment:g} %)")
    if fail_ratio is not None and fail_ratio > max_fail:
        why.append(f"{100 * fail_ratio:.1f} % failed (at most {100 * max_fail:g} %)")
    if sent_ratio is not None and sent_ratio < SENT_RATIO and probe.scheduled - probe.sent >= MIN_SHORTFALL:
        # pacing's rule: one arrival still in dispatch at the window's end is no schedule missed (a CI run: 14 of
        # 15 at 10/s, 93.3 %, failed a probe whose server answered all within its objective)
        why.append(f"the client sent {100 * sent_ratio:.1f} % of its schedule")
    if probe.starved:
        share = probe.dispatched_late / max(probe.scheduled, 1)
        why.append(
            f"the client's scheduler put {100 * share:.1f} % of the arrivals out over "
            f"{1000 * DISPATCH_LATE_S:g} ms late: the rate was not offered on time"
        )
    why.extend(answers_wrong(probe.consistency, slo))
    probe.passed = not why
    probe.why = why
    probe.limited_by = SERVER
    probe.client_limit = probe.users_needed = None
    if probe.cpu_busy:
        probe.limited_by = CLIENT
        probe.why.append(f"the client's CPU stayed above {CPU_BUSY_PERCENT:g} % (peak {probe.cpu_peak or 0:.0f} %)")
    elif probe.starved:
        # Whatever the server did, it answered a rate the client did not offer on time: the CPU the client's
        # process got (its own, or the machine's shared with others) is the limit.
        probe.limited_by = CLIENT
    elif probe.behind:
        # The schedule outran the users. With a server that kept answering within the objective, too few
        # users (slots) or too little client is the limit; a server whose own answers grew beyond it held
        # every slot: the server is.
        bound = slo.e2e_ms if slo.e2e_ms is not None else slo.ttfb_ms
        server_slow = bound is not None and probe.ttfb_p99_ms is not None and probe.ttfb_p99_ms > bound
        if not server_slow:
            probe.limited_by = CLIENT
    if probe.limited_by == CLIENT:
        _client_part(probe, settings)
    return probe


def _client_part(probe: Probe, settings: Settings) -> None:
    """Which part of the client held the schedule back, and what to raise. Its CPU, busy for seconds, wants
    processes or workers. Else Little's law says: the users it kept busy at the rate (rate x the time each
    request held one) were most of them (USERS_BUSY_SHARE): the users were the limit, and as many as the
    rate times that time, with headroom, are asked for; more processes would share the same -u. Users
    mostly free mean a process that did not hand them the arrivals: its CPU. Without a request ended to
    time, the CPU's peak decides: idle (below CPU_IDLE_PERCENT of a core) names the users."""
    slots, probe.users_option = probe.users, "-u"
    if settings.max_concurrency and (not slots or settings.max_concurrency < slots):
        slots, probe.users_option = settings.max_concurrency, "--max-concurrency"
    held = probe.held_ms
    carried = slots * 1000 / held if slots and held else None  # Little's law: the most requests/s the slots carry
    idle = probe.cpu_peak is not None and probe.cpu_peak < CPU_IDLE_PERCENT
    short = probe.rate >= USERS_BUSY_SHARE * carried if carried is not None else idle
    if probe.cpu_busy or probe.starved or not short:
        probe.client_limit = CPU
        if not probe.cpu_busy and not short and carried is not None:
            probe.why.append(
                f"{slots:,} users that each held a request {held:,.1f} ms carry {carried:,.1f} requests/s: most were "
                "free, the process did not hand them the arrivals in time"
            )
        return
    probe.client_limit = USERS
    if held is not None:
        probe.users_needed = users_needed(probe.rate, held, slots)
    if carried is not None:
        probe.why.append(
            f"{slots:,} users that each held a request {held:,.1f} ms carry at most {carried:,.1f} requests/s"
        )
    if idle:
        peak = probe.cpu_peak or 0.0
        probe.why.append(f"the client's CPU peaked at {peak:.0f} % of a core, idle below {CPU_IDLE_PERCENT:g} %")
