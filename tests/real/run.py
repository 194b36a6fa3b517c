"""`make test-real`: builds the real servers' venvs (once), starts the real servers most tests use on free
loopback ports (devsupport/real/servers.py's STARTED_FIRST), runs `pytest -m real tests/real` with their URLs
in the environment, and stops them by PID. tests/real/conftest.py starts the others (and, run alone, any).

    .venv/bin/python tests/real/run.py [PYTEST ARGS]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
if __package__ in (None, ""):  # run as `python tests/real/run.py`: the root's devsupport/ on the path
    sys.path.insert(0, str(ROOT))

from devsupport.real.servers import STARTED_FIRST, RealServer, environment, install, start  # noqa: E402


def main(pytest_args: list[str]) -> int:
    began = time.monotonic()
    install()
    installed = time.monotonic()
    print(f"real: venvs ready in {installed - began:.0f} s", flush=True)
    servers: list[RealServer] = []
    try:
        # These start at once: vLLM's start is mostly its own compile and warm-up, Infinity's is short. The
        # others are started one at a time by the fixtures of the module that uses them (tests/real/conftest.py).
        with ThreadPoolExecutor(len(STARTED_FIRST)) as pool:
            futures = [pool.submit(start, name) for name in STARTED_FIRST]
        errors = [future.exception() for future in futures if future.exception() is not None]
        servers.extend(future.result() for future in futures if future.exception() is None)
        if errors:
            raise errors[0]
        for server in servers:
            print(f"real: {server.name} ready at {server.url} in {server.ready_s:.0f} s (pid {server.proc.pid})",
                  flush=True)  # fmt: skip
        env = {**os.environ, **environment(servers)}
        cmd = [sys.executable, "-m", "pytest", "-m", "real", "-p", "no:cacheprovider", str(HERE), *pytest_args]
        tests = subprocess.run(cmd, cwd=ROOT, env=env, check=False)
        return tests.returncode
    finally:
        for server in servers:
            server.stop()
        print(f"real: done in {time.monotonic() - began:.0f} s (servers stopped)", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
