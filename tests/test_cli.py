"""Locust as users run it: from the command line, headless, with CSV output."""

from __future__ import annotations

from pathlib import Path

import pytest
from locust.argument_parser import get_parser

import poolbench_locust.plugin  # noqa: F401
from tests.support.locust_run import csv_rows, run_locust


def test_demo_runs_against_the_embedded_mock_without_a_host(tmp_path):
    prefix = tmp_path / "demo"
    result = run_locust("locustfiles/demo.py", users=4, requests=60, csv=prefix)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "started the bundled mock server at http://127.0.0.1:" in result.stderr
    rows = csv_rows(Path(f"{prefix}_stats.csv"))
    for route in ("/v1/embeddings", "/rerank"):
        assert int(rows[route]["Request Count"]) > 10
        assert rows[route]["Failure Count"] == "0"


@pytest.mark.parametrize(
    ("locustfile", "args", "message"),
    [
        (
            "locustfiles/rerank.py",
            ["--encoding-format", "bytes"],
            "--encoding-format: RerankUser (/rerank) cannot answer bytes; it answers float",
        ),
        (
            "locustfiles/tei.py",
            ["--encoding-format", "base64", "TEIEmbedUser"],
            "--encoding-format: TEIEmbedUser (/embed) cannot answer base64; it answers float",
        ),
    ],
)
def test_bad_combination_stops_at_start_with_one_line(locustfile, args, message):
    result = run_locust(locustfile, *args, run_time="5s", host="http://127.0.0.1:9")
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batch-size", "0"], "argument --batch-size: must be a whole number >= 1, got 0"),
        (["--request-timeout", "-1"], "argument --request-timeout: must be a number of seconds > 0, got -1.0"),
        (["--encoding-format", "json"], "argument --encoding-format: must be one of float, base64, bytes, bytes_only"),
        (["--endpoint-path", "v1/embeddings"], "argument --endpoint-path: must start with '/'"),
    ],
)
def test_bad_option_value_names_the_option(args, message):
    result = run_locust("locustfiles/embeddings.py", *args, run_time="1s")
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_value_from_the_environment_names_the_option():
    result = run_locust("locustfiles/embeddings.py", run_time="1s", env={"LOCUST_BATCH_SIZE": "none"})
    assert result.returncode == 2
    assert "--batch-size: must be a whole number >= 1, got 'none'" in result.stderr


def test_options_are_in_the_web_ui_and_the_api_key_is_secret():
    parser = get_parser()
    shown = parser.args_included_in_web_ui
    for dest in (
        "model",
        "encoding_format",
        "embed_dtype",
        "endianness",
        "dimensions",
        "batch_size",
        "input_len",
        "documents",
        "api_key",
        "request_timeout",
        "endpoint_path",
        "no_validate",
        "check_vectors",
    ):
        assert dest in shown, dest
    assert "api_key" in parser.secret_args_included_in_web_ui
