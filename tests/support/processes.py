"""A Locust run in a session of its own, so that every process it forks can be found after it exits."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

import psutil

from tests.support.locust_run import ROOT


def session_members(session: int) -> list[psutil.Process]:
    """The live processes of a session (a zombie has ended: it only waits for its parent to read it)."""
    members = []
    for process in psutil.process_iter(["pid", "status"]):
        try:
            if os.getsid(process.pid) == session and process.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(process)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return members


def run_and_find_leftovers(
    argv: list[str], timeout: float = 60.0, grace: float = 3.0
) -> tuple[int | None, str, list[psutil.Process]]:
    """Run `argv` (tests.support.locust_run.locust_argv) in a new session; after it exits and `grace`
    seconds more, the processes of its session still alive, killed then so that no test leaves them behind."""
    # The output goes to a file, not a pipe: a process the run left behind would hold a pipe open, and
    # reading it to its end would wait for that process (CI waited out a timeout so) instead of failing.
    with tempfile.TemporaryFile("w+") as output_file:
        process = subprocess.Popen(
            argv, cwd=ROOT, stdout=output_file, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        try:
            process.wait(timeout=timeout)
        finally:
            if process.poll() is None:
                process.kill()
        output_file.seek(0)
        output = output_file.read()
    time.sleep(grace)
    left = session_members(process.pid)
    for member in left:
        member.kill()
    return process.returncode, output, left
