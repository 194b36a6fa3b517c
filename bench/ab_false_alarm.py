"""The A/B verdict's false-alarm rate: how often two identical servers are called different.

    python bench/ab_false_alarm.py [--runs 40] [--seconds 12] [--users 4] [--ttfb-ms 10] [--b-ttfb-ms 10] [--paired]
                                   [--one-server]

Two bundled mock servers of the same delays, each in its own process, and `--runs` short headless A/B runs
against them (`--ab-host`, EmbeddingsUser, the suite's small inputs), one after another. A run is a false
alarm when any figure of its comparison is "beyond noise" (the table's intervals hold together with 95 %,
so the target is at most 5 %: within noise in at least 95 % of runs). Prints each run's figures that alarmed,
the rate with its 95 % interval (Wilson), and writes bench/results/ab_false_alarm.json. `--b-ttfb-ms` other
than `--ttfb-ms` measures the opposite: how often a known difference is found (the verdict's power).

Two mock processes on a shared machine are not quite one server: the OS gives them their CPU apart, and in a
run one may answer slower than the other all along (a difference the run really measured, which the next run
may not repeat). Each run's line shows the mocks' own median time per request (GET /mock/timings), so that a
verdict beyond noise can be told from the servers' own clocks. `--one-server` sends A and B to one mock process
under two names (127.0.0.1 and localhost): then every difference is the measurement's own, and the rate is the
statistic's false-alarm rate alone.
Kept modest in CPU: a few users, short runs, the mock's own delays setting the pace.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/ab_false_alarm.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import CHILD_ENV, PYTHON, ROOT, Mock, machine_line, run, write_result


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson interval of a rate of `hits` in `n`."""
    if n == 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _median(values: list[float]) -> float | None:
    return sorted(values)[len(values) // 2] if values else None


def one_run(a: Mock, b: Mock | None, args: argparse.Namespace) -> dict[str, object]:
    """One A/B run; `b` None: B is A's mock under another name."""
    for mock in (a, b):
        if mock is not None:
            mock.reset()
    b_url = b.url if b is not None else a.url.replace("127.0.0.1", "localhost")
    found = _run(a.url, b_url, args)
    if b is not None:
        found["server_p50_ms"] = [_median(a.server_ms()), _median(b.server_ms())]
    return found


def _run(a: str, b: str, args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd = [PYTHON, "-m", "locust", "-f", "locustfiles/embeddings.py", "--headless", "--only-summary"]
        cmd += ["-u", str(args.users), "-r", str(args.users), "-t", f"{args.seconds:g}s", "--host", a]
        cmd += ["--ab-host", b, "--input-len", "6", "--batch-size", "3", "--json-result", str(out)]
        cmd += ["--no-consistency", "--no-preflight", "--server-metrics", "off"]
        if args.paired:
            cmd.append("--ab-paired")
        finished = run(cmd, args.seconds + 60, CHILD_ENV, ROOT)
        if finished.returncode != 0 or not out.exists():
            raise RuntimeError(f"locust exited {finished.returncode}: {finished.stderr[-2000:]}")
        ab = json.loads(out.read_text())["ab"]
    beyond = [f"{f['figure']} {f['difference']:+.1f}" for f in ab["figures"] if f["beyond_noise"]]
    judged = [f["figure"] for f in ab["figures"] if f["beyond_noise"] is not None]
    return {"blocks": ab["blocks"], "judged": judged, "beyond": beyond, "cpu_s": round(finished.cpu_s, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--seconds", type=float, default=12)
    p.add_argument("--users", type=int, default=4)
    p.add_argument("--ttfb-ms", type=float, default=10.0, help="A's delay to the headers (and B's, by default)")
    p.add_argument("--b-ttfb-ms", type=float, default=None, help="B's delay (default: A's: identical servers)")
    p.add_argument("--paired", action="store_true", help="--ab-paired runs")
    p.add_argument("--one-server", action="store_true", help="A and B one mock process under two names")
    args = p.parse_args()
    b_ttfb = args.ttfb_ms if args.b_ttfb_ms is None else args.b_ttfb_ms
    identical = b_ttfb == args.ttfb_ms
    runs = []
    with Mock("--ttfb-ms", f"{args.ttfb_ms:g}") as a, Mock("--ttfb-ms", f"{b_ttfb:g}") as b:
        for i in range(args.runs):
            found = one_run(a, None if args.one_server else b, args)
            runs.append(found)
            said = ", ".join(found["beyond"]) or "within noise"  # type: ignore[arg-type]
            own = found.get("server_p50_ms")
            if isinstance(own, list) and None not in own:
                said += f" (the mocks' own p50: A {own[0]:.2f}, B {own[1]:.2f} ms)"
            print(
                f"run {i + 1:2d}: {found['blocks']} blocks, {len(found['judged'])} figures judged: {said}", flush=True
            )
    alarms = sum(1 for r in runs if r["beyond"])
    low, high = wilson(alarms, len(runs))
    what = "false alarms (identical servers called different)" if identical else "differences found"
    print(
        f"\n{what}: {alarms} of {len(runs)} runs = {100 * alarms / len(runs):.1f} % "
        f"(95 % interval {100 * low:.1f} to {100 * high:.1f} %); "
        f"within noise in {100 * (len(runs) - alarms) / len(runs):.1f} % of runs"
    )
    by_figure: dict[str, int] = {}
    for r in runs:
        for text in r["beyond"]:  # type: ignore[attr-defined]
            name = text.rsplit(" ", 1)[0]
            by_figure[name] = by_figure.get(name, 0) + 1
    if by_figure:
        print("by figure: " + ", ".join(f"{k} {v}" for k, v in sorted(by_figure.items())))
    print(machine_line())
    name = ("ab_false_alarm" if identical else "ab_power") + ("_one_server" if args.one_server else "")
    write_result(
        name + ("_paired" if args.paired else ""),
        {
            "runs": runs,
            "alarms": alarms,
            "rate": alarms / len(runs),
            "rate_ci95": [low, high],
            "a_ttfb_ms": args.ttfb_ms,
            "b_ttfb_ms": b_ttfb,
            "seconds": args.seconds,
            "users": args.users,
            "paired": args.paired,
            "one_server": args.one_server,
        },
    )


if __name__ == "__main__":
    main()
