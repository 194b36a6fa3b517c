"""Peak RSS of one Locust process streaming large `bytes` bodies, beside a client that buffers them.

    python bench/memory.py [--body-mb 64] [--users 50] [--seconds 8]

Each client runs as its own `locust --headless` process against the bundled mock server (its own
process); its peak RSS is the kernel's VmHWM of the process's own memory, which it reads itself as it
quits (bench/common.py's own_peak_rss_mb: wait4's ru_maxrss would count the process it was spawned from).
Growth is measured against the same client fetching tiny bodies, so Locust's own footprint cancels out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/memory.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import FAST, POOLBENCH, ROOT, Mock, Payload, machine_line, run_client, write_result

FLOAT32 = 4
BATCH = 64
"""Inputs per request: a 64 MB body is 64 embeddings of 262,144 float32."""


def measure(body_mb: float, users: int, seconds: int) -> dict[str, Any]:
    big = int(body_mb * 1024 * 1024 / FLOAT32 / BATCH)
    runs: dict[str, Any] = {}
    with Mock() as mock:
        for name, client in (("poolbench", POOLBENCH), ("buffering", FAST)):
            for size, dims in (("tiny", 16), ("large", big)):
                run = run_client(client, mock.url, Payload("bytes", BATCH, dims), seconds, users=users)
                w = run.window
                runs[f"{name}_{size}"] = {
                    "peak_rss_mb": run.peak_rss_mb or run.finished.peak_rss_mb,
                    "requests": w["requests"],
                    "failures": w["failures"],
                }
    result: dict[str, Any] = {"body_mb": body_mb, "users": users, "seconds": seconds, "runs": runs}
    for name in ("poolbench", "buffering"):
        growth = runs[f"{name}_large"]["peak_rss_mb"] - runs[f"{name}_tiny"]["peak_rss_mb"]
        result[f"{name}_growth_mb"] = round(growth, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--body-mb", type=float, default=64)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--seconds", type=int, default=8)
    args = parser.parse_args()
    r = measure(args.body_mb, args.users, args.seconds)
    print(f"peak RSS of one Locust process, {args.users} users, {args.seconds} s, {args.body_mb:g} MB `bytes` bodies")
    print(f"{'client':<28}{'body':>7}{'requests':>10}{'failures':>10}{'peak RSS MB':>13}")
    for client, label in (("poolbench", "poolbench-locust (streams)"), ("buffering", "FastHttpUser (buffers)")):
        for size in ("tiny", "large"):
            run = r["runs"][f"{client}_{size}"]
            print(f"{label:<28}{size:>7}{run['requests']:>10}{run['failures']:>10}{run['peak_rss_mb']:>13.1f}")
        print(f"{'':<28}{'growth':>7}{'':>20}{r[client + '_growth_mb']:>13.1f}")
    print(machine_line())
    print(f"written: {write_result('memory', r).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
