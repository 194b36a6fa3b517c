"""Every way a response can be bad is one failed request event with a message that says what,
and the user goes on: its next request succeeds on the same client."""

from __future__ import annotations

import socket
import time

import pytest
from locust.stats import StatsError

from poolbench_locust import EmbeddingsUser, RerankUser
from tests.support.harness import Run, failure_text

TIMEOUT_S = 0.6

CASES = [
    # (fault, encoding, expected words in the failure)
    ("status-500", "float", "HTTP 500: "),
    ("status-503", "float", "HTTP 503: "),
    ("status-429", "float", "(Retry-After: 1)"),
    ("status-400", "float", "HTTP 400: "),
    ("html-error", "float", "HTTP 502: HTML page: 502 Bad Gateway"),
    ("reset-before-headers", "float", "connection reset by the server before the response headers"),
    ("close-before-headers", "float", "connection closed by the server before the response headers"),
    ("reset-mid-body", "bytes", "connection reset by the server in the middle of the body"),
    ("short-content-length", "float", "body truncated: connection closed before Content-Length bytes arrived"),
    ("cut-chunk", "bytes", "body truncated: connection closed in the middle of the chunked body"),
    ("stall-before-headers", "float", "timeout: no response headers within --request-timeout"),
    ("stall-mid-body", "bytes", "timeout: the body did not end within --request-timeout"),
    ("wrong-content-type", "float", "wrong content type: expected application/json, got application/octet-stream"),
    ("wrong-content-type", "bytes", "wrong content type: expected application/octet-stream, got application/json"),
    ("garbled-json", "float", "garbled JSON body"),
    ("no-metadata", "bytes", "no metadata header"),
    ("garbled-metadata", "bytes", "metadata header is not valid JSON"),
    ("metadata-offsets", "bytes", "metadata offsets do not match the body"),
    ("fewer-embeddings", "float", "expected 4 embeddings, got 3"),
    ("fewer-embeddings", "base64", "expected 4 embeddings, got 3"),
    ("fewer-embeddings", "bytes", "expected 4 embeddings in metadata, got 3"),
    ("corrupt-gzip", "float", "corrupt compressed body"),
    ("zero-vectors", "float", "embedding is all zeros"),
    ("zero-vectors", "bytes", "embedding is all zeros"),
    ("nan-vectors", "base64", "embedding holds NaN or infinite values"),
    ("nan-vectors", "bytes", "embedding holds NaN or infinite values"),
]


@pytest.mark.parametrize(("fault", "encoding", "expected"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_fault_is_one_failure_with_its_message(mock_server, fault, encoding, expected):
    args = ["--encoding-format", encoding, "--batch-size", "4", "--input-len", "16", "--check-vectors"]
    args += ["--request-timeout", str(TIMEOUT_S)]
    faulty = Run(
        EmbeddingsUser, mock_server.url, *args, mock_headers={"x-mock-fault": fault, "x-mock-stall-ms": "3000"}
    )
    started = time.perf_counter()
    event = faulty.one()
    assert expected in failure_text(event), failure_text(event)
    assert time.perf_counter() - started < TIMEOUT_S + 0.5, "nothing hangs past --request-timeout"
    assert "input_tokens" not in event["context"], "a failed request adds no tokens"

    healthy = Run(EmbeddingsUser, mock_server.url, *args)
    faulty.user.plan = healthy.user.plan  # same user, same connection pool, no fault header
    assert faulty.one()["exception"] is None, "the user goes on after the failure"


@pytest.mark.parametrize(
    ("encoding", "looked_for"),
    [
        ("float", "usage.prompt_tokens, usage.total_tokens, the x-compute-tokens header"),
        ("bytes", "metadata usage.prompt_tokens, the x-compute-tokens header"),
    ],
    ids=["float", "bytes"],
)
def test_an_answer_without_a_token_count_fails_only_with_require_server_tokens(mock_server, encoding, looked_for):
    args = ["--encoding-format", encoding, "--batch-size", "4", "--input-len", "16"]
    uncounted = {"x-mock-fault": "missing-usage"}
    event = Run(EmbeddingsUser, mock_server.url, *args, mock_headers=uncounted).one()
    assert event["exception"] is None, "a valid answer is never a failure for a missing count"
    assert (event["context"]["input_tokens"], event["context"]["token_source"]) == (64, "client-estimate")
    strict = Run(EmbeddingsUser, mock_server.url, *args, "--require-server-tokens", mock_headers=uncounted).one()
    assert failure_text(strict) == f"answer has no token count (looked for {looked_for}); --require-server-tokens"
    assert "input_tokens" not in strict["context"]


def test_bytes_only_size_mismatch_after_dims_were_learned(mock_server):
    args = ["--encoding-format", "bytes_only", "--batch-size", "4", "--input-len", "16"]
    run = Run(EmbeddingsUser, mock_server.url, *args)
    assert run.one()["exception"] is None  # learns 384 dimensions from the first good answer
    run.user.plan.headers = {**run.user.plan.headers, "x-mock-fault": "fewer-embeddings"}
    assert failure_text(run.one()).endswith("expected 4 x 384 x 4 = 6144 bytes, got 4608")


def test_failures_table_shows_the_message_of_vllm_json_error_body(mock_server):
    run = Run(RerankUser, mock_server.url, mock_headers={"x-mock-fault": "status-500"})
    shown = StatsError.parse_error(run.one()["exception"])  # what Locust's failures table shows
    assert shown.startswith("CatchResponseError('HTTP 500: ") and "injected" in shown


def test_connection_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        run = Run(EmbeddingsUser, f"http://127.0.0.1:{port}", "--request-timeout", "2")
        event = run.one()
    assert "connection refused" in failure_text(event)
    assert event["response_length"] == 0


@pytest.mark.parametrize(("encoding", "dims"), [("bytes", 8), ("bytes_only", 8)])
def test_an_answer_that_fails_its_check_counts_every_byte_received(mock_server, encoding, dims):
    """The body came whole; only its content was wrong: Locust's byte count must say so."""
    args = ["--encoding-format", encoding, "--batch-size", "4", "--dimensions", str(dims)]
    event = Run(EmbeddingsUser, mock_server.url, *args, mock_headers={"x-mock-fault": "fewer-embeddings"}).one()
    assert event["exception"] is not None
    assert event["response_length"] == 3 * dims * 4, "three float32 embeddings of the four asked for"
