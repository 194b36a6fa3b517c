"""Token-level answers (--pooling-task token_embed/token_classify, late chunking, TEI's /embed_all): the task
sent, the runs a class cannot serve stopped at start, every row of every encoding counted against the
tokens, and each broken answer exactly one failed request that says what was wrong."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
import requests

from poolbench_locust import users
from poolbench_locust.wire import count_words
from tests.support.harness import Run, failure_text, first_body, start_error
from tests.support.hostile import HostileServer, response, serve_requests
from tests.support.locust_run import run_locust

VARIED = ("--batch-size", "3", "--input-len", "4:40")
"""Inputs of varied lengths: every request's token total differs from the one before."""


def test_the_task_and_late_chunking_reach_the_body() -> None:
    assert first_body(users.PoolingUser, "--pooling-task", "token_classify")["task"] == "token_classify"
    assert "task" not in first_body(users.PoolingUser), "no --pooling-task: the model's own task, as vLLM's default"
    body = first_body(users.EmbeddingsUser, "--pooling-task", "token_embed", "--late-chunk-size", "8")
    assert body["late_chunking_params"] == {"chunk_size": 8}
    assert "task" not in body and body["encoding_format"] == "float"
    assert (
        first_body(users.PoolingUser, "--pooling-task", "token_embed", "--late-chunk-size", "8")["task"]
        == "token_embed"
    )


@pytest.mark.parametrize(
    ("user_class", "args", "line"),
    [
        (users.RerankUser, ["--pooling-task", "token_embed"], "--pooling-task: RerankUser (/rerank) sends no task"),
        (users.EmbeddingsChatUser, ["--pooling-task", "token_embed"], "--pooling-task: EmbeddingsChatUser ("),
        (
            users.TEIEmbedAllUser,
            ["--pooling-task", "token_embed"],
            "--pooling-task: TEIEmbedAllUser (/embed_all) sends",
        ),
        (
            users.EmbeddingsUser,
            ["--pooling-task", "token_classify"],
            "--pooling-task: EmbeddingsUser (/v1/embeddings) cannot send token_classify: it sends token_embed",
        ),
        (
            users.PoolingUser,
            ["--pooling-task", "embed&token_classify"],
            "--pooling-task: PoolingUser (/pooling) cannot send embed&token_classify: vLLM answers: The "
            "'embed&token_classify' pooling task is only available through an IO processor plugin.",
        ),
        (
            users.EmbeddingsUser,
            ["--pooling-task", "token_embed", "--encoding-format", "base64"],
            "--encoding-format: EmbeddingsUser (/v1/embeddings) answers a token_embed model in float, not base64",
        ),
        (
            users.EmbeddingsUser,
            ["--pooling-task", "token_embed", "--dimensions", "64"],
            "--dimensions: a token_embed answer's rows are the model's own size",
        ),
        (users.PoolingUser, ["--late-chunk-size", "8"], "--late-chunk-size: late chunking is a token_embed model's"),
        (
            users.PoolingUser,
            ["--pooling-task", "token_embed", "--late-chunk-size", "8", "--truncate", "end"],
            "--truncate: vLLM's late chunking refuses truncation",
        ),
        (
            users.PoolingUser,
            ["--pooling-task", "token_embed", "--late-chunk-size", "8", "--encoding-format", "bytes_only"],
            "--tokenizer: a late-chunked bytes_only body holds one row per chunk, which does not give its tokens",
        ),
    ],
    ids=lambda v: getattr(v, "__name__", None) or (v[1] if isinstance(v, list) else None),
)
def test_a_run_a_class_cannot_serve_stops_at_start_naming_the_option(user_class: type, args: list[str], line: str):
    error = start_error(user_class, *args)
    assert error is not None and error.startswith(line), error
    assert "\n" not in error


def _client_words(event: dict[str, Any]) -> int:
    return event["context"]["input_tokens"]


