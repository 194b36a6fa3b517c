"""The mock's wrong answers under load (--drift-above, --cache-drift, --flip-above): well-formed answers that
only a comparison with the right one finds, so that a client's consistency check has a server to catch.

Load is made deterministic: FILLERS requests that wait FILL_MS before their headers (`x-mock-ttfb-ms`) hold
the mock's in-flight count while the probes go, each probe then being one more in flight."""

from __future__ import annotations

import base64
import json
import math
import struct
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import orjson
import pytest
import requests

from poolbench_locust.mockserver import faults, routes, vectors
from poolbench_locust.mockserver.calls import Call
from poolbench_locust.mockserver.config import Controls, MockConfig
from tests.conftest import MockHandle

T = 10  # seconds: every request's timeout
DIM = 384  # a multiple of vectors.PERIOD: the drifted vector's cosine is vectors.DRIFT_COSINE exactly
FILLERS = 7
FILL_MS = 2000
"""Long enough for the fillers to be in flight together, and for the probes to go, on a busy machine."""
TEXT = "the quick brown fox"
DOCS = ["alpha beta", "gamma", "delta epsilon zeta", "eta"]


def post(server: MockHandle, path: str, body: object, **headers: str) -> requests.Response:
    resp = requests.post(server.url + path, json=body, headers=headers, timeout=T)
    assert resp.status_code == 200, resp.text
    return resp


def cosine(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b) == DIM and all(math.isfinite(x) for x in a + b)
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


HONEST = vectors.floats(DIM)


def embedding(server: MockHandle, how: str, text: str = TEXT) -> list[float]:
    """The mock's embedding of `text` in encoding `how` (float32), as floats."""
    resp = post(server, "/v1/embeddings", {"input": text, "encoding_format": how})
    if how in ("bytes", "bytes_only"):
        raw = resp.content
    elif how == "base64":
        raw = base64.b64decode(resp.json()["data"][0]["embedding"])
    else:
        return resp.json()["data"][0]["embedding"]
    return list(struct.unpack(f"<{DIM}f", raw))


@contextmanager
def in_flight(server: MockHandle, path: str, body: object) -> Iterator[list[Future[requests.Response]]]:
    """FILLERS requests held in flight at the mock (their answers, once done, in the futures)."""
    before = server.stats()["requests"]
    with ThreadPoolExecutor(FILLERS) as pool:
        held = [pool.submit(post, server, path, body, **{"x-mock-ttfb-ms": str(FILL_MS)}) for _ in range(FILLERS)]
        deadline = time.monotonic() + FILL_MS / 2000
        while server.stats()["requests"] < before + FILLERS:  # counted as they arrive, before their wait
            assert time.monotonic() < deadline, "the fillers did not reach the mock in time"
            time.sleep(0.01)
        yield held
        for future in held:
            future.result(timeout=T + FILL_MS / 1000)


@pytest.fixture(scope="module")
def honest(mock_server_factory) -> MockHandle:
    return mock_server_factory("--dim", str(DIM))


def test_the_honest_mock_answers_an_input_the_same_at_any_load(honest: MockHandle) -> None:
    alone = post(honest, "/v1/embeddings", {"input": [TEXT, "other"], "encoding_format": "bytes_only"}).content
    assert alone == struct.pack(f"<{DIM}f", *HONEST) * 2
    with in_flight(honest, "/v1/embeddings", {"input": TEXT, "encoding_format": "bytes_only"}) as held:
        loaded = post(honest, "/v1/embeddings", {"input": [TEXT, "other"], "encoding_format": "bytes_only"}).content
        for how in ("float", "base64", "bytes"):
            assert embedding(honest, how) == HONEST
    assert loaded == alone and {f.result().content for f in held} == {alone[: DIM * 4]}
    assert post(honest, "/v1/embeddings", {"input": TEXT, "encoding_format": "bytes_only"}).content == alone[: DIM * 4]


