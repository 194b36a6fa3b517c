"""A User class run as users run it, against the bundled mock it starts itself, and what the run reported."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from tests.support.locust_run import LOAD, run_locust

RUN_REQUESTS = 20
"""A run's length in requests, not seconds: a few seconds on a loaded machine may end none."""


@dataclass(frozen=True)
class CleanRun:
    """The one route's figures from a headless run: the client's pooling row and the mock's own /metrics."""

    requests: int
    failures: int
    input_tokens: int
    token_source: str
    mock_prompt_tokens: int
    """The tokens the bundled mock counted, from its /metrics as the run scraped them."""


def run_against_embedded_mock(tmp_path: Path, locustfile: str, user: str, route: str, *args: str) -> CleanRun:
    """`locust -f LOCUSTFILE USER` without --host, headless for RUN_REQUESTS requests with the small LOAD: the
    embedded mock answers in the flavor of the class's server."""
    prefix = tmp_path / user
    done = run_locust(locustfile, *LOAD, *args, user, users=2, requests=RUN_REQUESTS, csv=prefix)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "started the bundled mock server at http://127.0.0.1:" in done.stderr
    with Path(f"{prefix}_pooling.csv").open(newline="") as f:
        row = {r["Name"]: r for r in csv.DictReader(f)}[route]
    with Path(f"{prefix}_server_metrics.csv").open(newline="") as f:
        (server,) = list(csv.DictReader(f))
    return CleanRun(
        requests=int(row["Request Count"]),
        failures=int(row["Failure Count"]),
        input_tokens=int(row["Input Tokens"]),
        token_source=row["Token Source"],
        mock_prompt_tokens=int(server["Prompt Tokens"]),
    )