@pytest.mark.parametrize("encoding", ["float", "base64", "bytes", "bytes_only"])
@pytest.mark.parametrize("task", ["token_embed", "token_classify"])
def test_every_token_level_answer_of_the_mock_passes_with_its_rows_counted(mock_server, task, encoding):
    exact = ["--count-tokens-with-server"] if encoding == "bytes_only" else []
    run = Run(
        users.PoolingUser, mock_server.url, "--pooling-task", task, "--encoding-format", encoding, *VARIED, *exact
    )
    events = [run.one() for _ in range(6)]
    assert [failure_text(e) for e in events] == [""] * 6
    # the mock answers one row per word, and counts its usage so: the rows are the tokens
    assert [e["context"]["vectors"] for e in events] == [_client_words(e) for e in events]
    assert len({e["context"]["vectors"] for e in events}) > 1, "varied lengths: varied row counts"


def test_late_chunking_answers_one_row_per_chunk_and_classify_no_rows(mock_server):
    chunked = Run(
        users.PoolingUser, mock_server.url, "--pooling-task", "token_embed", "--late-chunk-size", "5", *VARIED
    )
    for _ in range(4):
        event = chunked.one()
        assert failure_text(event) == ""
        assert event["context"]["vectors"] < event["context"]["input_tokens"]
    pooled = Run(users.PoolingUser, mock_server.url, "--pooling-task", "classify", "--batch-size", "3").one()
    assert failure_text(pooled) == "" and "vectors" not in pooled["context"], "one vector per input: no rows to show"


def test_bytes_only_token_rows_are_checked_against_each_requests_own_tokens(mock_server_factory):
    """The first answer used to fix the dimension (body / (inputs x width)), so every later answer whose
    token total differed failed. A token_embed model answers token rows by default: no task needed."""
    mock = mock_server_factory("--task", "token_embed", "--dim", "16")
    args = ("--pooling-task", "token_embed", "--encoding-format", "bytes_only", "--count-tokens-with-server")
    run = Run(users.PoolingUser, mock.url, *args, *VARIED, "--check-vectors")
    events = [run.one() for _ in range(8)]
    assert [failure_text(e) for e in events] == [""] * 8
    assert [e["response_length"] for e in events] == [e["context"]["vectors"] * 16 * 4 for e in events]
    assert len({e["response_length"] for e in events}) > 1


@pytest.mark.parametrize(("task", "width"), [("token_embed", 16), ("token_classify", 2)])
def test_bytes_only_token_totals_without_a_tokenizer_are_the_mocks_own_count(mock_server_factory, task, width):
    """No token source: one float answer at start tells a row's width, then each body's size gives its tokens,
    labelled body-size, which add up to the mock's own count of the prompts it served."""
    mock = mock_server_factory("--dim", "16")
    run = Run(
        users.PoolingUser,
        mock.url,
        "--pooling-task",
        task,
        "--encoding-format",
        "bytes_only",
        *VARIED,
        "--check-vectors",
    )
    before = mock.stats()  # the plan's float probe was served already
    events = [run.one() for _ in range(6)]
    assert [failure_text(e) for e in events] == [""] * 6
    assert {e["context"]["token_source"] for e in events} == {"body-size"}
    tokens = [e["context"]["input_tokens"] for e in events]
    assert sum(tokens) == mock.stats()["prompt_tokens"] - before["prompt_tokens"]
    assert [e["context"]["vectors"] for e in events] == tokens, "the mock drops no row: one row per token"
    assert [e["response_length"] for e in events] == [t * width * 4 for t in tokens]
    assert len(set(tokens)) > 1, "varied lengths: each count from its own body"


# Hostile servers answering like a token-level vLLM, each wrong in one way.

DIM = 8


