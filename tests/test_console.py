"""The console summary after a run: the client's count and the gap beside the server's where both
exist, a warning in the log when the gap stays large, thousands separators, and the demo's mock
answering with a time to headers and a body transfer that the table can split."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from poolbench_locust.metrics.collector import PoolingStats
from poolbench_locust.metrics.console import cell, console_table
from poolbench_locust.metrics.table import rows
from poolbench_locust.metrics.tokengap import MIN_REQUESTS, GapWatch
from tests.support.locust_run import csv_rows, run_locust
from tests.support.process_servers import served


def _feed(stats: PoolingStats, n: int, server: int, client: int | None, name: str = "/embeddings") -> None:
    context = {"sequences": 1, "input_tokens": server, "token_source": "server", "ttfb_ms": 20.0}
    if client is not None:
        context |= {"client_tokens": client, "client_token_source": "client-estimate"}
    for _ in range(n):
        stats.on_request(name=name, response_time=25.0, response_length=4000, exception=None, context=context)


def test_the_console_shows_the_client_count_and_the_gap_when_both_exist() -> None:
    both, server_only = PoolingStats(), PoolingStats()
    _feed(both, 3, server=500, client=100)
    _feed(server_only, 3, server=500, client=None)
    header = console_table(both)[2].split()
    assert "Client" in header and "Gap" in header
    row = console_table(both)[-1].split()
    assert "300" in row and "400.0" in row  # 3 x 100 client tokens, (1500 - 300) / 300
    assert "Gap" not in console_table(server_only)[2]


def test_vectors_and_image_tokens_are_shown_only_where_some_answer_had_them() -> None:
    """Text embeddings: one vector per sequence and no image tokens, so neither column; a server that
    counted 0 image tokens shows 0, and a name without any count an empty cell, never a made-up 0."""
    text, images = PoolingStats(), PoolingStats()
    _feed(text, 3, server=50, client=None)
    base = {"sequences": 2, "input_tokens": 40, "token_source": "server", "request_bytes": 250_000}
    for name, context in (
        ("/v2/embed", {**base, "vectors": 14, "image_tokens": 0}),
        ("/v2/embed images", {**base, "image_tokens": 1290}),
    ):
        images.on_request(name=name, response_time=25.0, response_length=4000, exception=None, context=context)
    _feed(images, 1, server=50, client=None, name="/v1/embeddings")
    header = console_table(text)[2]
    assert "Sent MB/s" in header and "Vectors/s" not in header and "Image" not in header
    lines = console_table(images)
    header = lines[2].split("  ")
    columns = [c.strip() for c in header if c.strip()]
    assert columns.index("Image Tokens") == columns.index("Input Tokens/s") + 1
    assert columns.index("Vectors/s") == columns.index("Sequences/s") + 1
    table = rows(images)
    assert [(r["Name"], r["Image Tokens"], r["Vectors"], r["Sent Bytes"]) for r in table] == [
        ("/v1/embeddings", None, 1, 0),
        ("/v2/embed", 0, 14, 250_000),
        ("/v2/embed images", 1290, 2, 250_000),
        ("Aggregated", 1290, 17, 500_000),
    ]


def test_large_numbers_have_thousands_separators() -> None:
    stats = PoolingStats()
    _feed(stats, 2, server=617_284, client=None)
    assert "1,234,568" in console_table(stats)[-1]
    assert [cell(1234567), cell(38641.8), cell(0.093), cell(None), cell("server")] == [
        "1,234,567", "38,641.8", "0.093", "", "server",
    ]  # fmt: skip


def test_a_gap_beyond_20_percent_is_warned_once_per_name(caplog: pytest.LogCaptureFixture) -> None:
    stats, watch = PoolingStats(), GapWatch()
    _feed(stats, MIN_REQUESTS - 1, server=430, client=100)
    _feed(stats, MIN_REQUESTS, server=104, client=100, name="/close")
    with caplog.at_level(logging.WARNING, logger="poolbench_locust"):
        assert watch.check(stats) == []  # too few requests to say it stays
        _feed(stats, 1, server=430, client=100)
        first = watch.check(stats)
        _feed(stats, 5, server=430, client=100)
        again = watch.check(stats)
    assert len(first) == 1 and again == []
    assert first[0].startswith("Token Gap % of /embeddings is +330.0 %")
    assert "usage is probably not tokens" in first[0]
    assert [r.getMessage() for r in caplog.records] == first


def test_a_server_counting_characters_shows_in_the_console_and_the_log(tmp_path) -> None:
    locustfile = tmp_path / "infinity_embeddings.py"
    locustfile.write_text("from poolbench_locust import InfinityEmbeddingsUser  # noqa: F401\n")
    with served("infinity_counting_characters") as url:
        result = run_locust(str(locustfile), "--input-len", "8", host=url, users=2, requests=20)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = result.stderr[result.stderr.index("Pooling statistics") :]
    assert "Client Tokens" in summary and "Token Gap %" in summary
    warnings = [line for line in result.stderr.splitlines() if "Token Gap % of /embeddings" in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0], warnings


def test_the_demo_mock_splits_time_to_headers_and_transfer(tmp_path: Path) -> None:
    prefix = tmp_path / "demo"
    result = run_locust("locustfiles/demo.py", users=4, requests=40, csv=prefix)
    assert result.returncode == 0, result.stderr[-2000:]
    row = csv_rows(Path(f"{prefix}_pooling.csv"))["Aggregated"]
    ttfb, transfer, e2e = (float(row[f"{what} 50%"]) for what in ("TTFB", "Transfer", "E2E"))
    assert ttfb >= 20 and transfer >= 4 and e2e >= ttfb + 4, row
