"""The bundled mock server, over the wire: every route's shape, the binary encodings, exact stats,
body trickling, and every fault doing what it says (raw sockets where the bytes matter)."""

from __future__ import annotations

import base64
import gzip
import json
import math
import socket
import struct
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest
import requests

from poolbench_locust.mockserver import FAULTS
from poolbench_locust.mockserver.__main__ import main
from poolbench_locust.mockserver.tei import TEI_MAX_INPUT_LENGTH
from poolbench_locust.wire import DTYPE_SIZES, count_words
from tests.conftest import MockHandle

T = 5  # seconds: every request's timeout
TEXTS = ["the quick brown fox", "jumps over", "the lazy dog again and again"]
WORDS = sum(count_words(t) for t in TEXTS)


@pytest.fixture(scope="module")
def server(mock_server_factory) -> MockHandle:
    return mock_server_factory()


def post(server: MockHandle, path: str, body: object, **headers: str) -> requests.Response:
    return requests.post(server.url + path, json=body, headers=headers, timeout=T)


# --- raw HTTP, for the faults and timings that requests would hide --------------------------------


@dataclass
class Raw:
    head: bytes = b""
    body: bytes = b""
    """Bytes after the header block, framing included."""
    end: str = ""
    """How the connection ended: "eof", "reset" or "timeout"."""
    t_sent: float = 0.0
    t_headers: float | None = None
    t_last: float | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def status(self) -> int:
        return int(self.head.split(b" ", 2)[1])


def raw_request(server: MockHandle, path: str, body: object, timeout: float = T, **headers: str) -> Raw:
    """One request with `Connection: close`, read until the server ends the connection."""
    payload = json.dumps(body).encode()
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
        "Connection: close",
    ]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    raw = Raw()
    data = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as sock:
        raw.t_sent = time.monotonic()
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
        while True:
            try:
                chunk = sock.recv(1 << 16)
            except ConnectionResetError:
                raw.end = "reset"
                break
            except TimeoutError:
                raw.end = "timeout"
                break
            if not chunk:
                raw.end = "eof"
                break
            data += chunk
            raw.t_last = time.monotonic()
            if raw.t_headers is None and b"\r\n\r\n" in data:
                raw.t_headers = raw.t_last
    raw.head, _, raw.body = data.partition(b"\r\n\r\n")
    for line in raw.head.decode().split("\r\n")[1:]:
        name, _, value = line.partition(":")
        raw.headers[name.strip().lower()] = value.strip()
    return raw


def dechunk(framed: bytes) -> tuple[bytes, bool]:
    """The body of a chunked stream, and whether its terminating chunk arrived."""
    out, pos = b"", 0
    while (eol := framed.find(b"\r\n", pos)) >= 0:
        size = int(framed[pos:eol], 16)
        if size == 0:
            return out, True
        out += framed[eol + 2 : eol + 2 + size]
        if len(framed) < eol + 2 + size + 2:
            return out, False
        pos = eol + 2 + size + 2
    return out, False


# --- routes ----------------------------------------------------------------------------------------


def test_embeddings_float_shape_usage_and_model(server):
    resp = post(server, "/v1/embeddings", {"input": TEXTS, "model": "m1"})
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
    doc = resp.json()
    assert doc["object"] == "list" and doc["model"] == "m1" and doc["id"] and isinstance(doc["created"], int)
    assert [d["index"] for d in doc["data"]] == [0, 1, 2]
    assert {d["object"] for d in doc["data"]} == {"embedding"}
    vector = doc["data"][0]["embedding"]
    assert len(vector) == 384 and all(math.isfinite(v) for v in vector) and any(vector)
    assert doc["usage"] == {"prompt_tokens": WORDS, "total_tokens": WORDS}
    assert post(server, "/v1/embeddings", {"input": "a b"}).json()["model"] == "mock-model"


@pytest.mark.parametrize(
    ("body", "items", "tokens"),
    [
        ({"input": "one two three"}, 1, 3),
        ({"input": [5, 6, 7, 8]}, 1, 4),
        ({"input": [[1, 2], [3, 4, 5]]}, 2, 5),
        ({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there you"}]}, 1, 5),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a b c"}]}]}, 1, 3),
    ],
    ids=["text", "token-ids", "token-id-lists", "chat", "chat-parts"],
)
def test_embedding_input_forms(server, body, items, tokens):
    doc = post(server, "/v1/embeddings", body).json()
    assert len(doc["data"]) == items
    assert doc["usage"]["prompt_tokens"] == doc["usage"]["total_tokens"] == tokens


def test_dimensions_field_overrides_the_dim_header(server):
    doc = post(server, "/v1/embeddings", {"input": "a", "dimensions": 8}, **{"x-mock-dim": "16"}).json()
    assert len(doc["data"][0]["embedding"]) == 8
    doc = post(server, "/v1/embeddings", {"input": "a"}, **{"x-mock-dim": "16"}).json()
    assert len(doc["data"][0]["embedding"]) == 16


def _decode(raw: bytes, dtype: str, endianness: str) -> list[float]:
    order = ">" if endianness == "big" else "<" if endianness == "little" else "="
    if dtype == "float32":
        return list(struct.unpack(f"{order}{len(raw) // 4}f", raw))
    if dtype == "float16":
        return list(struct.unpack(f"{order}{len(raw) // 2}e", raw))
    if dtype == "bfloat16":
        halves = [raw[i : i + 2] for i in range(0, len(raw), 2)]
        wide = b"".join(h + b"\0\0" if order == ">" else b"\0\0" + h for h in halves)
        return list(struct.unpack(f"{'>' if order == '>' else '<'}{len(wide) // 4}f", wide))
    return [float(b) for b in raw]  # fp8: bytes only; finiteness is checked by the bit pattern


