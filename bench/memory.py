"""Peak RSS of one Locust process streaming large `bytes` bodies, beside a client that buffers them.

    python bench/memory.py [--body-mb 100] [--users 4] [--seconds 8]

Each client runs as its own `locust --headless` process against the bundled mock server (its own
process); its peak RSS is the kernel's VmHWM, read from /proc while it runs. Growth is measured
against the same client fetching tiny bodies, so Locust's own footprint cancels out.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FLOAT32 = 4
BATCH = 64
"""Inputs per request: a 100 MB body is 64 embeddings of 409,600 float32."""


def start_mock() -> tuple[subprocess.Popen[str], str]:
    """The bundled mock server in its own process, so that it costs the measured process nothing."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "poolbench_locust.mockserver", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, line.rsplit(" ", 1)[-1].strip()


def run_locust(args: list[str], env: dict[str, str], seconds: int) -> dict[str, float]:
    """Run one headless Locust process to its end: its peak RSS (VmHWM, MB) and what it did."""
    with tempfile.TemporaryDirectory() as tmp:
        prefix = f"{tmp}/run"
        cmd = [sys.executable, "-m", "locust", "--headless", "--only-summary", "-t", f"{seconds}s", "--csv", prefix]
        cmd += args
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        peak_kb = 0
        deadline = time.monotonic() + seconds + 30
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                status = Path(f"/proc/{proc.pid}/status").read_text()
                peak_kb = max(peak_kb, int(status.split("VmHWM:")[1].split()[0]))
            except (FileNotFoundError, IndexError, ProcessLookupError):
                pass
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        with open(f"{prefix}_stats.csv") as f:
            total = next(row for row in csv.DictReader(f) if row["Name"] == "Aggregated")
    return {
        "peak_rss_mb": round(peak_kb / 1024, 1),
        "requests": int(total["Request Count"]),
        "failures": int(total["Failure Count"]),
    }


def measure(body_mb: float, users: int, seconds: int) -> dict[str, Any]:
    mock, url = start_mock()
    try:
        big = int(body_mb * 1024 * 1024 / FLOAT32 / BATCH)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        load = ["-u", str(users), "-r", str(users), "--host", url]
        poolbench = [
            "-f",
            "locustfiles/embeddings.py",
            *load,
            "--encoding-format",
            "bytes",
            "--input-len",
            "3",
            "--batch-size",
            str(BATCH),
        ]
        buffering = ["-f", str(HERE / "buffering_locustfile.py"), *load]
        runs: dict[str, Any] = {}
        for client, args in (("poolbench", poolbench), ("buffering", buffering)):
            for size, dims in (("tiny", 16), ("large", big)):
                extra = ["--dimensions", str(dims)] if client == "poolbench" else []
                runs[f"{client}_{size}"] = run_locust([*args, *extra], {**env, "BENCH_DIMENSIONS": str(dims)}, seconds)
        result: dict[str, Any] = {"body_mb": body_mb, "users": users, "seconds": seconds, "runs": runs}
        for client in ("poolbench", "buffering"):
            growth = runs[f"{client}_large"]["peak_rss_mb"] - runs[f"{client}_tiny"]["peak_rss_mb"]
            result[f"{client}_growth_mb"] = round(growth, 1)
        return result
    finally:
        mock.terminate()
        mock.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--body-mb", type=float, default=100)
    parser.add_argument("--users", type=int, default=4)
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
    out = HERE / "results" / "memory.json"
    out.write_text(json.dumps({**r, "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}, indent=2) + "\n")
    print(f"written: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
