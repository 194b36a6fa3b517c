"""Scaling: requests/s of one Locust process and of 1 and 2 worker processes, and the merged token counts.

    python bench/scaling.py [--seconds 10] [--users 16] [--rounds 3]

poolbench-locust runs against the bundled mock server (its own process) as one plain process, then
as `--processes 1` and `--processes 2` (a master and its workers on this machine). `--stop-timeout`
lets every request in flight finish, so the master's merged pooling figures (the Aggregated row of
PREFIX_pooling.csv) must equal what the mock served (/mock/stats) exactly. The setups take turns,
`--rounds` times (a shared machine's speed drifts by a quarter between runs of a minute apart); the
median requests/s counts, and every run must be exact.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/scaling.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import HERE, ROOT, Mock, Payload, machine_line, run_locust, table, write_result

PAYLOAD = Payload("float", batch=64, dims=1024, words=16)
"""Large JSON: parsing it is the client's work, so that the client, not the mock, is the limit."""
SETUPS = (("one process", []), ("--processes 1", ["--processes", "1"]), ("--processes 2", ["--processes", "2"]))


def _one(mock: Mock, extra: list[str], seconds: float, users: int) -> dict:
    mock.reset()
    before = mock.cpu_seconds()
    load = ["-u", str(users), "-r", str(users), "--host", mock.url, *PAYLOAD.poolbench_args(), *extra]
    r = run_locust(HERE / "poolbench_locustfile.py", load, seconds)
    served = mock.stats()
    pooling = r.pooling or {}
    run = {
        "requests_per_s": float(r.stats["Requests/s"]),
        "requests": int(r.stats["Request Count"]),
        "failures": int(r.stats["Failure Count"]),
        "mock_requests": served["requests"],
        "mock_ok": served["ok"],
        "input_tokens": int(pooling.get("Input Tokens", -1)),
        "mock_prompt_tokens": served["prompt_tokens"],
        "sequences": int(pooling.get("Sequences", -1)),
        "mock_sequences": served["sequences"],
        "client_cpu_s": round(r.finished.cpu_s, 2),
        "mock_cpu_s": round(mock.cpu_seconds() - before, 2),
    }
    run["tokens_exact"] = run["input_tokens"] == run["mock_prompt_tokens"] and run["sequences"] == run["mock_sequences"]
    run["requests_exact"] = run["requests"] == run["mock_requests"] == run["mock_ok"] + run["failures"]
    return run


def measure(seconds: float, users: int, rounds: int) -> dict:
    each: dict[str, list[dict]] = {label: [] for label, _ in SETUPS}
    with Mock() as mock:
        for _ in range(rounds):
            for label, extra in SETUPS:
                each[label].append(_one(mock, extra, seconds, users))
    runs = {}
    for label, done in each.items():
        rps = statistics.median(r["requests_per_s"] for r in done)
        middle = min(done, key=lambda r: abs(r["requests_per_s"] - rps))
        runs[label] = {
            **middle,
            "requests_per_s": rps,
            "requests_per_s_each": [r["requests_per_s"] for r in done],
            "all_exact": all(r["tokens_exact"] and r["requests_exact"] for r in done),
            "rounds": done,
        }
    base = runs["one process"]["requests_per_s"]
    for run in runs.values():
        run["speedup"] = round(run["requests_per_s"] / base, 2) if base else None
    return {"seconds": seconds, "users": users, "rounds": rounds, "payload": "64 x 1024 float JSON", "runs": runs}


def report(r: dict) -> str:
    rows = [
        [
            label,
            f"{m['requests_per_s']:.1f}",
            " ".join(f"{x:.0f}" for x in m["requests_per_s_each"]),
            f"{m['speedup']:.2f}x",
            m["requests"],
            m["mock_ok"],
            m["failures"],
            m["input_tokens"],
            m["mock_prompt_tokens"],
            "yes" if m["all_exact"] else "NO",
            f"{m['client_cpu_s']:.1f}",
            f"{m['mock_cpu_s']:.1f}",
        ]
        for label, m in r["runs"].items()
    ]
    head = [
        "setup",
        "req/s (median)",
        "each round",
        "vs one",
        "requests",
        "mock ok",
        "failures",
        "input tokens",
        "mock tokens",
        "exact",
    ]
    return "\n".join(
        [
            f"poolbench-locust, {r['users']} users, {r['rounds']} rounds of {r['seconds']:g} s, {r['payload']}, "
            "mock in its own process (figures of the median round; exact: every round)",
            table([*head, "client CPU s", "mock CPU s"], rows),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    r = measure(args.seconds, args.users, args.rounds)
    print(report(r))
    print(machine_line())
    print(f"written: {write_result('scaling', r).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