@pytest.mark.parametrize("dtype", list(DTYPE_SIZES))
@pytest.mark.parametrize("endianness", ["native", "big", "little"])
def test_base64_decodes_to_dim_times_dtype_size(server, dtype, endianness):
    body = {
        "input": TEXTS,
        "encoding_format": "base64",
        "embed_dtype": dtype,
        "endianness": endianness,
        "dimensions": 96,
    }
    doc = post(server, "/v1/embeddings", body).json()
    assert len(doc["data"]) == 3 and doc["usage"]["prompt_tokens"] == WORDS
    raw = base64.b64decode(doc["data"][0]["embedding"], validate=True)
    assert len(raw) == 96 * DTYPE_SIZES[dtype]
    if dtype.startswith("fp8"):
        assert all(b & 0x7F != 0x7F for b in raw) and any(raw), "no NaN pattern, not all zero"
    else:
        values = _decode(raw, dtype, "little" if endianness == "native" and sys.byteorder == "little" else endianness)
        assert all(math.isfinite(v) for v in values) and any(values)
        if endianness != "native":
            assert values[:2] == [-0.4921875, -0.4765625], "same values in every dtype and byte order"


@pytest.mark.parametrize("dtype", list(DTYPE_SIZES))
def test_bytes_body_metadata_and_chunked_encoding(server, dtype):
    batch, dim = 5, 130
    body = {"input": ["w"] * batch, "encoding_format": "bytes", "embed_dtype": dtype, "dimensions": dim, "model": "m2"}
    raw = raw_request(server, "/v1/embeddings", body)
    assert raw.status == 200 and raw.end == "eof"
    assert raw.headers["content-type"] == "application/octet-stream"
    assert raw.headers["transfer-encoding"] == "chunked" and "content-length" not in raw.headers
    payload, complete = dechunk(raw.body)
    width = dim * DTYPE_SIZES[dtype]
    assert complete and len(payload) == batch * width
    meta = json.loads(raw.headers["metadata"])
    assert meta["model"] == "m2" and meta["id"] and isinstance(meta["created"], int)
    assert meta["usage"] == {"prompt_tokens": batch, "total_tokens": batch}
    assert [(d["index"], d["start"], d["end"]) for d in meta["data"]] == [
        (i, i * width, (i + 1) * width) for i in range(batch)
    ]
    assert {(d["embed_dtype"], d["endianness"], tuple(d["shape"])) for d in meta["data"]} == {(dtype, "native", (dim,))}


def test_bytes_only_has_no_metadata_and_the_same_body(server):
    # vLLM's /pooling refuses `dimensions`: the mock's own control sets the width
    resp = post(server, "/pooling", {"input": TEXTS, "encoding_format": "bytes_only"}, **{"x-mock-dim": "32"})
    assert resp.status_code == 200 and "metadata" not in resp.headers
    assert resp.headers["transfer-encoding"] == "chunked"
    assert len(resp.content) == 3 * 32 * 4


def test_large_batch_metadata_header_is_sent(server):
    # Larger than http.client's 64 KiB line limit: read it raw.
    raw = raw_request(server, "/v1/embeddings", {"input": ["a"] * 1024, "encoding_format": "bytes", "dimensions": 4})
    assert len(raw.headers["metadata"]) > 64 * 1024
    assert len(json.loads(raw.headers["metadata"])["data"]) == 1024
    assert len(dechunk(raw.body)[0]) == 1024 * 4 * 4


def test_pooling_json_shape(server):
    doc = post(server, "/pooling", {"input": TEXTS[:2]}, **{"x-mock-dim": "10"}).json()
    assert [(d["index"], d["object"], len(d["data"])) for d in doc["data"]] == [(0, "pooling", 10), (1, "pooling", 10)]
    assert doc["usage"]["prompt_tokens"] == count_words(TEXTS[0]) + count_words(TEXTS[1])


def test_cohere_embed(server):
    doc = post(server, "/v2/embed", {"texts": TEXTS, "input_type": "search_document", "output_dimension": 12}).json()
    assert len(doc["embeddings"]["float"]) == 3 and len(doc["embeddings"]["float"][0]) == 12
    assert doc["texts"] == TEXTS and doc["id"]
    assert doc["meta"] == {"api_version": {"version": "2"}, "billed_units": {"input_tokens": WORDS}}
    assert len(post(server, "/v2/embed", {"inputs": ["a b"]}).json()["embeddings"]["float"]) == 1


QUERY = "what is a fox"
DOCS = ["a fox is an animal", "dogs bark", "foxes are quick and brown", "no"]
PAIR_TOKENS = sum(count_words(QUERY) + count_words(d) for d in DOCS)


@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank"])
def test_vllm_rerank_sorted_and_cut_to_top_n(server, path):
    doc = post(server, path, {"model": "r", "query": QUERY, "documents": DOCS}).json()
    scores = [r["relevance_score"] for r in doc["results"]]
    assert scores == sorted(scores, reverse=True) and len(scores) == 4
    assert sorted(r["index"] for r in doc["results"]) == [0, 1, 2, 3]
    assert all(r["document"]["text"] == DOCS[r["index"]] for r in doc["results"])
    assert doc["usage"] == {"prompt_tokens": PAIR_TOKENS, "total_tokens": PAIR_TOKENS} and doc["model"] == "r"
    top = post(server, path, {"query": QUERY, "documents": DOCS, "top_n": 2}).json()["results"]
    assert top == doc["results"][:2]
    assert len(post(server, path, {"query": QUERY, "documents": DOCS, "top_n": 0}).json()["results"]) == 4


def test_v2_rerank_is_vllms_form_and_cohere_bills_only_search_units(server):
    vllm = post(server, "/v2/rerank", {"query": QUERY, "documents": DOCS, "top_n": 3}).json()
    assert set(vllm) == {"id", "model", "usage", "results"} and len(vllm["results"]) == 3
    assert vllm["usage"] == {"prompt_tokens": PAIR_TOKENS, "total_tokens": PAIR_TOKENS}
    body = {"query": QUERY, "documents": DOCS, "top_n": 3}
    doc = post(server, "/v2/rerank", body, **{"x-mock-flavor": "cohere"}).json()
    assert set(doc) == {"id", "results", "meta"} and len(doc["results"]) == 3
    assert set(doc["results"][0]) == {"index", "relevance_score"}
    assert doc["meta"] == {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}}