def _token_server(
    encoding: str,
    dropped: int = 0,
    short_from: int | None = None,
    bad_shape: bool = False,
    tei: bool = False,
    ragged: int = 0,
    usage: bool = True,
    served: list[int] | None = None,
    probes: list[dict[str, Any]] | None = None,
) -> Callable[[bytes, bytes, int], bytes]:
    """Answers /tokenize (one token per word) and a token-level /pooling (or TEI's /embed_all): `dropped`
    rows fewer than tokens per input (as BGE-M3's pooler drops BOS), and from its answer number `short_from`
    on (0: the first) one more row fewer in the last input; `bad_shape`: a `bytes` metadata shape one row too many;
    `ragged`: that many bytes more at the end of every binary body (no whole number of rows); `usage`: whether its
    float answers hold one. A request in float where the server speaks another encoding (the client's row probe
    at start) is answered in float, recorded in `probes` and not numbered; each numbered answer's token total is
    appended to `served`."""
    row = [0.25] * DIM
    raw_row = b"\x00\x00\x80\x3e" * DIM  # float32 0.25, little-endian as the client's native order here

    answered = itertools.count()  # the token-level answers, /tokenize's and the probe's not counted

    def answer(head: bytes, body: bytes, _n: int) -> bytes:
        request = orjson.loads(body)
        if head.startswith(b"POST /tokenize"):
            return response(body=orjson.dumps({"count": count_words(request["prompt"]), "max_model_len": 512}))
        asked = encoding if tei else request.get("encoding_format", "float")
        if asked != encoding and probes is not None:
            probes.append(request)
        n = next(answered) if asked == encoding else -1
        texts = request["inputs"] if tei else request["input"]
        counts = [count_words(t) for t in texts]
        rows = [c - dropped for c in counts]
        if short_from is not None and n >= short_from:
            rows[-1] -= 1
        if served is not None and n >= 0:
            served.append(sum(counts))
        counted = {"usage": {"prompt_tokens": sum(counts), "total_tokens": sum(counts)}} if usage else {}
        if tei:
            doc = [[row] * r for r in rows]
            return response(
                body=orjson.dumps(doc), headers=[("x-compute-time", "1"), ("x-compute-tokens", str(sum(counts)))]
            )
        if asked == "float":
            data = [{"index": i, "object": "pooling", "data": [row] * r} for i, r in enumerate(rows)]
            return response(body=orjson.dumps({"id": "p", "object": "list", "data": data, **counted}))
        raw = b"".join(raw_row * r for r in rows) + b"\x00" * ragged
        items, start = [], 0
        for i, r in enumerate(rows):
            end = start + r * len(raw_row)
            shape = [r + 1 if bad_shape and i == 0 else r, DIM]
            items.append({"index": i, "embed_dtype": "float32", "endianness": "little", "start": start, "end": end})
            items[-1]["shape"] = shape
            start = end
        headers = [] if encoding == "bytes_only" else [("metadata", orjson.dumps({"data": items, **counted}).decode())]
        return response(body=raw, headers=headers, content_type="application/octet-stream")

    return answer


@pytest.fixture
def hostile() -> Iterator[Callable[..., str]]:
    servers: list[HostileServer] = []

    def start(*args: Any, **kwargs: Any) -> str:
        servers.append(HostileServer(serve_requests(_token_server(*args, **kwargs))))
        return servers[-1].url

    yield start
    for server in servers:
        server.close()


def _events(url: str, count: int, *args: str, user_class: type = users.PoolingUser) -> list[dict[str, Any]]:
    run = Run(user_class, url, "--pooling-task", "token_embed", *args, "--input-len", "20:30", "--batch-size", "3")
    return [run.one() for _ in range(count)]


def test_a_token_level_answer_with_one_row_missing_is_one_failure_each(hostile):
    events = _events(hostile("float", short_from=0), 4)
    for text in [failure_text(e) for e in events]:
        rows, _, rest = text.partition(" token rows for ")
        tokens = int(rest.split(" ")[0])
        assert int(rows) == tokens - 1, text
        assert rest.endswith(
            f"input tokens (the server's usage) in 3 inputs, expected one row per token ({tokens}), "
            "or up to 2 fewer per input for special tokens a pooler drops"
        ), text


def test_a_model_that_drops_its_bos_row_passes_until_one_more_row_is_missing(hostile):
    events = _events(hostile("float", dropped=1, short_from=3), 5)
    assert [failure_text(e) for e in events[:3]] == [""] * 3
    assert [e["context"]["vectors"] for e in events[:3]] == [e["context"]["input_tokens"] - 3 for e in events[:3]]
    for event in events[3:]:
        text = failure_text(event)
        tokens = int(text.split(" token rows for ")[1].split(" ")[0])
        assert text.endswith(
            f"expected {tokens - 3} (one row per token, less the 1 special-token row per input the model's pooler "
            "drops, as its earlier answers did)"
        ), text


