"""The lazy JSON reader (poolbench_locust/lazyjson.py) gives orjson's verdicts without orjson's floats.

Property tests compare it with orjson.loads on valid documents and on garbled ones (each garbled byte
must fail the same way, with orjson's message); check_json's verdicts on every endpoint's answer shape
are the same by either reader; and hostile servers sending large garbled float answers get exactly one
failed request each, with its message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import poolbench_locust as pb
from poolbench_locust import lazyjson
from poolbench_locust.endpoints import infinity, tei, vllm
from poolbench_locust.engine import answer_checks
from poolbench_locust.engine.body import BadResponse, Body
from poolbench_locust.lazyjson import Numbers
from poolbench_locust.options import Settings
from tests.support.bad_then_good import assert_failed_then_ok
from tests.support.hostile import response


def plain(value: Any) -> Any:
    """The document with every Numbers built, to compare with orjson's."""
    if isinstance(value, Numbers):
        return [plain(v) for v in value.values()]
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def verdict(read: Any, data: bytes) -> tuple[str, Any]:
    try:
        return "ok", plain(read(data))
    except orjson.JSONDecodeError as e:
        return "garbled", str(e)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner, max_size=5),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON_VALUES, st.booleans())
def test_a_valid_document_reads_as_orjson_reads_it(doc, ascii_only):
    data = json.dumps(doc, ensure_ascii=ascii_only).encode()
    assert verdict(lazyjson.loads, data) == verdict(orjson.loads, data)


GARBLE = list(b'0123456789.eE+-,:[]{}" \tNaI\xff\xc3\x00tfn')


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON_VALUES, st.data())
def test_a_garbled_document_fails_as_orjson_fails_it(doc, data):
    text = bytearray(json.dumps({"data": [{"embedding": [0.25, -1.5e-3, 3, 12.5]}], "x": doc}).encode())
    where = data.draw(st.integers(0, len(text) - 1))
    how = data.draw(st.sampled_from(["replace", "insert", "delete", "truncate"]))
    byte = data.draw(st.sampled_from(GARBLE))
    if how == "replace":
        text[where] = byte
    elif how == "insert":
        text.insert(where, byte)
    elif how == "delete":
        del text[where]
    else:
        del text[where:]
    body = bytes(text)
    assert verdict(lazyjson.loads, body) == verdict(orjson.loads, body)


BAD = [
    b'{"data":[[1,2,NaN]]}',
    b'{"data":[[1,2,Infinity]]}',
    b'{"data":[[1,2,1e999]]}',
    b'{"data":[[1,2,01]]}',
    b'{"data":[[1,2,1.]]}',
    b'{"data":[[1,2,-]]}',
    b'{"data":[[1,2,3}]}',
    b'{"data":[[1,2,3]]} x',
    b'{"data":[[1,2,3]]}\x00',
    b'{"data":[[1,2,3]],"model":"\xff"}',
    b'{"data":[[1,2,3]],"model":"\xed\xa0\x80"}',
    b'{"data":[[1,2,3]],"model":"\\ud800"}',
    b"\xef\xbb\xbf[1,2]",
    b"",
    b"[" * 2000 + b"]" * 2000,
]


@pytest.mark.parametrize("body", BAD, ids=range(len(BAD)))
def test_what_orjson_refuses_is_refused_with_orjson_message(body):
    with pytest.raises(orjson.JSONDecodeError) as lazy:
        lazyjson.loads(body)
    with pytest.raises(orjson.JSONDecodeError) as strict:
        orjson.loads(body)
    assert str(lazy.value) == str(strict.value)


ODD = [
    b'{"usage":{"prompt_tokens":1},"usage":{"prompt_tokens":2}}',  # orjson keeps the last
    b"[18446744073709551616, 1]",  # past 64 bits: simdjson refuses, orjson reads a float
    b"[-9223372036854775809]",
    b"[[[[[" * 20 + b"1" + b"]]]]]" * 20,  # deeper than the walk: converted whole, no RecursionError
    b"{" + b",".join(b'"k%d":[%d,2]' % (i, i) for i in range(500)) + b"}",  # more keys than the walk looks up
    b"[1, [2, 3], true, null]",  # starts with a number: a Numbers whose values are any JSON values
    b"[true, 1, 2]",
    b"[]",
    b"  7  ",
]


