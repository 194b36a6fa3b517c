"""vLLM's own benchmark client as a load-generating process of the benchmarks.

    python bench/vllm_client.py --url URL --body-file FILE --out OUT --impl vllm|loop|headers
        [--concurrency N | --rate R] [--seconds S] [--warmup W] [--module PATH]

`--impl vllm` calls `async_request_openai_embeddings` of vLLM's `vllm/benchmarks/lib/endpoint_request_func.py`
on an aiohttp session made as `vllm bench serve` makes it. The module comes from the vLLM wheel
(`pip download --no-deps vllm`, kept in a cache outside the project: see `prepare()`) and is imported
by its path, without `vllm/__init__.py` and its heavy imports. `--impl loop` is our own aiohttp
loop doing what that function does (the clock stops after the whole body was read), for when the
module cannot be had; `--impl headers` stops the clock at the response headers, as vLLM's
benchmark did before its fix. Results (each request's latency, and the process's own CPU time from
getrusage over the window that opens `--warmup` seconds in) go to OUT as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

MODULE = "vllm/benchmarks/lib/endpoint_request_func.py"
CACHE = Path(os.environ.get("BENCH_VLLM_CACHE", Path.home() / ".cache" / "poolbench-locust-bench"))
BINARY = ("bytes", "bytes_only")
STUBBED: list[str] = []


def prepare() -> tuple[Path | None, str]:
    """Where vLLM's request-function module is (fetched once into CACHE), and how it was had or why not."""
    cached = CACHE / "endpoint_request_func.py"
    version_file = CACHE / "vllm-version.txt"
    if not cached.exists():
        try:
            wheel = os.environ.get("BENCH_VLLM_WHEEL") or _download()
            with zipfile.ZipFile(wheel) as z:
                source = z.read(MODULE)
            CACHE.mkdir(parents=True, exist_ok=True)
            cached.write_bytes(source)
            version_file.write_text(Path(wheel).name.split("-")[1])
        except Exception as e:  # no network, no wheel, a wheel without the module: say which
            return None, f"vLLM's request function could not be had: {type(e).__name__}: {e}"
    try:
        load(cached)
    except Exception as e:
        return None, f"vLLM's {MODULE} could not be imported: {type(e).__name__}: {e}"
    version = version_file.read_text().strip() if version_file.exists() else "?"
    return cached, f"vLLM {version} {MODULE}, imported by path (without vllm/__init__.py){_stub_note()}"


def _download() -> str:
    tmp = tempfile.mkdtemp(prefix="vllm-wheel-")
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:", "vllm", "-d", tmp]
    subprocess.run(cmd, check=True, timeout=900, capture_output=True)
    return str(next(Path(tmp).glob("vllm-*.whl")))


def _stub_note() -> str:
    return "; its `regex` import stubbed with the stdlib `re` (used for one re.search)" if STUBBED else ""


def load(path: Path) -> Any:
    """Import the module by path. Its imports: aiohttp (the `bench` extra), tqdm, and `regex`, which
    it uses for one `re.search`: stubbed with the stdlib `re` when it is not installed."""
    try:
        import regex  # noqa: F401
    except ImportError:
        sys.modules["regex"] = re
        STUBBED.append("regex")
    spec = importlib.util.spec_from_file_location("vllm_endpoint_request_func", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def session(limit: int) -> Any:
    """The aiohttp session as `vllm bench serve` makes it (vllm/benchmarks/serve.py, make_session)."""
    import aiohttp

    connector = aiohttp.TCPConnector(
        limit=limit,
        limit_per_host=limit,
        ttl_dns_cache=300,
        use_dns_cache=True,
        keepalive_timeout=60,
        enable_cleanup_closed=True,
        force_close=False,
        ssl=False,
    )
    return aiohttp.ClientSession(connector=connector, trust_env=True, timeout=aiohttp.ClientTimeout(total=6 * 60 * 60))


def request_function(impl: str, url: str, body: dict[str, Any], module_path: str | None) -> Any:
    """An `async (session) -> (latency s, ok)` for one request of the chosen implementation."""
    if impl == "vllm":
        mod = load(Path(module_path or CACHE / "endpoint_request_func.py"))
        extra = {k: v for k, v in body.items() if k not in ("model", "input")}

        async def vllm(s: Any) -> tuple[float, bool]:
            given = mod.RequestFuncInput(
                prompt=body["input"], api_url=url, prompt_len=0, output_len=0, model=body["model"], extra_body=extra
            )
            out = await mod.async_request_openai_embeddings(given, s)
            return out.latency, out.success

        return vllm
    payload = {"model": body["model"], "input": body["input"], "truncate_prompt_tokens": -1, **body}
    binary = body.get("encoding_format") in BINARY
    headers = {"Content-Type": "application/json"}

    async def loop(s: Any) -> tuple[float, bool]:
        st = time.perf_counter()
        async with s.post(url=url, headers=headers, json=payload) as response:
            latency = time.perf_counter() - st  # where vLLM's benchmark stopped the clock before its fix
            if response.status != 200:
                return latency, False
            if impl == "headers":
                if not binary:
                    await response.json()  # read later; binary bodies were never read
                return latency, True
            if binary:
                async for _ in response.content.iter_any():
                    pass
            else:
                await response.read()
            latency = time.perf_counter() - st
            if binary:
                json.loads(response.headers.get("metadata", "{}"))
            else:
                await response.json()
            return latency, True

    return loop


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    body = json.loads(Path(args.body_file).read_bytes())
    call = request_function(args.impl, args.url.rstrip("/") + "/v1/embeddings", body, args.module)
    samples: list[tuple[float, None, bool]] = []
    marks: dict[str, dict[str, float]] = {}
    done = 0

    def snapshot() -> dict[str, float]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {"time": time.monotonic(), "cpu_s": usage.ru_utime + usage.ru_stime, "requests": done}

    async def one(s: Any) -> None:
        nonlocal done
        latency, ok = await call(s)
        done += 1
        samples.append((latency * 1000, None, ok))

    async with session(args.concurrency if args.rate is None else 0) as s:
        t0 = time.monotonic()
        end = t0 + args.seconds

        async def open_window() -> None:
            await asyncio.sleep(args.warmup)
            marks["start"] = snapshot()

        opener = asyncio.create_task(open_window())
        if args.rate is None:  # closed loop: N requests in flight, each sent when the last one ended

            async def worker() -> None:
                while time.monotonic() < end:
                    await one(s)

            await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        else:  # open loop at a fixed rate, as `vllm bench serve --request-rate R --burstiness inf`
            tasks, i = [], 0
            while (due := t0 + i / args.rate) < end:
                await asyncio.sleep(max(due - time.monotonic(), 0))
                tasks.append(asyncio.create_task(one(s)))
                i += 1
            await asyncio.gather(*tasks)
        marks["end"] = snapshot()
        await opener
    start, stop = marks["start"], marks["end"]
    window = {k: stop[k] - start[k] for k in ("time", "cpu_s", "requests")}
    return {"window": {**window, "failures": sum(not ok for *_, ok in samples)}, "samples": samples}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--body-file", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--impl", choices=("vllm", "loop", "headers"), default="vllm")
    p.add_argument("--module", help="path of endpoint_request_func.py (default: the cache)")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--rate", type=float, help="requests/s, open loop (default: closed loop)")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=0.0)
    args = p.parse_args()
    os.environ["NO_PROXY"] = "127.0.0.1,localhost"  # trust_env=True as vLLM's; never a proxy for loopback
    Path(args.out).write_text(json.dumps(asyncio.run(main_async(args))))


if __name__ == "__main__":
    main()
