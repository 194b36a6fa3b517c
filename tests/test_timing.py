"""The measured time ends at the last byte of the body, for every encoding, and Locust's own
`stream=True` does not: proven against a mock server that trickles the body over 300 ms."""

from __future__ import annotations

import time

import pytest
from locust import FastHttpUser

from poolbench_locust import EmbeddingsUser
from tests.support.harness import Run, failure_text, options

TRICKLE_MS = 300
BATCH, DIM = 64, 65536  # 64 x 65536 float32 = 16 MiB
SIXTEEN_MIB = BATCH * DIM * 4


@pytest.fixture(scope="module")
def trickling_mock(mock_server_factory):
    return mock_server_factory("--body-ms", str(TRICKLE_MS), "--dim", str(DIM))


@pytest.mark.parametrize(
    ("encoding", "extra"),
    [
        ("bytes", ["--batch-size", str(BATCH)]),
        ("bytes_only", ["--batch-size", str(BATCH)]),
        # JSON of 16 MiB of floats would be ~80 MB of text: a smaller answer, trickled the same.
        ("float", ["--batch-size", "4", "--dimensions", "1024"]),
        ("base64", ["--batch-size", "4", "--dimensions", "1024"]),
    ],
)
@pytest.mark.timing
def test_response_time_includes_the_trickled_body(trickling_mock, encoding, extra):
    run = Run(EmbeddingsUser, trickling_mock.url, "--encoding-format", encoding, "--input-len", "8", *extra)
    event = run.one()
    assert event["exception"] is None, failure_text(event)
    assert event["response_time"] >= TRICKLE_MS
    assert event["context"]["ttfb_ms"] < TRICKLE_MS / 3, "headers were sent at once"
    assert event["context"]["ttfb_ms"] < event["response_time"]
    if encoding in ("bytes", "bytes_only"):
        assert event["response_length"] == SIXTEEN_MIB
    else:
        assert event["response_length"] > 4 * 1024


def test_plain_fasthttpuser_stream_stops_the_clock_at_the_headers(trickling_mock):
    """The trap this project exists to avoid: the same request through Locust's own stream=True."""
    events: list[dict] = []

    class PlainStreamUser(FastHttpUser):
        host = trickling_mock.url

    from locust.env import Environment

    env = Environment(user_classes=[PlainStreamUser], parsed_options=options())
    env.events.request.add_listener(lambda **e: events.append(e))
    user = PlainStreamUser(env)
    body = b'{"input": ["a b c"], "encoding_format": "bytes"}'
    resp = user.client.post("/v1/embeddings", data=body, headers={"Content-Type": "application/json"}, stream=True)
    received = sum(len(chunk) for chunk in iter(lambda: resp.read(1 << 20), b""))
    assert received == DIM * 4
    assert len(events) == 1
    assert events[0]["response_time"] < TRICKLE_MS / 3, "Locust's stream=True timed the headers only"


@pytest.mark.timing
@pytest.mark.parametrize("encoding", ["float", "bytes"])
def test_the_clock_stops_at_the_last_byte_before_the_answer_is_checked(trickling_mock, monkeypatch, encoding):
    """Parsing and checking are the client's work, not the server's: a slow check must not show."""
    from poolbench_locust.endpoints.forms import JsonForm
    from poolbench_locust.endpoints.vllm_bytes import BytesForm
    from poolbench_locust.engine import answer_checks

    slow_ms = 400
    # the answer's form reads it (JSON parsed, metadata against the body), then the engine's checks judge it
    for owner, name in ((JsonForm, "read"), (BytesForm, "read"), (answer_checks, "judge")):
        real = getattr(owner, name)

        def slow(*args, _real=real, **kwargs):
            time.sleep(slow_ms / 2000)  # blocks the whole process, as a heavy parse would
            return _real(*args, **kwargs)

        monkeypatch.setattr(owner, name, slow)
    run = Run(
        EmbeddingsUser, trickling_mock.url, "--encoding-format", encoding, "--batch-size", "4", "--dimensions", "1024"
    )
    started = time.perf_counter()
    event = run.one()
    wall_ms = (time.perf_counter() - started) * 1000
    assert event["exception"] is None, failure_text(event)
    assert wall_ms >= TRICKLE_MS + slow_ms, "the check did run"
    assert TRICKLE_MS <= event["response_time"] < TRICKLE_MS + slow_ms / 2


def test_the_engine_fires_the_event_locust_fires_with_its_fields(mock_server):
    """The engine sends without Locust's session and fires the request event itself: Locust's stats, CSV, web UI,
    master and any listener of the user's own get the fields FastHttpSession gives a plain FastHttpUser's."""
    from locust.env import Environment

    class PlainUser(FastHttpUser):
        host = mock_server.url

    plain: list[dict] = []
    env = Environment(user_classes=[PlainUser], parsed_options=options())
    env.events.request.add_listener(lambda **e: plain.append(e))
    body, headers = b'{"input": ["a b"]}', {"Content-Type": "application/json"}
    PlainUser(env).client.post("/v1/embeddings", data=body, headers=headers)

    run = Run(EmbeddingsUser, mock_server.url, "--batch-size", "2", "--input-len", "4")
    before = time.time()
    event = run.one()
    assert event["exception"] is None, failure_text(event)
    assert sorted(event) == sorted(plain[0])
    assert (event["request_type"], event["name"]) == ("POST", "/v1/embeddings")
    assert event["url"] == f"{mock_server.url}/v1/embeddings"
    assert before <= event["start_time"] <= time.time()
    assert event["response"].status_code == 200
    assert event["response"].url == plain[0]["response"].url == event["url"]
    assert event["response"].request.method == "POST"
    assert 0 < event["response_time"] < 5000 and event["response_length"] > 0
