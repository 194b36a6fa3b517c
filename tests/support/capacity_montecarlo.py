"""How often a whole --find-capacity search against a slots server (tests/support/slots_server.py) misses what a
test asks of it, by Monte Carlo: the M/D/N queue under Poisson arrivals, at most `users` requests in flight
(the rest wait in the client, timed from their due time), each probe a settle of max(1 s, a quarter of the
step) then a window of the step, counting the requests that ended in the window, the client's backlog dropped
at the probe's end and, after a failed probe, the server's drained before the next (capacity/capacity_shape.py),
search.py's doubling and bisection. What it leaves out: the
client's own overhead beyond a fixed one, a starved scheduler, the server's timer slack.

    python -m tests.support.capacity_montecarlo SLOTS SERVICE_MS SLO_MS START STEP [--attainment 0.95]
        [--repeat 5] [--runs 200]

prints the share of searches (or of --repeat's intervals) that a test's assertion would fail and the probes'
wall time. Used to choose the capacity tests' servers and probe lengths (tests/test_capacity.py)."""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics

from tests.support.slots_server import md_n_attainment_rate

T_975 = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776, 6: 2.571}


def search(
    rng: random.Random,
    start: float,
    step: float,
    slots: int,
    service_s: float,
    slo_s: float,
    attainment: float = 0.99,
    precision: float = 0.05,
) -> tuple[int, float | None, str]:
    """One search with 64 users: (probes, the answer or None, how it ended)."""
    settle = max(1.0, 0.25 * step)
    free_slots, free_users = [0.0] * slots, [0.0] * 64
    t, passed, failed, probes = 0.0, None, None, 0
    while True:
        if failed is None:
            rate = start if passed is None else 2 * passed
        elif passed is None:
            rate = failed / 2
        elif failed - passed <= precision * passed:
            return probes, passed, "converged"
        else:
            rate = (passed + failed) / 2
        w0, w1 = t + settle, t + settle + step
        now, ended, good, scheduled, sent, waits = t, 0, 0, 0, 0, []
        while (now := now + rng.expovariate(rate)) < w1:
            scheduled += now >= w0
            user = heapq.heappop(free_users)
            send = max(now, user)
            if send >= w1:  # still waiting in the client at the probe's end: dropped
                heapq.heappush(free_users, user)
                continue
            sent += send >= w0
            end = max(send, heapq.heappop(free_slots)) + service_s
            heapq.heappush(free_slots, end)
            heapq.heappush(free_users, end)
            if w0 <= end < w1:
                ended += 1
                good += end - now <= slo_s
                waits.append(end - send)
        t, probes = w1, probes + 1
        ok = ended > 0 and good / ended >= attainment and sent >= 0.95 * scheduled
        if not ok and scheduled - sent >= 10 and sent < 0.9 * scheduled:
            waits.sort()
            if waits and waits[int(0.99 * (len(waits) - 1))] <= slo_s:  # behind with a fast server: the client's
                return probes, None, "client"
        if ok:
            passed = rate if passed is None else max(passed, rate)
        else:
            failed = rate if failed is None else min(failed, rate)
            t = max(t, *free_slots)  # the next probe begins once the server's backlog has ended
            free_slots, free_users = [t] * slots, [t] * 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("slots", "service_ms", "slo_ms", "start", "step"):
        parser.add_argument(name, type=float)
    parser.add_argument("--attainment", type=float, default=0.99, help="the share within SLO_MS a probe needs")
    parser.add_argument("--repeat", type=int, default=1, help="searches a run (their 95 %% interval must hold it)")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--tolerance", type=float, default=0.10, help="one search's answer within this share")
    args = parser.parse_args()
    slots = int(args.slots)
    knee = md_n_attainment_rate(slots, args.service_ms, args.slo_ms, args.attainment)
    rng, missed, probes = random.Random(7), 0, 0
    for _ in range(args.runs):
        answers = []
        for _ in range(args.repeat):
            n, answer, ended = search(
                rng, args.start, args.step, slots, args.service_ms / 1000, args.slo_ms / 1000, args.attainment
            )
            probes += n
            if ended != "converged" or answer is None:
                break
            answers.append(answer)
        if len(answers) < args.repeat:
            missed += 1
        elif args.repeat == 1:
            missed += abs(answers[0] - knee) > args.tolerance * knee
        else:
            mean, half = (
                statistics.fmean(answers),
                T_975[args.repeat] * statistics.stdev(answers) / math.sqrt(args.repeat),
            )
            missed += not mean - half <= knee <= mean + half
    per_run = probes / args.runs
    print(
        f"{slots} slots x {args.service_ms:g} ms, {args.attainment:.0%} within {args.slo_ms:g} ms: {knee:.1f} "
        f"requests/s; start {args.start:g}, {args.step:g} s probes, --repeat {args.repeat}: the test's assertion "
        f"fails in {missed / args.runs:.1%} of {args.runs} runs; {per_run:.1f} probes, "
        f"{per_run * (args.step + max(1.0, 0.25 * args.step)):.0f} s of probes a run"
    )


if __name__ == "__main__":
    main()