def test_voyage_usage_holds_only_total_tokens_and_its_rerank_answers_under_data(server):
    voyage = {"x-mock-flavor": "voyage"}
    doc = post(server, "/v1/embeddings", {"input": TEXTS[:2], "model": "voyage-3"}, **voyage).json()
    assert set(doc) == {"object", "data", "model", "usage"} and len(doc["data"]) == 2
    assert doc["usage"] == {"total_tokens": count_words(TEXTS[0]) + count_words(TEXTS[1])}
    doc = post(server, "/v1/rerank", {"query": QUERY, "documents": DOCS, "model": "rerank-2"}, **voyage).json()
    assert set(doc) == {"object", "data", "model", "usage"} and doc["object"] == "list"
    assert {tuple(sorted(r)) for r in doc["data"]} == {("index", "relevance_score")} and len(doc["data"]) == 4
    assert [r["relevance_score"] for r in doc["data"]] == sorted(
        (r["relevance_score"] for r in doc["data"]), reverse=True
    )
    assert doc["usage"] == {"total_tokens": PAIR_TOKENS}


TEI_HEADERS = ["x-compute-time", "x-total-time", "x-tokenization-time", "x-queue-time", "x-inference-time"]


def assert_tei_headers(resp: requests.Response, tokens: int, chars: int) -> None:
    for name in TEI_HEADERS:
        assert resp.headers[name].isdigit(), name
    assert int(resp.headers["x-compute-tokens"]) == tokens
    assert int(resp.headers["x-compute-characters"]) == chars


def test_tei_rerank_form_by_body_or_flavor(server):
    resp = post(server, "/rerank", {"query": QUERY, "texts": DOCS}, **{"x-mock-ttfb-ms": "30"})
    results = resp.json()
    assert isinstance(results, list) and {tuple(sorted(r)) for r in results} == {("index", "score")}
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    assert_tei_headers(resp, PAIR_TOKENS, sum(len(QUERY) + len(d) for d in DOCS))
    assert int(resp.headers["x-queue-time"]) == 30
    by_flavor = post(server, "/rerank", {"query": QUERY, "documents": DOCS}, **{"x-mock-flavor": "tei"}).json()
    assert isinstance(by_flavor, list) and len(by_flavor) == 4


def test_infinity_rerank_and_classify_by_flavor(server):
    infinity = {"x-mock-flavor": "infinity"}
    doc = post(server, "/rerank", {"query": QUERY, "documents": DOCS, "return_documents": False}, **infinity).json()
    assert doc["object"] == "rerank" and {"model", "usage", "id", "created"} <= set(doc)
    # as a real Infinity 0.0.78 answers (tests/real): the document key is there, null when not asked back
    assert (
        doc["results"][0].keys() == {"relevance_score", "index", "document"} and doc["results"][0]["document"] is None
    )
    assert doc["usage"]["prompt_tokens"] == sum(len(QUERY) + len(d) for d in DOCS), "Infinity counts characters"
    doc = post(server, "/classify", {"input": TEXTS}, **infinity).json()
    assert doc["object"] == "classify" and len(doc["data"]) == 3
    assert {tuple(sorted(c)) for c in doc["data"][0]} == {("label", "score")}
    assert doc["usage"]["prompt_tokens"] == sum(len(t) for t in TEXTS)


@pytest.mark.parametrize(
    ("left", "right"), [("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2")]
)
def test_score_field_pairs(server, left, right):
    doc = post(server, "/score", {left: QUERY, right: DOCS}).json()
    assert doc["object"] == "list" and doc["model"] == "mock-model" and doc["id"] and doc["created"]
    assert [(d["index"], d["object"]) for d in doc["data"]] == [(i, "score") for i in range(4)]
    assert all(0 <= d["score"] < 1 for d in doc["data"])
    assert doc["usage"] == {"prompt_tokens": PAIR_TOKENS, "total_tokens": PAIR_TOKENS}


def test_score_zips_equal_lists_and_rejects_unequal(server):
    doc = post(server, "/v1/score", {"text_1": ["a b", "c"], "text_2": ["d", "e f g"]}).json()
    assert len(doc["data"]) == 2 and doc["usage"]["prompt_tokens"] == 2 + 1 + 1 + 3
    resp = post(server, "/score", {"text_1": ["a", "b"], "text_2": ["c", "d", "e"]})
    assert resp.status_code == 400 and resp.json()["error"]["type"] == "BadRequestError"


def test_classify(server):
    doc = post(server, "/classify", {"input": TEXTS}).json()
    assert doc["object"] == "list" and len(doc["data"]) == 3 and doc["usage"]["prompt_tokens"] == WORDS
    item = doc["data"][0]
    assert item["num_classes"] == len(item["probs"]) == 2 and abs(sum(item["probs"]) - 1) < 1e-9
    assert isinstance(item["label"], str)


def test_infinity_embeddings_usage_counts_characters(server):
    doc = post(server, "/embeddings", {"input": TEXTS, "model": "inf"}).json()
    assert doc["object"] == "list" and len(doc["data"]) == 3 and doc["model"] == "inf"
    assert doc["usage"]["prompt_tokens"] == sum(len(t) for t in TEXTS)
    b64 = post(server, "/embeddings", {"input": "x", "encoding_format": "base64", "dimensions": 7}).json()
    assert len(base64.b64decode(b64["data"][0]["embedding"])) == 7 * 4
    refused = post(server, "/embeddings", {"input": "x", "encoding_format": "bytes"})
    assert refused.status_code == 400 and "encoding_format" in refused.json()["error"]["message"]


def test_infinity_usage_tokens_flag(mock_server_factory):
    mock = mock_server_factory("--infinity-usage", "tokens")
    assert post(mock, "/embeddings", {"input": TEXTS}).json()["usage"]["prompt_tokens"] == WORDS