def test_drift_above_n_turns_the_vectors_away_while_more_than_n_are_in_flight(mock_server_factory) -> None:
    server = mock_server_factory("--dim", str(DIM), "--drift-above", "2")
    for how in ("float", "base64", "bytes", "bytes_only"):  # one in flight: exactly the honest answer
        assert embedding(server, how) == HONEST
    with in_flight(server, "/v1/embeddings", {"input": TEXT, "encoding_format": "float"}) as held:
        probes = {how: embedding(server, how) for how in ("float", "base64", "bytes", "bytes_only")}
    # the fillers were 1..7 in flight as they arrived: the first two honest, the later ones drifted
    fillers = sorted(cosine(HONEST, f.result().json()["data"][0]["embedding"]) for f in held)
    assert fillers == pytest.approx([vectors.DRIFT_COSINE] * (FILLERS - 2) + [1.0, 1.0], abs=1e-12)
    for how, vector in probes.items():  # 8 in flight: finite, non-zero, the right dimension, turned away
        assert vector != HONEST and any(vector), how
        assert cosine(HONEST, vector) == pytest.approx(1891 / 2080, abs=1e-12), how
    assert 0.90 < vectors.DRIFT_COSINE < 0.91
    assert server.stats()["faults"] == {}  # a wrong answer is no injected fault: the server thinks it fine
    for how in ("float", "bytes_only"):  # back to one in flight: honest again
        assert embedding(server, how) == HONEST


def test_drift_above_n_is_honest_at_n_in_flight(mock_server_factory) -> None:
    server = mock_server_factory("--dim", str(DIM), "--drift-above", str(FILLERS + 1))
    with in_flight(server, "/v1/embeddings", {"input": TEXT}) as held:
        assert embedding(server, "float") == HONEST  # FILLERS + 1 in flight: not more than N
    assert all(f.result().json()["data"][0]["embedding"] == HONEST for f in held)


def test_cache_drift_answers_an_input_seen_before_drifted(mock_server_factory) -> None:
    server = mock_server_factory("--dim", str(DIM), "--cache-drift")
    assert embedding(server, "float") == HONEST  # its first occurrence
    assert cosine(HONEST, embedding(server, "float")) == pytest.approx(vectors.DRIFT_COSINE, abs=1e-12)
    assert cosine(HONEST, embedding(server, "bytes_only")) == pytest.approx(vectors.DRIFT_COSINE, abs=1e-12)
    # per input, in a batch too: a new input is honest, one seen before (or earlier in the batch) is not
    data = post(server, "/v1/embeddings", {"input": ["new one", TEXT, "new one"]}).json()["data"]
    assert [cosine(HONEST, d["embedding"]) == 1.0 for d in data] == [True, False, False]
    server.reset()  # as a restarted server: it remembers nothing
    assert embedding(server, "float") == HONEST
    assert embedding(server, "float", "another") == HONEST  # the same vector for every input, when honest


def top(resp: requests.Response) -> tuple[int, list[float]]:
    """The top document of a vLLM /rerank or /score answer, and its scores in the documents' order."""
    doc = resp.json()
    if "results" in doc:
        scores = {r["index"]: r["relevance_score"] for r in doc["results"]}
        return doc["results"][0]["index"], [scores[i] for i in range(len(scores))]
    scores = [d["score"] for d in doc["data"]]
    return scores.index(max(scores)), scores


def test_flip_above_n_changes_the_top_document_while_more_than_n_are_in_flight(mock_server_factory) -> None:
    server = mock_server_factory("--flip-above", "2")
    rerank, score = {"query": "q", "documents": DOCS}, {"queries": "q", "documents": DOCS}
    honest = {path: top(post(server, path, body)) for path, body in (("/rerank", rerank), ("/score", score))}
    with in_flight(server, "/rerank", rerank):
        flipped = {path: top(post(server, path, body)) for path, body in (("/rerank", rerank), ("/score", score))}
    for path, (first, scores) in honest.items():
        flipped_first, flipped_scores = flipped[path]
        second = sorted(range(len(DOCS)), key=lambda i: -scores[i])[1]
        assert flipped_first == second != first, path  # the runner-up is now on top
        assert sorted(flipped_scores) == sorted(scores) and all(math.isfinite(s) for s in flipped_scores)
        assert flipped_scores[first] == scores[second] and flipped_scores[second] == scores[first]
        assert top(post(server, path, rerank if path == "/rerank" else score)) == (first, scores)  # 1 in flight