@pytest.mark.parametrize("body", ODD, ids=range(len(ODD)))
def test_corners_read_as_orjson_reads_them(body):
    assert plain(lazyjson.loads(body)) == orjson.loads(body)


def test_an_array_of_numbers_is_counted_without_its_values():
    doc = lazyjson.loads(orjson.dumps({"data": [{"embedding": [0.5] * 1024}] * 3}))
    vector = doc["data"][0]["embedding"]
    assert isinstance(vector, Numbers) and len(vector) == 1024
    assert vector._values is None, "counting built the values"
    assert vector[0] == 0.5 and vector.values() == [0.5] * 1024


def test_a_lazy_array_kept_past_its_check_does_not_stop_the_next_read():
    kept = lazyjson.loads(b'{"a":[1,2,3]}')["a"]  # still reads the parser's tape
    assert plain(lazyjson.loads(b'{"b":[4,5]}')) == {"b": [4, 5]}
    del kept


# ---- check_json: the same verdict by either reader, for every answer shape -----------------------


@dataclass
class Req:
    expected_items: int


def _openai(vectors: list[Any], key: str = "embedding") -> dict[str, Any]:
    return {
        "object": "list",
        "data": [{"index": i, "object": "embedding", key: v} for i, v in enumerate(vectors)],
        "usage": {"prompt_tokens": 9, "total_tokens": 9},
    }


V = [0.25 * (k % 7 - 3) + 0.125 for k in range(8)]
SHAPES: list[tuple[str, Any, Any]] = [
    ("embeddings", vllm.EMBEDDINGS, _openai([V, V])),
    ("chat", vllm.EMBEDDINGS_CHAT, _openai([V, V])),
    ("pooling nested", vllm.POOLING, _openai([[V], [V]], "data")),
    ("pooling flat", vllm.POOLING, _openai([V, V], "data")),
    ("infinity", infinity.INFINITY_EMBEDDINGS, _openai([V, V])),
    ("tei bare", tei.TEI_EMBED, [V, V]),
    ("cohere", vllm.COHERE_EMBED, {"embeddings": {"float": [V, V]}, "meta": {"billed_units": {"input_tokens": 9}}}),
    ("wrong dims", vllm.EMBEDDINGS, _openai([V, V[:-1]])),
    ("wrong count", vllm.EMBEDDINGS, _openai([V])),
    ("zero first", vllm.EMBEDDINGS, _openai([[0.0] * 8, V])),
    ("int vector", vllm.EMBEDDINGS, _openai([[1] * 8, V])),
    ("mixed vector", vllm.EMBEDDINGS, _openai([[1, "a", 1, 1, 1, 1, 1, 1], V])),
    ("string vector", vllm.EMBEDDINGS, _openai([["a"] * 8, V])),
    ("object vector", vllm.EMBEDDINGS, _openai([{"a": 1}, V])),
    ("no usage", vllm.EMBEDDINGS, {"data": [{"embedding": V}, {"embedding": V}]}),
    ("bad usage", vllm.EMBEDDINGS, {**_openai([V, V]), "usage": {"prompt_tokens": -4}}),
    ("float usage", vllm.EMBEDDINGS, {**_openai([V, V]), "usage": {"prompt_tokens": 4.0}}),
    ("data of numbers", vllm.EMBEDDINGS, {"data": [1, 2], "usage": {"prompt_tokens": 3}}),
    ("tei of numbers", tei.TEI_EMBED, [1.5, 2]),
    ("cohere of numbers", vllm.COHERE_EMBED, {"embeddings": {"float": [1, 2]}}),
    ("not a list", vllm.EMBEDDINGS, {"data": {"embedding": V}}),
]


def _verdict(endpoint: Any, doc: Any, check: Settings) -> str:
    data = orjson.dumps(doc)
    try:
        return f"ok: {answer_checks.check_json(endpoint, Body(len(data), len(data), data, b'', 0.0), Req(2), check)}"
    except BadResponse as e:
        return str(e)


