"""Locust's web UI as a user drives it: a locust process serving it on 127.0.0.1, and its HTTP API."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from typing import Any

import requests

from devsupport.ports import free_port
from tests.support import zygote
from tests.support.locust_run import ROOT, locust_argv

START_TIMEOUT_S = 30.0


class WebUI:
    """`locust -f LOCUSTFILE --web-host 127.0.0.1 --web-port PORT ...`, stopped by `close`."""

    def __init__(self, locustfile: str, *args: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        # A file, not a pipe: a pipe nobody reads could fill up and block locust. Closed in close().
        self._log = tempfile.TemporaryFile()  # noqa: SIM115
        # Forked from the suite's zygote (tests/support/zygote.py), a real process all the same.
        self.proc = zygote.popen(
            locust_argv(locustfile, *("--web-host", "127.0.0.1", "--web-port", str(self.port)), *args),
            cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
            # Ctrl+C as a terminal delivers it: a shell's background job (`(cmd &)`, as one CI launch
            # was) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt.
            sigint_default=True,
        )  # fmt: skip
        try:
            self._wait_until_it_answers()
        except BaseException:
            # a web UI that never answered is stopped here: no caller holds it to close (such runs were left
            # serving after their tests had failed on a busy machine)
            self.close()
            raise

    def _wait_until_it_answers(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert self.proc.poll() is None, self.log()
            try:
                # Its JSON, not its page: Locust builds the page's option list in time cubic in the options (0.3 s
                # of CPU a page with the plugin's), and on a busy machine each probe that timed out queued another.
                requests.get(f"{self.base}/stats/requests", timeout=5)
                return
            # not listening yet, or (on a busy machine) listening but not yet answering
            except (requests.ConnectionError, requests.Timeout):
                assert time.monotonic() < deadline, "the web UI never answered"
                time.sleep(0.2)

    def swarm(self, **form: Any) -> dict[str, Any]:
        return requests.post(f"{self.base}/swarm", data=form, timeout=30).json()

    def stop(self) -> None:
        requests.post(f"{self.base}/stop", timeout=30).raise_for_status()
        self.wait_for("stopped")

    def requests_json(self) -> dict[str, Any]:
        return requests.get(f"{self.base}/stats/requests", timeout=10).json()

    def wait_for(self, state: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while (now := self.requests_json()["state"]) != state:
            assert time.monotonic() < deadline, f"state {now}, not {state}"
            time.sleep(0.1)

    def locust_total(self) -> dict[str, Any]:
        return next(row for row in self.requests_json()["stats"] if row["name"] == "Aggregated")

    def pooling_total(self) -> dict[str, Any]:
        return requests.get(f"{self.base}/pooling/stats", timeout=10).json()[-1]

    def interrupt(self, timeout: float = 30.0) -> int:
        """Ctrl+C, as a user ends a web UI: Locust writes its --html report (only then: not on SIGTERM),
        its quitting listeners write the CSV files and the JSON result; its exit code."""
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:  # what locust said is the only clue to why
            raise AssertionError(f"locust still runs {timeout:g} s after Ctrl+C:\n{self.log()[-4000:]}") from None

    def log(self) -> str:
        # pread, not seek and read: locust writes through a copy of this descriptor, which shares its
        # offset; a seek here would move locust's next line over the start of the log.
        fd, chunks, offset = self._log.fileno(), [], 0
        while chunk := os.pread(fd, 1 << 20, offset):
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks).decode(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