def answer(path: str, body: dict[str, Any], flavor: str, drift: bool = False, flip: bool = False) -> Any:
    """A route's answer made in-process, without what changes between two answers (ids, times)."""
    config = MockConfig(dim=64)
    call = Call(body, Controls.of({"x-mock-flavor": flavor}, config), config, drift=drift, flip=flip)
    found = routes.pooling_route(path)
    assert found is not None
    handler, call.params = found
    reply = routes.render(handler(call), call, accepts_gzip=False)
    assert reply.status == 200, reply.body
    if reply.content_type != "application/json":
        return reply.body
    return steady(orjson.loads(reply.body))


def steady(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: steady(v) for k, v in doc.items() if k not in ("id", "created")}
    return [steady(v) for v in doc] if isinstance(doc, list) else doc


@pytest.mark.parametrize(
    ("path", "body", "flavor"),
    [
        ("/v1/embeddings", {"input": ["a", "b"], "encoding_format": "base64", "embed_dtype": "bfloat16"}, "vllm"),
        ("/v1/embeddings", {"input": ["a"], "encoding_format": "bytes_only", "embed_dtype": "fp8_e4m3"}, "vllm"),
        ("/v1/embeddings", {"input": ["a"], "output_dtype": "int8"}, "voyage"),
        ("/pooling", {"input": ["a b c"], "task": "token_embed"}, "vllm"),
        ("/pooling", {"input": ["a b"], "task": "token_embed", "encoding_format": "bytes"}, "vllm"),
        ("/v2/embed", {"texts": ["a"], "embedding_types": ["float", "int8", "binary", "base64"]}, "cohere"),
        ("/embeddings", {"input": ["a"]}, "infinity"),
        ("/embed", {"inputs": ["a"]}, "tei"),
        ("/embed_all", {"inputs": ["a b"]}, "tei"),
        ("/api/embed", {"model": "mock-model", "input": ["a"]}, "ollama"),
        (
            "/v2/models/m/infer",
            {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["a"]}]},
            "kserve",
        ),
    ],
)
def test_every_vector_route_drifts(path: str, body: dict[str, Any], flavor: str) -> None:
    assert answer(path, body, flavor) == answer(path, body, flavor)
    assert answer(path, body, flavor, drift=True) != answer(path, body, flavor)


@pytest.mark.parametrize(
    ("path", "body", "flavor"),
    [
        ("/rerank", {"query": "q", "documents": DOCS}, flavor)
        for flavor in ("vllm", "tei", "sglang", "voyage", "infinity")
    ]
    + [
        ("/rerank", {"query": "q", "texts": DOCS}, "tei"),
        ("/v2/rerank", {"query": "q", "documents": DOCS}, "cohere"),
        ("/v1/ranking", {"query": {"text": "q"}, "passages": [{"text": d} for d in DOCS]}, "nim"),
        ("/v1/score", {"query": "q", "items": DOCS}, "sglang"),
        ("/similarity", {"inputs": {"source_sentence": "q", "sentences": DOCS}}, "tei"),
    ],
)
def test_every_ranking_flips(path: str, body: dict[str, Any], flavor: str) -> None:
    assert answer(path, body, flavor) == answer(path, body, flavor)
    assert answer(path, body, flavor, flip=True) != answer(path, body, flavor)


def test_the_drifted_vector_is_the_honest_one_with_its_first_value_of_each_period_negated() -> None:
    drifted = vectors.floats(DIM, "drift")
    assert [i for i, (a, b) in enumerate(zip(HONEST, drifted, strict=True)) if a != b] == list(range(0, DIM, 64))
    assert all(d == -h for h, d in zip(HONEST[::64], drifted[::64], strict=True))
    assert cosine(HONEST, drifted) == pytest.approx(vectors.DRIFT_COSINE, abs=1e-15)
    assert json.loads(vectors.json_floats(DIM, "drift")) == drifted


def test_the_memory_of_inputs_answered_is_bounded() -> None:
    answered = faults.Answered(kept=3)
    assert [answered.again(t) for t in ("a", "b", "c", "a", "d")] == [False, False, False, True, False]
    assert answered.again("b") is False  # the least recently answered was forgotten first
    assert answered.again(["token", 1]) is False and answered.again(["token", 1]) is True
