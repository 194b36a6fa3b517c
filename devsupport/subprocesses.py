"""The processes a test or a benchmark starts (a mock, a browser), ended by their own handle."""

from __future__ import annotations

import subprocess


def stop(proc: subprocess.Popen[bytes], timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds; returns once it has exited."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