def test_tei_embed_and_predict(server):
    resp = post(server, "/embed", {"inputs": TEXTS, "dimensions": 20})
    doc = resp.json()
    assert isinstance(doc, list) and len(doc) == 3 and len(doc[0]) == 20
    assert_tei_headers(resp, WORDS, sum(len(t) for t in TEXTS))
    single = post(server, "/predict", {"inputs": "a b c"})
    assert {tuple(sorted(r)) for r in single.json()} == {("label", "score")}
    assert_tei_headers(single, 3, 5)
    # TEI reads a list of two strings as one pair to classify; a batch is a list of [text] or [a, b] lists.
    pair = post(server, "/predict", {"inputs": TEXTS[:2]})
    assert {tuple(sorted(r)) for r in pair.json()} == {("label", "score")}
    assert_tei_headers(pair, count_words(TEXTS[0]) + count_words(TEXTS[1]), len(TEXTS[0]) + len(TEXTS[1]))
    batch = post(server, "/predict", {"inputs": [[t] for t in TEXTS] + [TEXTS[:2]]}).json()
    assert len(batch) == 4 and all({tuple(sorted(r)) for r in b} == {("label", "score")} for b in batch)
    assert post(server, "/predict", {"inputs": [TEXTS]}).status_code == 400, "a sequence holds one or two texts"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/predict", {"inputs": [["a b"]] * 33}),
        ("/embed_sparse", {"inputs": ["a b"] * 33}),
        ("/embed_all", {"inputs": ["a b"] * 33}),
        ("/similarity", {"inputs": {"source_sentence": "a", "sentences": ["a b"] * 32}}),  # and the source
    ],
)
def test_tei_routes_refuse_a_batch_above_the_cap(server, path, body):
    resp = post(server, path, body)
    assert resp.status_code == 422 and resp.json()["error_type"] == "Validation"
    assert resp.json()["error"] == "batch size 33 > maximum allowed batch size 32"


@pytest.mark.parametrize("path", ["/embed", "/embed_sparse", "/embed_all"])
def test_tei_routes_refuse_an_input_above_max_input_length_only_when_told_not_to_truncate(server, path):
    long = " ".join(["word"] * (TEI_MAX_INPUT_LENGTH + 1))
    refused = post(server, path, {"inputs": ["a b", long], "truncate": False})
    assert refused.status_code == 422 and refused.json()["error_type"] == "Validation"
    assert f"less than {TEI_MAX_INPUT_LENGTH} tokens. Given: {TEI_MAX_INPUT_LENGTH + 1}" in refused.json()["error"]
    assert post(server, path, {"inputs": ["a b", long]}).status_code == 200, "TEI truncates unless told not to"


def test_tei_embed_sparse_embed_all_and_similarity(server):
    resp = post(server, "/embed_sparse", {"inputs": TEXTS, "truncate": True, "truncation_direction": "Right"})
    sparse = resp.json()
    assert len(sparse) == 3 and all(entries for entries in sparse)
    assert all(type(e["index"]) is int and e["index"] >= 0 and isinstance(e["value"], float) for e in sparse[0])
    assert_tei_headers(resp, WORDS, sum(len(t) for t in TEXTS))
    resp = post(server, "/embed_all", {"inputs": TEXTS}, **{"x-mock-dim": "6"})
    matrices = resp.json()
    assert [len(m) for m in matrices] == [count_words(t) for t in TEXTS], "a row per token"
    assert {len(row) for m in matrices for row in m} == {6}
    assert_tei_headers(resp, WORDS, sum(len(t) for t in TEXTS))
    resp = post(server, "/similarity", {"inputs": {"source_sentence": QUERY, "sentences": DOCS}})
    scores = resp.json()
    assert len(scores) == 4 and all(0 <= v < 1 for v in scores)
    assert_tei_headers(resp, count_words(QUERY) + sum(count_words(d) for d in DOCS), len(QUERY) + len("".join(DOCS)))


@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank"])
def test_sglang_rerank_is_a_bare_list_only_for_the_sglang_flavor(server, path):
    sglang = {"x-mock-flavor": "sglang"}
    results = post(server, path, {"query": QUERY, "documents": DOCS}, **sglang).json()
    assert isinstance(results, list) and len(results) == 4
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    assert all(r["document"] == DOCS[r["index"]] for r in results), "return_documents defaults to true"
    assert sum(r["meta_info"]["prompt_tokens"] for r in results) == PAIR_TOKENS
    bare = post(server, path, {"query": QUERY, "documents": DOCS, "return_documents": False}, **sglang).json()
    assert all(r["document"] is None for r in bare)
    assert "results" in post(server, path, {"query": QUERY, "documents": DOCS}).json(), "vLLM's form otherwise"


def test_sglang_score_only_for_the_sglang_flavor(server):
    sglang = {"x-mock-flavor": "sglang"}
    doc = post(server, "/v1/score", {"query": QUERY, "items": DOCS}, **sglang).json()
    assert doc["object"] == "scoring" and doc["usage"] is None and doc["model"] == "mock-model"
    assert [len(row) for row in doc["scores"]] == [1] * 4
    labels = post(server, "/v1/score", {"query": QUERY, "items": DOCS, "label_token_ids": [9, 10, 11]}, **sglang)
    assert [len(row) for row in labels.json()["scores"]] == [3] * 4
    assert post(server, "/v1/score", {"queries": QUERY, "items": DOCS}, **sglang).status_code == 400
    assert post(server, "/v1/score", {"queries": QUERY, "items": DOCS}).json()["object"] == "list", "vLLM's form"


def test_nim_ranking(server):
    body = {"model": "nv", "query": {"text": QUERY}, "passages": [{"text": d} for d in DOCS], "truncate": "END"}
    doc = post(server, "/v1/ranking", body).json()
    assert set(doc) == {"rankings"} and sorted(r["index"] for r in doc["rankings"]) == [0, 1, 2, 3]
    logits = [r["logit"] for r in doc["rankings"]]
    assert logits == sorted(logits, reverse=True)
    assert post(server, "/v1/ranking", {**body, "truncate": "end"}).status_code == 400
    assert post(server, "/v1/ranking", {**body, "query": QUERY}).status_code == 400


