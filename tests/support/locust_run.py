"""Locust as users run it: the command line spelled once, one headless run, and its CSV and JSON outputs."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import zygote

ROOT = Path(__file__).resolve().parents[2]
LOAD = ("--input-len", "6", "--batch-size", "3", "--documents", "4")
"""A small shape most runs use: six-word inputs, batches of three, four documents to rerank."""
PREFLIGHT_ON = {"LOCUST_NO_PREFLIGHT": "false"}
CONSISTENCY_ON = {"LOCUST_NO_CONSISTENCY": "false"}
"""The consistency check's reference requests, off in the suite's runs (tests/conftest.py)."""
"""tests/conftest.py turns the preflight off for the suite; a run given this env turns it back on."""
RUN_TIMEOUT_S = 60.0
COUNTED_RUN_CAP = "45s"
"""-t for a run bounded by `requests=` alone: a cap that only a broken run reaches, so that it still stops by
itself (and within RUN_TIMEOUT_S, so the test fails on its own assertions, not on a kill)."""


def csv_rows(path: Path | str) -> dict[str, dict[str, str]]:
    """A Locust-style CSV (stats, pooling, ...) by its Name column."""
    with Path(path).open(newline="") as f:
        return {row["Name"]: row for row in csv.DictReader(f)}


def locust_argv(
    locustfile: str | Path | None,
    *args: str,
    headless: bool = False,
    users: int | None = None,
    spawn_rate: float | None = None,
    run_time: str | None = None,
    requests: int | None = None,
    host: str | None = None,
    csv: Path | str | None = None,
    json_result: Path | str | None = None,
) -> list[str]:
    """`python -m locust [-f LOCUSTFILE] [--headless] [-u N -r R] [-t T] [--max-requests N] [--host H] [--csv P]
    [--json-result J] ARGS`.

    The spawn rate defaults to the number of users (all start at once), as almost every run here wants.
    `requests` ends the run once that many requests have ended, however slow the machine (a run of a few
    seconds on a loaded one may end none); without `run_time`, -t COUNTED_RUN_CAP still bounds it."""
    argv = [sys.executable, "-m", "locust"]
    if locustfile is not None:
        argv += ["-f", str(locustfile)]
    if headless:
        argv.append("--headless")
    if users is not None:
        argv += ["-u", str(users), "-r", str(users if spawn_rate is None else spawn_rate)]
    elif spawn_rate is not None:
        argv += ["-r", str(spawn_rate)]
    if run_time is not None:
        argv += ["-t", run_time]
    elif requests is not None:
        argv += ["-t", COUNTED_RUN_CAP]
    if requests is not None:
        argv += ["--max-requests", str(requests)]
    if host is not None:
        argv += ["--host", host]
    if csv is not None:
        argv += ["--csv", str(csv)]
    if json_result is not None:
        argv += ["--json-result", str(json_result)]
    return [*argv, *args]


@dataclass(frozen=True)
class Completed:
    """What a finished run left: its exit code and output, and where its CSV and JSON outputs are."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    csv_prefix: Path | None = None
    json_path: Path | None = None

    def csv(self, kind: str = "stats") -> dict[str, dict[str, str]]:
        """`{prefix}_{kind}.csv` by Name (kind: stats, pooling, pooling_history, failures, ...)."""
        assert self.csv_prefix is not None, "this run was not given csv="
        return csv_rows(f"{self.csv_prefix}_{kind}.csv")

    def json(self) -> Any:
        assert self.json_path is not None, "this run was not given json_result="
        return json.loads(self.json_path.read_text())


def run_locust(
    locustfile: str | Path | None,
    *args: str,
    headless: bool = True,
    users: int | None = None,
    spawn_rate: float | None = None,
    run_time: str | None = None,
    requests: int | None = None,
    host: str | None = None,
    csv: Path | str | None = None,
    json_result: Path | str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = RUN_TIMEOUT_S,
) -> Completed:
    """Run Locust to its end from the repository's root (headless unless told), within `timeout` seconds.

    A run still going at `timeout` is killed and the test fails with subprocess.TimeoutExpired."""
    argv = locust_argv(
        locustfile,
        *args,
        headless=headless,
        users=users,
        spawn_rate=spawn_rate,
        run_time=run_time,
        requests=requests,
        host=host,
        csv=csv,
        json_result=json_result,
    )
    # Forked from a zygote that has imported Locust once (tests/support/zygote.py), a real process all the same.
    done = zygote.run(argv, cwd=ROOT, env={**os.environ, **(env or {})}, timeout=timeout)
    return Completed(
        args=argv,
        returncode=done.returncode,
        stdout=done.stdout,
        stderr=done.stderr,
        csv_prefix=None if csv is None else Path(csv),
        json_path=None if json_result is None else Path(json_result),
    )


def wait_for_log(path: Path, text: str, proc: zygote.Forked | subprocess.Popen[bytes], timeout: float) -> None:
    """Wait until a running Locust (`proc`) has written `text` to its log; fail if it ends first or takes longer."""
    deadline = time.monotonic() + timeout
    while text not in path.read_text(errors="replace"):
        assert proc.poll() is None, f"locust ended before {text!r}:\n{path.read_text(errors='replace')[-4000:]}"
        assert time.monotonic() < deadline, f"no {text!r} within {timeout} s:\n{path.read_text(errors='replace')}"
        time.sleep(0.2)


def result_schema() -> dict[str, Any]:
    """The JSON result's whole schema, as a run's document is written: the plugin loaded (its setup registers
    every room's section), schema.json with each room's part merged (poolbench_locust/results/schema.py)."""
    import poolbench_locust.plugin  # noqa: F401
    from poolbench_locust.results.schema import whole

    return whole()


def valid_result(path: Path) -> dict[str, Any]:
    """A run's JSON result (--json-result), read and checked against the whole schema: the test fails naming
    the first places that do not fit."""
    import jsonschema

    document = json.loads(Path(path).read_text())
    validator = jsonschema.Draft202012Validator(result_schema())
    errors = [f"{e.json_path}: {e.message[:300]}" for e in validator.iter_errors(document)]
    assert not errors, errors[:5]
    return document
