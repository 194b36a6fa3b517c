"""The pooling table's E2E figures against the server's own time of every request, and goodput against
a count by hand: one process, and two worker processes merged by their master."""

from __future__ import annotations

import json
import math
import select
import statistics
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.hostile import LISTENING
from tests.test_cli import csv_rows, locust
from tests.test_metrics import free_port
from tests.trickle import SPLIT_MS

TOLERANCE = 0.001
PERCENTILES = ("50%", "90%", "95%", "99%")


def nearest_rank(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(fraction * len(ordered) - 1e-9))) - 1]


@pytest.fixture
def trickle_server() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.hostile", "tests.trickle:handler"], cwd=ROOT, stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 15)
        line = proc.stdout.readline().decode() if ready else ""
        assert line.startswith(LISTENING), line
        yield line.removeprefix(LISTENING).strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def server_times(url: str) -> list[float]:
    with urllib.request.urlopen(f"{url}/timings", timeout=5) as answer:
        return json.loads(answer.read())["server_ms"]


@pytest.mark.parametrize("processes", [None, 2], ids=["one process", "two workers"])
def test_e2e_figures_are_within_a_tenth_of_a_percent_of_the_servers_times(trickle_server, tmp_path, processes):
    prefix = tmp_path / "run"
    port = str(free_port())  # not Locust's default 5557, which another run on the machine may hold
    result = locust(
        "-f",
        "locustfiles/embeddings.py",
        "--host",
        trickle_server,
        "--batch-size",
        "1",
        "--input-len",
        "3",
        *(["--processes", str(processes), "--master-bind-port", port, "--master-port", port] if processes else []),
        "--headless",
        "-u",
        "8",
        "-r",
        "8",
        "-t",
        "12s",
        "--stop-timeout",
        "10",
        "--slo",
        f"e2e_ms={SPLIT_MS:g}",
        "--csv",
        str(prefix),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    server = server_times(trickle_server)
    pooling = csv_rows(Path(f"{prefix}_pooling.csv"))["Aggregated"]
    assert int(pooling["Request Count"]) == len(server) >= 20, (pooling["Request Count"], len(server))
    assert pooling["Failure Count"] == "0"

    expected = {f"E2E {p}": nearest_rank(server, int(p[:-1]) / 100) for p in PERCENTILES}
    expected["E2E Max"] = max(server)
    expected["E2E Mean"] = statistics.fmean(server)
    for column, true in expected.items():
        reported = float(pooling[column])
        assert abs(reported - true) <= TOLERANCE * true, (column, reported, true)
    assert float(pooling["E2E Stddev"]) == pytest.approx(statistics.stdev(server), rel=0.01)

    # Locust's own table of the same requests rounds to two significant digits (100 ms steps here):
    # the figures above are the exact ones.
    locust_row = csv_rows(Path(f"{prefix}_stats.csv"))["Aggregated"]
    misses = [
        p for p in PERCENTILES if abs(float(locust_row[p]) - expected[f"E2E {p}"]) > TOLERANCE * expected[f"E2E {p}"]
    ]
    assert misses, "Locust's rounded percentiles matched too: the durations no longer test the precision"

    # Goodput: the requests the server itself took less than the objective for, counted by hand.
    met = sum(1 for t in server if t <= SPLIT_MS)
    assert 0 < met < len(server)
    assert int(pooling["SLO Met"]) == met
    assert float(pooling["Goodput Input Tokens/s"]) == pytest.approx(
        float(pooling["Input Tokens/s"]) * met / len(server), rel=0.01, abs=0.1
    )
