"""--warmup: its requests count nowhere, and every rate counts from its end (issue 17: -t 10s
--warmup 5 gave 2,652 req/s against 5,768 without it, the same load)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.support.locust_run import csv_rows, run_locust

RUN_S, WARMUP_S, RATE = 7, 3, 40
COUNTED_S = RUN_S - WARMUP_S


@pytest.mark.timing
@pytest.mark.parametrize("processes", [[], ["--processes", "2"]], ids=["one process", "master and 2 workers"])
def test_rates_count_from_the_end_of_warmup(mock_server, tmp_path, processes):
    prefix = tmp_path / "warm"
    result = run_locust(
        "locustfiles/embeddings.py",
        *("--stop-timeout", "5", "--warmup", str(WARMUP_S), "--request-rate", str(RATE)),
        *processes,
        host=mock_server.url,
        users=4,
        run_time=f"{RUN_S}s",
        csv=prefix,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    locust_row = csv_rows(Path(f"{prefix}_stats.csv"))["Aggregated"]
    pooling_row = csv_rows(Path(f"{prefix}_pooling.csv"))["Aggregated"]
    served = mock_server.stats()
    counted = int(locust_row["Request Count"])
    assert counted == int(pooling_row["Request Count"])
    # The hand count: the requests counted over the seconds after warm-up, at the rate that was sent.
    assert counted == pytest.approx(RATE * COUNTED_S, rel=0.2)
    by_hand = counted / COUNTED_S
    assert float(locust_row["Requests/s"]) == pytest.approx(by_hand, rel=0.12)
    tokens = int(pooling_row["Input Tokens"])
    assert float(pooling_row["Input Tokens/s"]) == pytest.approx(tokens / COUNTED_S, rel=0.12)
    # ...and the warm-up's requests were sent, and counted nowhere.
    assert served["requests"] - counted == pytest.approx(RATE * WARMUP_S, rel=0.35)
    assert "Warm-up over" in result.stderr


def test_a_sweep_step_counts_from_the_end_of_warmup(mock_server, tmp_path):
    prefix = tmp_path / "sweep"
    result = run_locust(
        "locustfiles/embeddings.py",
        *("--sweep-rates", "20,40", "--sweep-step-time", "4", "--warmup", "2", "--stop-timeout", "5"),
        host=mock_server.url,
        users=4,
        spawn_rate=1,
        csv=prefix,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    with open(f"{prefix}_sweep.csv") as f:
        first, second = csv.DictReader(f)
    assert float(first["Seconds"]) == pytest.approx(2, abs=0.5)  # the step's 4 s less the warm-up's 2
    assert float(first["Requests/s"]) == pytest.approx(20, rel=0.25)
    assert float(second["Requests/s"]) == pytest.approx(40, rel=0.25)
