"""The pooling CSV checked against Locust's own CSV and against what the mock server says it served."""

from __future__ import annotations

from pathlib import Path

from tests.support.locust_run import csv_rows


def assert_pooling_csv_matches(prefix: Path, mock_stats: dict) -> dict[str, dict[str, str]]:
    pooling = csv_rows(Path(f"{prefix}_pooling.csv"))
    locust_rows = csv_rows(Path(f"{prefix}_stats.csv"))
    assert int(pooling["Aggregated"]["Input Tokens"]) == mock_stats["prompt_tokens"] > 0
    assert int(pooling["Aggregated"]["Sequences"]) == mock_stats["sequences"]
    # every request body the client says it sent, the mock received (failed requests' too)
    assert int(pooling["Aggregated"]["Sent Bytes"]) == mock_stats["bytes_received"] > 0
    # text embeddings, rerank and score: one vector (or result) per sequence; no image tokens, shown empty
    assert pooling["Aggregated"]["Vectors"] == pooling["Aggregated"]["Sequences"]
    assert pooling["Aggregated"]["Image Tokens"] == ""
    for name, row in locust_rows.items():
        assert pooling[name]["Request Count"] == row["Request Count"], name
        assert pooling[name]["Failure Count"] == row["Failure Count"], name
    return pooling