def test_a_bytes_only_body_one_row_short_is_one_failure_each(hostile):
    url = hostile("bytes_only", short_from=0)
    args = ("--encoding-format", "bytes_only", "--count-tokens-with-server")
    texts = [failure_text(e) for e in _events(url, 4, *args)]
    # Σ tokens in 60..90 of 3 inputs: no whole hidden size fits one row fewer, whatever a pooler drops
    assert all(t.startswith("bytes_only body of ") and "is not a whole number of token rows" in t for t in texts), texts


def test_a_bytes_only_body_one_row_short_after_good_ones_says_the_size_expected(hostile):
    url = hostile("bytes_only", short_from=3)
    events = _events(url, 5, "--encoding-format", "bytes_only", "--count-tokens-with-server")
    assert [failure_text(e) for e in events[:3]] == [""] * 3
    for event in events[3:]:
        text = failure_text(event)
        tokens = int(text.split(" bytes for ")[1].split(" ")[0])
        got = int(text.removeprefix("bytes_only body of ").split(" ")[0])
        assert got == (tokens - 1) * DIM * 4
        assert text.endswith(f"expected {tokens} token rows x {DIM} x 4 = {tokens * DIM * 4} bytes"), text
        assert event["response_length"] == got, "a whole body that failed its check counts every byte"


def test_bytes_only_tokens_from_the_body_size_add_back_the_rows_a_pooler_drops(hostile):
    """A BGE-M3-like model drops each input's BOS row: the float probe's rows against its usage teach it, and
    each body's rows plus one per input are the server's own count. The probe asks the same inputs in float."""
    served: list[int] = []
    probes: list[dict[str, Any]] = []
    url = hostile("bytes_only", dropped=1, served=served, probes=probes)
    args = ("--encoding-format", "bytes_only", "--embed-dtype", "float32", "--endianness", "little")
    events = _events(url, 4, *args)
    assert [failure_text(e) for e in events] == [""] * 4
    assert [e["context"]["input_tokens"] for e in events] == served
    assert [e["context"]["vectors"] for e in events] == [t - 3 for t in served]
    assert {e["context"]["token_source"] for e in events} == {"body-size"}
    assert len(probes) == 1 and probes[0]["encoding_format"] == "float"
    assert "embed_dtype" not in probes[0] and "endianness" not in probes[0]
    assert probes[0]["task"] == "token_embed" and len(probes[0]["input"]) == 3


def test_a_bytes_only_body_that_is_no_whole_number_of_rows_is_one_failure_each(hostile):
    """Without a token source, a body two bytes too long cannot be a count of rows of the width learnt at start."""
    events = _events(hostile("bytes_only", ragged=2), 3, "--encoding-format", "bytes_only")
    for event in events:
        text = failure_text(event)
        size = int(text.removeprefix("bytes_only body of ").split(" ")[0])
        assert text == (
            f"bytes_only body of {size} bytes is not a whole number of token rows of {DIM} values x 4 = {DIM * 4} "
            "bytes (the width learnt at start from a float answer)"
        )
        assert size % (DIM * 4) == 2 and event["response_length"] == size


def test_bytes_only_without_a_token_source_stops_at_start_only_when_no_row_can_be_learnt(hostile):
    args = ("--pooling-task", "token_embed", "--encoding-format", "bytes_only")
    assert start_error(users.PoolingUser, *args, host=hostile("bytes_only")) is None
    start = (
        "--tokenizer: PoolingUser (/pooling): the token rows of a token_embed bytes_only answer run together, and "
        "their width could not be learnt from one float answer at start: "
    )
    end = "; give --tokenizer or --count-tokens-with-server, or use --encoding-format bytes"
    cases = {
        "http://127.0.0.1:9": "POST http://127.0.0.1:9/pooling failed: ",
        hostile("bytes_only", usage=False): "it held no token count to tell the rows a pooler drops",
        hostile("bytes_only", dropped=3): "token rows for ",
    }
    for host, why in cases.items():
        error = start_error(users.PoolingUser, *args, host=host)
        assert error is not None and error.startswith(start) and error.endswith(end), error
        assert why in error and "\n" not in error, error
    exact = start_error(users.PoolingUser, *args, "--count-tokens-with-server", host=hostile("bytes_only", usage=False))
    assert exact is None, "an exact count of each input needs no probe"


