"""A real Prometheus for the tests: Debian's `prometheus` binary (.ci/run installs it), on a free
loopback port, with a configuration and a storage directory of its own, scraping every second; stopped
by its PID when the block ends."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devsupport.ports import free_port

BINARY = "prometheus"
START_TIMEOUT_S = 30.0


@dataclass
class Prometheus:
    url: str
    log: Path

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result vector (or matrix/scalar result as given); fails on an API error."""
        params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=10) as r:
            answer = json.load(r)
        assert answer["status"] == "success", f"{expr}: {answer}"
        return answer["data"]["result"]

    def value(self, expr: str, at: float | None = None) -> float:
        """The one value of a query that yields exactly one sample."""
        result = self.query(expr, at)
        assert len(result) == 1, f"{expr}: {len(result)} samples: {result}"
        return float(result[0]["value"][1])


def binary() -> str:
    found = shutil.which(BINARY)
    if found is None:
        pytest.skip("no prometheus binary: `apt-get install prometheus` (.ci/run installs it)")
    return found


@contextlib.contextmanager
def prometheus(jobs: Mapping[str, str], root: Path) -> Iterator[Prometheus]:
    """Prometheus scraping each job's target (host:port) every second."""
    root.mkdir(parents=True, exist_ok=True)
    scrape_configs = [{"job_name": job, "static_configs": [{"targets": [target]}]} for job, target in jobs.items()]
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": scrape_configs,
    }
    (root / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    log = root / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                binary(),
                f"--config.file={root / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=root,
        )
    server = Prometheus(f"http://127.0.0.1:{port}", log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert proc.poll() is None, f"prometheus exited:\n{log.read_text(errors='replace')[-3000:]}"
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as r:
                if r.status == 200:
                    break
            assert time.monotonic() < deadline, f"prometheus not ready:\n{log.read_text(errors='replace')[-3000:]}"
            time.sleep(0.2)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