@pytest.mark.parametrize(("name", "endpoint", "doc"), SHAPES, ids=[s[0] for s in SHAPES])
@pytest.mark.parametrize("check", [Settings(dimensions=8, check_vectors=True), Settings()], ids=["checked", "plain"])
def test_check_json_gives_the_same_verdict_by_either_reader(name, endpoint, doc, check, monkeypatch):
    monkeypatch.setattr(answer_checks, "LAZY_FROM_BYTES", 1 << 40)
    by_orjson = _verdict(endpoint, doc, check)
    monkeypatch.setattr(answer_checks, "LAZY_FROM_BYTES", 0)
    assert _verdict(endpoint, doc, check) == by_orjson


# ---- against hostile servers: large float answers garbled in one place ---------------------------

DIMS = 1024
VECTOR = [round(0.001 * (k % 997) - 0.4985, 6) or 0.5 for k in range(DIMS)]
BATCH = 8
LARGE = ["--batch-size", str(BATCH), "--dimensions", str(DIMS)]


def _large(vectors: list[Any] | None = None) -> bytes:
    doc = _openai(vectors if vectors is not None else [VECTOR] * BATCH)
    doc["model"] = "m"
    return orjson.dumps(doc)


def _garbled(old: bytes, new: bytes) -> bytes:
    body = _large()
    third = body.index(b'"embedding"', body.index(b'"index":2'))
    where = body.index(old, third)
    return body[:where] + new + body[where + len(old) :]


GOOD = _large()
GARBLED = {
    "bad number": _garbled(b",", b",1.2.3,"),
    "NaN literal": _garbled(b",", b",NaN,"),
    "overflowing number": _garbled(b",", b",1e999,"),
    "unclosed array": _garbled(b"]", b""),
    "trailing garbage": GOOD + b" {",
    "bad UTF-8": GOOD.replace(b'"model":"m"', b'"model":"\xff"'),
}


@pytest.mark.parametrize("name", GARBLED)
def test_a_large_garbled_float_answer_is_one_failed_request(name):
    assert len(GARBLED[name]) >= answer_checks.LAZY_FROM_BYTES  # read by lazyjson, not orjson
    assert_failed_then_ok(pb.EmbeddingsUser, response(200, GARBLED[name]), response(200, GOOD), "garbled JSON", *LARGE)


@pytest.mark.parametrize(
    ("vectors", "expected"),
    [
        ([VECTOR, VECTOR, VECTOR[:-1], *[VECTOR] * 5], "embedding 2 has 1023 dimensions, expected 1024"),
        ([VECTOR] * 7, "expected 8 embeddings, got 7"),
        ([[0.0] * DIMS, *[VECTOR] * 7], "embedding is all zeros"),
        ([VECTOR, VECTOR, "abc", *[VECTOR] * 5], "embedding 2 is not a list of numbers"),
        ([*[VECTOR] * 5, [*VECTOR[:-1], None], VECTOR, VECTOR], "embedding 5 holds null: a NaN or infinite value"),
        ([*[VECTOR] * 7, [*VECTOR[:9], False, *VECTOR[10:]]], "embedding 7 is not a list of numbers"),
    ],
    ids=["dims", "count", "zeros", "type", "null", "false"],
)
def test_a_large_answer_of_the_wrong_shape_is_one_failed_request(vectors, expected):
    """Read by lazyjson: a null inside a vector is found without building its numbers (Numbers.numbers_only)."""
    body = _large(vectors)
    assert len(body) >= answer_checks.LAZY_FROM_BYTES
    assert_failed_then_ok(
        pb.EmbeddingsUser, response(200, body), response(200, GOOD), expected, *LARGE, "--check-vectors"
    )


@pytest.mark.parametrize(
    ("body", "holds"),
    [
        (GOOD, False),
        (_large([*[VECTOR] * 7, [None, *VECTOR[1:]]]), True),
        (b'{"a":true}', True),
        (b'{"a":false}', True),
        (b'{"u":"fluff"}', False),
        (b"nul", False),
        (b'{"model":"' + b"u" * 100 + b'"}', True),  # past LITERAL_LOOKS of a letter: a maybe, never a miss
    ],
    ids=["good", "null", "true", "false", "letters only", "cut", "many letters"],
)
def test_may_hold_literal_never_misses_one(body, holds):
    assert lazyjson.may_hold_literal(body) is holds