def test_tokenize_health_models(server):
    doc = post(server, "/tokenize", {"model": "mock-model", "prompt": "one two three"}).json()
    assert doc["count"] == 3 == len(doc["tokens"]) and doc["max_model_len"] == 8192
    assert requests.get(server.url + "/health", timeout=T).status_code == 200
    models = requests.get(server.url + "/v1/models", timeout=T).json()
    assert models["object"] == "list" and models["data"][0]["id"] == "mock-model"


def test_errors_404_and_400(server):
    resp = post(server, "/nope", {})
    assert resp.status_code == 404 and resp.json()["error"]["code"] == 404
    bad = requests.post(server.url + "/v1/embeddings", data=b"{not json", timeout=T)
    assert bad.status_code == 400
    assert bad.json()["error"]["type"] == "BadRequestError" and bad.json()["error"]["code"] == 400
    missing = post(server, "/rerank", {"query": "q"})
    assert missing.status_code == 400 and "documents" in missing.json()["error"]["message"]
    assert post(server, "/v1/embeddings", {"input": "a"}, **{"x-mock-dim": "x"}).status_code == 400


def test_keep_alive_and_connection_close(server):
    request = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=T) as sock:
        for _ in range(3):  # one connection, three answers
            sock.sendall(request)
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
        assert b"connection: close" in data.lower()


