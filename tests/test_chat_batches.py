"""Batched chat conversations (vLLM 0.34): EmbeddingsChatUser with --batch-size N sends `messages` as a
list of N conversations and expects N embeddings; --batch-size 1 keeps the one-conversation form."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import requests

import poolbench_locust as pb
from poolbench_locust.engine.plan import plan_for
from tests.support.harness import Run, failure_text, options


def _messages(user: type, *args: str) -> list[tuple[Any, int, int]]:
    """(messages, sequences, expected items) of each prepared request of a fresh copy of `user`."""
    plan = plan_for(type("U", (user,), {}), options(*args))
    return [(orjson.loads(r.body)["messages"], r.sequences, r.expected_items) for r in plan.requests]


def test_batch_size_n_sends_n_conversations_and_1_sends_one_conversation():
    for messages, sequences, items in _messages(pb.EmbeddingsChatUser, "--batch-size", "3", "--input-len", "4"):
        assert len(messages) == sequences == items == 3
        assert all(len(c) == 1 and c[0]["role"] == "user" and len(c[0]["content"].split()) == 4 for c in messages)
    for messages, sequences, items in _messages(pb.EmbeddingsChatUser, "--input-len", "4"):
        # the form every vLLM with chat embeddings takes: one conversation, a list of messages
        assert sequences == items == 1 and isinstance(messages[0], dict) and messages[0]["role"] == "user"
    drawn = _messages(pb.EmbeddingsChatUser, "--batch-size", "1:3", "--seed", "2")
    assert {len(m) for m, _, _ in drawn} == {1, 2, 3}, "a range: every request a list of conversations"
    assert all(isinstance(m[0], list) and len(m) == s for m, s, _ in drawn)


def test_a_dataset_s_conversations_are_batched_whole_with_their_roles(mock_server, tmp_path):
    path = tmp_path / "chat.jsonl"
    lines = [
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]},
        {"messages": [{"role": "user", "content": "one two three"}]},
        {"messages": [{"role": "user", "content": "four"}]},
    ]
    path.write_text("".join(orjson.dumps(line).decode() + "\n" for line in lines))
    args = ("--dataset", f"file:{path}", "--batch-size", "2")
    first, _, _ = _messages(pb.EmbeddingsChatUser, *args)[0]
    assert first == [lines[0]["messages"], lines[1]["messages"]]
    run = Run(pb.EmbeddingsChatUser, mock_server.url, *args)
    mock_server.reset()
    events = [run.one() for _ in range(3)]
    assert [failure_text(e) for e in events] == [""] * 3
    stats = mock_server.stats()
    assert sum(e["context"]["sequences"] for e in events) == stats["sequences"] == 6
    assert sum(e["context"]["input_tokens"] for e in events) == stats["prompt_tokens"]
    assert sum(e["context"]["client_tokens"] for e in events) == stats["prompt_tokens"]


@pytest.mark.parametrize("encoding", ["float", "base64", "bytes"])
def test_n_conversations_get_n_embeddings_and_one_too_few_is_one_failure_per_request(mock_server, encoding):
    args = ("--batch-size", "4", "--input-len", "5", "--encoding-format", encoding, "--check-vectors")
    run = Run(pb.EmbeddingsChatUser, mock_server.url, *args)
    mock_server.reset()
    events = [run.one() for _ in range(2)]
    assert [failure_text(e) for e in events] == ["", ""]
    assert [e["context"]["sequences"] for e in events] == [4, 4] and mock_server.stats()["sequences"] == 8
    assert sum(e["context"]["input_tokens"] for e in events) == mock_server.stats()["prompt_tokens"] == 40

    short = Run(pb.EmbeddingsChatUser, mock_server.url, *args, mock_headers={"x-mock-fault": "fewer-embeddings"})
    events = [short.one() for _ in range(2)]  # Run.one asserts one event per request
    expected = "expected 4 embeddings in metadata, got 3" if encoding == "bytes" else "expected 4 embeddings, got 3"
    assert [expected in failure_text(e) for e in events] == [True, True], [failure_text(e) for e in events]
    assert all("input_tokens" not in e["context"] for e in events), "a failed request adds no tokens"


def test_the_mock_answers_a_list_of_conversations_as_vllm_0_34_and_refuses_a_mixed_list(mock_server):
    def post(path: str, messages: Any) -> requests.Response:
        return requests.post(f"{mock_server.url}{path}", json={"messages": messages}, timeout=10)

    batch = [
        [{"role": "user", "content": "a b"}],
        [{"role": "system", "content": "c"}, {"role": "user", "content": "d"}],
    ]
    doc = post("/v1/embeddings", batch).json()
    assert [d["index"] for d in doc["data"]] == [0, 1] and doc["usage"]["prompt_tokens"] == 4
    mixed = post("/v1/embeddings", [batch[0], {"role": "user", "content": "e"}])
    assert mixed.status_code == 400 and "list of non-empty lists" in mixed.text
    assert post("/v1/embeddings", [[]]).status_code == 400
