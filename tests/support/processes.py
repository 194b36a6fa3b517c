"""A Locust run in a session of its own, so that every process it forks can be found after it exits."""

from __future__ import annotations

import os
import subprocess
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
    process = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
    time.sleep(grace)
    left = session_members(process.pid)
    for member in left:
        member.kill()
    return process.returncode, output, left
