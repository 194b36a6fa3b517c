"""Tokens come from where they really are, and add up to what the server counted."""

from __future__ import annotations

import pytest

import poolbench_locust as pb
from tests.harness import Run, failure_text

REQUESTS = 5


@pytest.mark.parametrize(
    ("encoding", "source"),
    [("float", "server"), ("base64", "server"), ("bytes", "metadata"), ("bytes_only", "client-estimate")],
)
def test_embedding_tokens_add_up_to_the_mock_count(mock_server, encoding, source):
    run = Run(
        pb.EmbeddingsUser, mock_server.url, "--encoding-format", encoding, "--batch-size", "3", "--input-len", "7"
    )
    mock_server.reset()
    events = [run.one() for _ in range(REQUESTS)]
    assert [failure_text(e) for e in events] == [""] * REQUESTS
    assert {e["context"]["token_source"] for e in events} == {source}
    assert sum(e["context"]["input_tokens"] for e in events) == mock_server.stats()["prompt_tokens"]
    assert sum(e["context"]["sequences"] for e in events) == REQUESTS * 3
    assert sum(e["context"]["input_tokens"] for e in events) == REQUESTS * 3 * 7


ALL_USERS = [
    (pb.EmbeddingsUser, [], "server"),
    (pb.EmbeddingsChatUser, ["--batch-size", "2"], "server"),
    (pb.PoolingUser, ["--encoding-format", "bytes"], "metadata"),
    (pb.RerankUser, [], "server"),
    (pb.RerankUser, ["--endpoint-path", "/v2/rerank"], "server"),
    (pb.ScoreUser, [], "server"),
    (pb.ClassifyUser, ["--batch-size", "2"], "server"),
    (pb.CohereEmbedUser, ["--batch-size", "2"], "server"),
    (pb.InfinityEmbeddingsUser, ["--batch-size", "2"], "server"),
    (pb.InfinityRerankUser, [], "server"),
    (pb.TEIEmbedUser, ["--batch-size", "2"], "server"),
    (pb.TEIRerankUser, [], "server"),
]


@pytest.mark.parametrize(
    ("user_class", "args", "source"), ALL_USERS, ids=[f"{u.__name__}{''.join(a)}" for u, a, _ in ALL_USERS]
)
def test_every_user_class_succeeds_and_counts_like_the_server(mock_server, user_class, args, source):
    run = Run(user_class, mock_server.url, "--input-len", "5", "--documents", "3", *args)
    mock_server.reset()
    events = [run.one() for _ in range(3)]
    assert [failure_text(e) for e in events] == [""] * 3
    assert {e["context"]["token_source"] for e in events} == {source}
    stats = mock_server.stats()
    assert sum(e["context"]["input_tokens"] for e in events) == stats["prompt_tokens"]
    assert sum(e["context"]["sequences"] for e in events) == stats["sequences"]
    assert events[0]["name"] == run.user.plan.route
    assert events[0]["request_type"] == "POST"


def test_tei_server_timings_are_in_the_context(mock_server_factory):
    mock = mock_server_factory("--ttfb-ms", "40")
    event = Run(pb.TEIEmbedUser, mock.url).one()
    assert event["context"]["server_queue_ms"] >= 40
    assert {"server_inference_ms", "server_total_ms", "server_compute_ms"} <= event["context"].keys()


def test_large_metadata_header_is_read(mock_server):
    """On large batches vLLM's metadata header grows to tens of kilobytes: it must not be rejected."""
    run = Run(
        pb.EmbeddingsUser, mock_server.url, "--encoding-format", "bytes", "--batch-size", "512", "--input-len", "1"
    )
    event = run.one()
    assert event["exception"] is None, failure_text(event)
    assert event["context"]["input_tokens"] == 512