def test_gzip_control(server):
    resp = post(server, "/v1/embeddings", {"input": TEXTS}, **{"x-mock-gzip": "1"})
    assert resp.headers["content-encoding"] == "gzip" and len(resp.json()["data"]) == 3
    plain = post(server, "/v1/embeddings", {"input": TEXTS}, **{"x-mock-gzip": "1", "Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers


# --- stats -----------------------------------------------------------------------------------------


def test_stats_count_exactly_under_concurrency(mock_server):
    calls = [("/v1/embeddings", {"input": TEXTS}, WORDS, 3)] * 40
    calls += [("/v1/embeddings", {"input": TEXTS, "encoding_format": "bytes_only"}, WORDS, 3)] * 20
    calls += [("/rerank", {"query": QUERY, "documents": DOCS}, PAIR_TOKENS, 4)] * 20
    calls += [("/embeddings", {"input": TEXTS}, sum(len(t) for t in TEXTS), 3)] * 10
    with ThreadPoolExecutor(16) as pool:
        responses = list(pool.map(lambda c: post(mock_server, c[0], c[1]), calls))
        faulted = list(
            pool.map(
                lambda _: post(mock_server, "/score", {"text_1": "a", "text_2": "b"}, **{"x-mock-fault": "status-500"}),
                range(5),
            )
        )
    assert {r.status_code for r in responses} == {200} and {r.status_code for r in faulted} == {500}
    requests.get(mock_server.url + "/health", timeout=T)  # not a pooling route: not counted
    stats = mock_server.stats()
    assert stats["requests"] == len(calls) + 5 and stats["ok"] == len(calls)
    assert stats["prompt_tokens"] == sum(c[2] for c in calls)
    assert stats["sequences"] == sum(c[3] for c in calls)
    assert stats["bytes_sent"] == sum(len(r.content) for r in responses)
    assert stats["bytes_received"] == sum(len(r.request.body) for r in responses + faulted)
    assert stats["faults"] == {"status-500": 5}
    assert stats["routes"]["/rerank"] == {
        "requests": 20,
        "ok": 20,
        "prompt_tokens": 20 * PAIR_TOKENS,
        "sequences": 80,
        "bytes_sent": sum(len(r.content) for r in responses[60:80]),
        "bytes_received": sum(len(r.request.body) for r in responses[60:80]),
    }
    assert stats["routes"]["/score"]["requests"] == 5 and stats["routes"]["/score"]["ok"] == 0
    assert mock_server.stats()["requests"] == stats["requests"], "/mock/stats is never counted"
    mock_server.reset()
    assert mock_server.stats() == {
        "requests": 0,
        "ok": 0,
        "prompt_tokens": 0,
        "sequences": 0,
        "bytes_sent": 0,
        "bytes_received": 0,
        "images": 0,
        "distinct_images": 0,
        "distinct_images_complete": True,
        "faults": {},
        "drift": {"answers": 0, "drifted_vectors": 0, "cache_drifted_vectors": 0, "flipped_rankings": 0},
        "routes": {},
    }


def test_configured_fault_rate_is_seeded_and_counted(mock_server_factory):
    def run() -> list[int]:
        mock = mock_server_factory("--fault", "status-503=0.5", "--seed", "3")
        statuses = [post(mock, "/v1/embeddings", {"input": "a b"}).status_code for _ in range(40)]
        stats = mock.stats()
        assert stats["faults"] == {"status-503": statuses.count(503)} and stats["ok"] == statuses.count(200)
        assert set(statuses) == {200, 503}
        return statuses

    assert run() == run(), "the same seed draws the same faults"


@pytest.mark.parametrize(
    ("flags", "name"),
    [
        (["--dim", "abc"], "--dim"),
        (["--dim", "0"], "--dim"),
        (["--fault", "bogus=0.1"], "--fault"),
        (["--fault", "status-500=2"], "--fault"),
        (["--fault", "status-500=0.6", "--fault", "status-503=0.6"], "--fault"),
        (["--flavor", "x"], "--flavor"),
        (["--ttfb-ms", "-1"], "--ttfb-ms"),
        (["--port", "70000"], "--port"),
        (["--writes", "many"], "--writes"),
        (["--chunks", "0"], "--chunks"),
        (["--chunks", "65537"], "--chunks"),
    ],
)
def test_cli_rejects_bad_flags_by_name(flags, name, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--port", "0", *flags])
    assert exit_info.value.code == 2 and f"argument {name}" in capsys.readouterr().err


def test_sigterm_stops_cleanly_with_an_idle_connection_open(mock_server_factory):
    mock = mock_server_factory()
    with socket.create_connection(("127.0.0.1", mock.port), timeout=T):
        mock.proc.terminate()
        assert mock.proc.wait(5) == 0


# --- timing ----------------------------------------------------------------------------------------


@pytest.mark.timing
@pytest.mark.parametrize(
    "body",
    [{"input": ["a"] * 64, "encoding_format": "bytes", "dimensions": 4096}, {"input": "a b", "dimensions": 4}],
    ids=["bytes-1MiB", "small-json"],
)
def test_trickled_body_ends_no_earlier_than_body_ms_after_the_headers(server, body):
    raw = raw_request(server, "/v1/embeddings", body, **{"x-mock-body-ms": "300"})
    assert raw.status == 200 and raw.end == "eof"
    assert raw.t_headers is not None and raw.t_last is not None
    assert raw.t_headers - raw.t_sent < 0.1, "headers at once"
    # the clock starts when the server sends its headers; this client reads them up to a few ms later on
    # a loaded machine (seen: 0.1 ms short of 300 ms), never before they were sent
    assert raw.t_last - raw.t_sent >= 0.3
    assert raw.t_last - raw.t_headers >= 0.3 - 0.01
    assert raw.t_last - raw.t_headers < 1.0


@pytest.mark.timing
def test_ttfb_delays_the_headers(server):
    raw = raw_request(server, "/v1/embeddings", {"input": "a"}, **{"x-mock-ttfb-ms": "200"})
    assert raw.t_headers is not None and 0.2 <= raw.t_headers - raw.t_sent < 1.0


@pytest.mark.timing
def test_large_bytes_answer_is_fast(server):
    body = {"input": ["a"] * 64, "encoding_format": "bytes_only", "dimensions": 65536}  # 16 MiB
    started = time.monotonic()
    resp = post(server, "/v1/embeddings", body)
    assert len(resp.content) == 64 * 65536 * 4
    assert time.monotonic() - started < 2.0


# --- how an answer is cut into writes (--writes, --chunks) ------------------------------------------------

LARGE_BYTES = {"input": ["a"] * 64, "encoding_format": "bytes", "dimensions": 1024}  # 256 KiB
"""A binary answer as bench/client_cost.py's bytes cases ask for it."""


def chunk_sizes(framed: bytes) -> list[int]:
    """The data sizes of a chunked stream's chunks, up to its terminating chunk (excluded)."""
    sizes, pos = [], 0
    while (eol := framed.find(b"\r\n", pos)) >= 0 and (size := int(framed[pos:eol], 16)):
        sizes.append(size)
        pos = eol + 2 + size + 2
    return sizes


@pytest.mark.parametrize(
    ("flags", "sizes"),
    [
        ((), [1 << 18]),
        (("--writes", "one"), [1 << 18]),
        (("--writes", "split"), [1 << 18]),
        (("--writes", "chunk", "--chunks", "8"), [1 << 15] * 8),
        (("--chunks", "3"), [87381, 87381, 87382]),
    ],
    ids=["sized", "one", "split", "chunk-8", "sized-3"],
)
def test_writes_and_chunks_frame_the_same_body(mock_server_factory, flags, sizes):
    """Every way of writing a binary answer carries the same bytes and metadata; --chunks N frames it in N chunks."""
    reference = raw_request(mock_server_factory(), "/v1/embeddings", LARGE_BYTES)
    raw = raw_request(mock_server_factory(*flags), "/v1/embeddings", LARGE_BYTES)
    assert raw.status == 200 and raw.end == "eof" and raw.headers["transfer-encoding"] == "chunked"
    assert chunk_sizes(raw.body) == sizes
    assert dechunk(raw.body) == (dechunk(reference.body)[0], True)
    assert json.loads(raw.headers["metadata"])["data"] == json.loads(reference.headers["metadata"])["data"]


class Recorder:
    """A socket that keeps each write send_reply makes: the writes a client's reads follow."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def sendall(self, data: bytes | memoryview) -> None:
        self.writes.append(bytes(data))


@pytest.mark.parametrize(
    ("writes", "chunks", "shape"),
    [
        ("sized", 1, ["head", b"40000\r\n", 1 << 18, b"\r\n", b"0\r\n\r\n"]),
        ("one", 1, ["whole"]),
        ("split", 1, ["head", b"40000\r\n", 1 << 18, b"\r\n", b"0\r\n\r\n"]),
        ("chunk", 8, ["head", *[b"8000\r\n" + b"." * (1 << 15) + b"\r\n"] * 8, b"0\r\n\r\n"]),
        ("split", 2, ["head", b"20000\r\n", 1 << 17, b"\r\n", b"20000\r\n", 1 << 17, b"\r\n", b"0\r\n\r\n"]),
    ],
)
def test_writes_cut_a_chunked_answer_as_servers_do(writes, chunks, shape):
    from poolbench_locust.mockserver.http11 import send_reply
    from poolbench_locust.mockserver.reply import Reply

    body = b"." * (1 << 18)
    sock = Recorder()
    assert send_reply(sock, Reply(200, body, "application/octet-stream", {"metadata": "{}"}, chunked=True),
                      writes=writes, chunks=chunks)  # fmt: skip
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\nmetadata: {}\r\n"
    head += b"transfer-encoding: chunked\r\n\r\n"
    whole = head + b"40000\r\n" + body + b"\r\n0\r\n\r\n"
    named = {"head": head, "whole": whole}
    # a number: that many bytes of the body
    want = [named[part] if isinstance(part, str) else b"." * part if isinstance(part, int) else part for part in shape]
    assert sock.writes == want


def test_one_write_joins_each_trickled_piece():
    from poolbench_locust.mockserver.http11 import send_reply
    from poolbench_locust.mockserver.reply import Reply

    sock = Recorder()
    assert send_reply(sock, Reply(200, b"x" * 300_000), writes="one", body_ms=1)
    assert len(sock.writes) == 5 and sock.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert sock.writes[0].endswith(b"\r\n\r\n" + b"x" * 60_000), "the head and the first piece in one write"
    assert sock.writes[1:] == [b"x" * 60_000] * 4, "each trickled piece in one write"


# --- faults ----------------------------------------------------------------------------------------

FLOAT = {"input": ["a b", "c", "d e f", "g"], "dimensions": 16}
BYTES = {**FLOAT, "encoding_format": "bytes"}
BASE64 = {**FLOAT, "encoding_format": "base64"}


def fault(name: str, **more: str) -> dict[str, str]:
    return {"x-mock-fault": name, **more}


@pytest.mark.parametrize(("name", "status"), [("status-500", 500), ("status-503", 503), ("status-429", 429)])
def test_status_faults_answer_vllm_error_json(server, name, status):
    resp = post(server, "/v1/embeddings", FLOAT, **fault(name))
    error = resp.json()["error"]
    assert resp.status_code == status == error["code"] and "injected" in error["message"] and error["type"]
    if status == 429:
        assert resp.headers["retry-after"] == "1"


def test_status_400_is_the_older_error_form(server):
    resp = post(server, "/rerank", {"query": "q", "documents": ["d"]}, **fault("status-400"))
    doc = resp.json()
    assert resp.status_code == 400 and doc["object"] == "error" and doc["type"] == "BadRequestError"
    assert doc["code"] == 400 and "injected" in doc["message"]


def test_html_error(server):
    resp = post(server, "/v1/embeddings", FLOAT, **fault("html-error"))
    assert resp.status_code == 502 and resp.headers["content-type"] == "text/html"
    assert "<title>502 Bad Gateway</title>" in resp.text and "injected" in resp.text


def test_reset_before_headers(server):
    raw = raw_request(server, "/v1/embeddings", FLOAT, **fault("reset-before-headers"))
    assert raw.end == "reset" and raw.head == b""


def test_close_before_headers(server):
    raw = raw_request(server, "/v1/embeddings", FLOAT, **fault("close-before-headers"))
    assert raw.end == "eof" and raw.head == b""


@pytest.mark.parametrize("body", [FLOAT, BYTES], ids=["json", "bytes"])
def test_reset_mid_body(server, body):
    raw = raw_request(server, "/v1/embeddings", body, **fault("reset-mid-body"))
    assert raw.end == "reset" and raw.status == 200 and raw.body


def test_short_content_length(server):
    for body in (FLOAT, BYTES):  # the bytes answer switches to Content-Length framing for it
        raw = raw_request(server, "/v1/embeddings", body, **fault("short-content-length"))
        assert raw.end == "eof" and "transfer-encoding" not in raw.headers
        assert 0 < len(raw.body) < int(raw.headers["content-length"])


@pytest.mark.parametrize("body", [FLOAT, BYTES], ids=["json", "bytes"])
def test_cut_chunk(server, body):
    raw = raw_request(server, "/v1/embeddings", body, **fault("cut-chunk"))
    assert raw.end == "eof" and raw.headers["transfer-encoding"] == "chunked"
    payload, complete = dechunk(raw.body)
    assert not complete and payload


def test_stall_before_headers(server):
    raw = raw_request(server, "/v1/embeddings", FLOAT, **fault("stall-before-headers", **{"x-mock-stall-ms": "300"}))
    assert raw.end == "eof" and raw.head == b""
    assert time.monotonic() - raw.t_sent >= 0.3


def test_stall_mid_body(server):
    raw = raw_request(server, "/v1/embeddings", BYTES, **fault("stall-mid-body", **{"x-mock-stall-ms": "300"}))
    assert raw.end == "eof" and raw.status == 200 and raw.t_headers is not None
    payload, complete = dechunk(raw.body)
    assert not complete and 0 < len(payload) < 4 * 16 * 4
    # from the request sent: the client may read the headers late on a busy machine, the stall is the server's
    assert time.monotonic() - raw.t_sent >= 0.3


def test_stall_is_cut_by_the_client_timeout(server):
    raw = raw_request(server, "/v1/embeddings", FLOAT, timeout=0.3, **fault("stall-before-headers"))
    assert raw.end == "timeout"


def test_wrong_content_type(server):
    assert post(server, "/v1/embeddings", FLOAT, **fault("wrong-content-type")).headers["content-type"] == (
        "application/octet-stream"
    )
    resp = post(server, "/v1/embeddings", BYTES, **fault("wrong-content-type"))
    assert resp.headers["content-type"] == "application/json" and len(resp.content) == 4 * 16 * 4


def test_garbled_json(server):
    resp = post(server, "/classify", {"input": "a"}, **fault("garbled-json"))
    assert resp.status_code == 200
    with pytest.raises(ValueError):
        json.loads(resp.content)


@pytest.mark.parametrize(
    ("path", "body"),
    [("/v1/embeddings", FLOAT), ("/rerank", {"query": "q", "documents": ["d"]}), ("/v2/embed", {"texts": ["a"]})],
)
def test_missing_usage(server, path, body):
    doc = post(server, path, body, **fault("missing-usage")).json()
    assert "usage" not in doc and "billed_units" not in doc.get("meta", {}) and "tokens" not in doc.get("meta", {})


def test_missing_usage_in_metadata_and_tei_headers(server):
    assert "usage" not in json.loads(
        post(server, "/v1/embeddings", BYTES, **fault("missing-usage")).headers["metadata"]
    )
    assert "x-compute-tokens" not in post(server, "/embed", {"inputs": "a"}, **fault("missing-usage")).headers


def test_metadata_faults(server):
    assert "metadata" not in post(server, "/v1/embeddings", BYTES, **fault("no-metadata")).headers
    garbled = post(server, "/v1/embeddings", BYTES, **fault("garbled-metadata")).headers["metadata"]
    with pytest.raises(ValueError):
        json.loads(garbled)
    resp = post(server, "/v1/embeddings", BYTES, **fault("metadata-offsets"))
    meta = json.loads(resp.headers["metadata"])
    assert sum(d["end"] - d["start"] for d in meta["data"]) != len(resp.content)


def test_metadata_fault_on_a_json_route_answers_normally_but_counts(mock_server):
    resp = post(mock_server, "/rerank", {"query": "q", "documents": ["d"]}, **fault("no-metadata"))
    assert resp.status_code == 200 and len(resp.json()["results"]) == 1
    stats = mock_server.stats()
    assert stats["faults"] == {"no-metadata": 1} and stats["ok"] == 0 and stats["requests"] == 1


def test_fewer_embeddings(server):
    assert len(post(server, "/v1/embeddings", FLOAT, **fault("fewer-embeddings")).json()["data"]) == 3
    assert len(post(server, "/v1/embeddings", BASE64, **fault("fewer-embeddings")).json()["data"]) == 3
    resp = post(server, "/v1/embeddings", BYTES, **fault("fewer-embeddings"))
    assert len(json.loads(resp.headers["metadata"])["data"]) == 3 and len(resp.content) == 3 * 16 * 4
    only = post(server, "/v1/embeddings", {**FLOAT, "encoding_format": "bytes_only"}, **fault("fewer-embeddings"))
    assert len(only.content) == 3 * 16 * 4
    assert (
        len(post(server, "/rerank", {"query": "q", "documents": DOCS}, **fault("fewer-embeddings")).json()["results"])
        == 3
    )


@pytest.mark.parametrize("body", [FLOAT, BYTES], ids=["json", "bytes"])
def test_corrupt_gzip(server, body):
    raw = raw_request(server, "/v1/embeddings", body, **fault("corrupt-gzip"))
    assert raw.headers["content-encoding"] == "gzip"
    stream = dechunk(raw.body)[0] if raw.headers.get("transfer-encoding") == "chunked" else raw.body
    with pytest.raises((zlib.error, gzip.BadGzipFile, EOFError, OSError)):
        gzip.decompress(stream)


def test_zero_vectors(server):
    assert not any(post(server, "/v1/embeddings", FLOAT, **fault("zero-vectors")).json()["data"][0]["embedding"])
    assert not any(post(server, "/v1/embeddings", BYTES, **fault("zero-vectors")).content)


def test_nan_vectors(server):
    resp = post(server, "/v1/embeddings", FLOAT, **fault("nan-vectors"))
    assert b"NaN" in resp.content
    assert all(math.isnan(v) for v in json.loads(resp.content)["data"][0]["embedding"])  # Python's json reads NaN
    b64 = post(server, "/v1/embeddings", BASE64, **fault("nan-vectors")).json()["data"][0]["embedding"]
    assert all(math.isnan(v) for v in struct.unpack("=16f", base64.b64decode(b64)))
    for dtype in ("float16", "bfloat16", "fp8_e4m3"):
        raw = post(server, "/v1/embeddings", {**BYTES, "embed_dtype": dtype}, **fault("nan-vectors")).content
        assert len(raw) == 4 * 16 * DTYPE_SIZES[dtype] and raw[:1] in (b"\x7f", b"\x00", b"\x7e", b"\xc0")


def test_every_fault_is_counted_once_and_never_ok(mock_server):
    headers = {"x-mock-stall-ms": "50"}
    for name in FAULTS:
        raw_request(mock_server, "/v1/embeddings", BYTES, **fault(name, **headers))
    stats = mock_server.stats()
    assert stats["faults"] == dict.fromkeys(FAULTS, 1)
    assert stats["requests"] == len(FAULTS) and stats["ok"] == 0


# --- in-process API ----------------------------------------------------------------------------------


def test_in_process_server_under_gevent():
    import gevent
    from geventhttpclient import HTTPClient

    from poolbench_locust.mockserver import MockConfig, MockServer

    server = MockServer(MockConfig(dim=8, model="inproc", flavor="tei"), host="127.0.0.1", port=0)
    server.start()
    try:
        assert server.url == f"http://127.0.0.1:{server.port}" and server.port > 0
        client = HTTPClient("127.0.0.1", server.port, connection_timeout=T, network_timeout=T, concurrency=4)

        def one(i: int) -> dict:
            resp = client.post("/v1/embeddings", body=json.dumps({"input": ["a b"] * (i + 1)}))
            return json.loads(resp.read())

        jobs = [gevent.spawn(one, i) for i in range(4)]
        gevent.joinall(jobs, timeout=T, raise_error=True)
        assert [len(j.value["data"]) for j in jobs] == [1, 2, 3, 4]
        assert {len(j.value["data"][0]["embedding"]) for j in jobs} == {8} and jobs[0].value["model"] == "inproc"
        rerank = client.post("/rerank", body=json.dumps({"query": "q", "documents": ["d"]}))
        assert isinstance(json.loads(rerank.read()), list), "config flavor tei answers TEI's form"
        stats = server.stats()
        assert (stats["requests"], stats["ok"], stats["sequences"], stats["prompt_tokens"]) == (5, 5, 11, 22)
        server.reset()
        assert server.stats()["requests"] == 0
        client.close()
    finally:
        server.stop()


def test_timings_give_each_pooling_request_its_server_time_in_order(mock_server):
    """bench/accuracy.py pairs a client's reported times with these, request by request."""
    for ttfb in (0, 150, 60):
        post(mock_server, "/v1/embeddings", {"input": "a b"}, **{"x-mock-ttfb-ms": str(ttfb), "x-mock-body-ms": "40"})
    requests.get(f"{mock_server.url}/health", timeout=T)  # not a pooling route: not timed
    raw_request(mock_server, "/v1/embeddings", {"input": "a"}, **{"x-mock-fault": "reset-mid-body"})
    times = requests.get(f"{mock_server.url}/mock/timings", timeout=T).json()["server_ms"]
    assert len(times) == 4
    for ms, ttfb in zip(times, (0, 150, 60), strict=False):
        assert ttfb + 40 <= ms < ttfb + 40 + 50
    assert times[3] is None, "an answer cut short has no server time"
    mock_server.reset()
    assert requests.get(f"{mock_server.url}/mock/timings", timeout=T).json()["server_ms"] == []