def test_a_bytes_metadata_shape_that_disagrees_with_its_offsets_is_one_failure_each(hostile):
    events = _events(hostile("bytes", bad_shape=True), 3, "--encoding-format", "bytes")
    for event in events:
        text = failure_text(event)
        assert text.startswith("metadata item 0 shape [") and "does not match its offsets: end - start = " in text
        shape = orjson.loads(text.removeprefix("metadata item 0 shape ").split(" does")[0])
        assert text.endswith(f"the shape says {shape[0] * shape[1] * 4}") and shape[1] == DIM


def test_tei_embed_all_rows_are_counted_against_its_token_header(hostile):
    good = Run(users.TEIEmbedAllUser, hostile("float", tei=True), "--input-len", "20:30", "--batch-size", "3")
    event = good.one()
    assert failure_text(event) == "" and event["context"]["vectors"] == event["context"]["input_tokens"]
    short = Run(
        users.TEIEmbedAllUser, hostile("float", tei=True, short_from=0), "--input-len", "20:30", "--batch-size", "3"
    )
    text = failure_text(short.one())
    assert (
        "token rows for " in text and "input tokens (the x-compute-tokens header) in 3 inputs, expected one row" in text
    )


def test_a_headless_token_embed_run_against_the_bundled_mock_has_no_failure(tmp_path):
    """No --host: the bundled mock's model is a token_embed one, so /v1/embeddings answers token rows."""
    done = run_locust(
        "locustfiles/embeddings.py",
        "--pooling-task", "token_embed", "--late-chunk-size", "4", *VARIED,
        users=2, requests=20, csv=tmp_path / "run",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    row = done.csv()["Aggregated"]
    assert int(row["Request Count"]) > 0 and row["Failure Count"] == "0", row
    assert math.isfinite(float(row["Average Response Time"]))


def test_the_mock_refuses_what_vllm_refuses_of_a_token_embed_model(mock_server_factory):
    url = mock_server_factory("--task", "token_embed").url

    def post(path: str, body: dict[str, Any]) -> requests.Response:
        return requests.post(url + path, json={"input": ["a b c", "d"], **body}, timeout=10)

    rows = post("/v1/embeddings", {}).json()["data"]
    assert [len(item["embedding"]) for item in rows] == [3, 1], "one row per word of each input"
    refused = {
        "/v1/embeddings": [({"encoding_format": "base64"}, "encoding_format must be 'float'"), ({"dimensions": 8}, "")],
        "/pooling": [
            ({"task": "embed"}, "Unsupported task: 'embed'"),
            ({"task": "embed&token_classify"}, "only available through an IO processor plugin"),
            ({"task": "encode"}, "`encode` task was removed"),
            ({"task": "token_embed", "late_chunking_params": {"chunk_size": 0}}, "chunk_size must be a positive"),
        ],
    }
    for path, cases in refused.items():
        for body, words in cases:
            answer = post(path, body)
            assert answer.status_code == 400 and words in answer.json()["error"]["message"], (path, body, answer.text)
    chunks = post("/pooling", {"task": "token_embed", "late_chunking_params": {"chunk_size": 2}}).json()["data"]
    assert [len(item["data"]) for item in chunks] == [2, 1]


def test_a_matrix_where_one_vector_was_expected_is_one_failure_naming_the_task(mock_server_factory):
    """A token-level model asked without --pooling-task answers matrices: once taken for a speed-up."""
    url = mock_server_factory("--task", "token_embed").url
    for user_class in (users.PoolingUser, users.EmbeddingsUser):
        event = Run(user_class, url, "--batch-size", "2").one()
        assert failure_text(event) == (
            "embedding 0 is a matrix of token rows, not one vector: the model is a token-level one (give "
            "--pooling-task token_embed or token_classify to count its rows)"
        )
