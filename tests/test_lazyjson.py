"""The lazy JSON reader (poolbench_locust/lazyjson.py) gives orjson's verdicts without orjson's floats.

Property tests compare it with orjson.loads on valid documents and on garbled ones (each garbled byte
must fail the same way, with orjson's message); check_json's verdicts on every endpoint's answer shape
are the same by either reader; and hostile servers sending large garbled float answers get exactly one
failed request each, with its message.
"""

from __future__ import annotations

import json
from array import array
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import poolbench_locust as pb
from poolbench_locust import lazyjson
from poolbench_locust.endpoints import forms, infinity, tei, vllm
from poolbench_locust.endpoints.forms import JsonForm
from poolbench_locust.endpoints.spec import AnswerError
from poolbench_locust.engine.body import BadResponse
from poolbench_locust.lazyjson import Numbers
from poolbench_locust.options import Settings
from tests.support.answers import judged
from tests.support.bad_then_good import assert_failed_then_ok
from tests.support.hostile import response
from tests.support.one_edit import one_edit


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
    body = bytes(one_edit(text, data, GARBLE))
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
        what = "results" if endpoint.shape == "pairs" else "embeddings"
        answer, _ = judged(JsonForm(endpoint, check), {}, data, len(data), Req(2), check, what=what)
        return f"ok: {answer.prompt_tokens}"
    except (AnswerError, BadResponse) as e:
        return str(e)


@pytest.mark.parametrize(("name", "endpoint", "doc"), SHAPES, ids=[s[0] for s in SHAPES])
@pytest.mark.parametrize("check", [Settings(dimensions=8, check_vectors=True), Settings()], ids=["checked", "plain"])
def test_check_json_gives_the_same_verdict_by_either_reader(name, endpoint, doc, check, monkeypatch):
    monkeypatch.setattr(forms, "LAZY_FROM_BYTES", 1 << 40)
    by_orjson = _verdict(endpoint, doc, check)
    monkeypatch.setattr(forms, "LAZY_FROM_BYTES", 0)
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
    assert len(GARBLED[name]) >= forms.LAZY_FROM_BYTES  # read by lazyjson, not orjson
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
    assert len(body) >= forms.LAZY_FROM_BYTES
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


# ---- the validating pass of our own (_jsonscan, issue 33): orjson's verdicts, both of its loops ---------

scan_module = pytest.importorskip("poolbench_locust._jsonscan")


@pytest.fixture(params=["wide", "scalar"])
def loop(request):
    """The 64-byte loop (where the CPU has AVX2) and the byte-by-byte one, each over every case."""
    before = scan_module.set_wide(request.param == "wide")
    yield request.param
    scan_module.set_wide(before)


def scan(data: bytes) -> Any:
    return scan_module.scan(data, lazyjson._SpanNumbers)


def vector_body(numbers: bytes, pad: int = 40) -> bytes:
    """A float answer whose one vector holds `numbers` after `pad` good ones: past 64 bytes, the wide loop's."""
    good = b",".join([b"-0.4921875", b"0.015625", b"12", b"-3e-5", b"1.5E+2"] * (pad // 5))
    return b'{"data":[{"index":0,"embedding":[' + good + (b"," + numbers if numbers else b"") + b"]}]}"


BAD_NUMBERS = [
    b"01",
    b"-01",
    b"00",
    b"1.",
    b"1.e5",
    b".5",
    b"-",
    b"-.5",
    b"1e",
    b"1e+",
    b"1e-",
    b"+1",
    b"--1",
    b"1.2.3",
    b"1e5e5",
    b"1e5.5",
    b"1-2",
    b"1+2",
    b"1..2",
    b"NaN",
    b"-NaN",
    b"Infinity",
    b"-Infinity",
    b"1e999",
    b"1,",
    b",1",
    b"1,,2",
    b"0x10",
    b"1_0",
    b"1 2",
    b"e5",
    b"E5",
    b"1f",
]


@pytest.mark.parametrize("where", ["short", "long"])
@pytest.mark.parametrize("number", BAD_NUMBERS, ids=[n.decode() for n in BAD_NUMBERS])
def test_a_bad_number_is_refused_with_orjson_message(number, where, loop):
    body = vector_body(number, pad=0 if where == "short" else 40) if where == "long" else b"[" + number + b"]"
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(body)
    assert scan(body) is None
    assert verdict(lazyjson.loads, body) == verdict(orjson.loads, body)


@pytest.mark.parametrize("at", range(0, 120, 7))
def test_a_bad_number_at_any_place_of_a_block_is_refused(at, loop):
    """Each bad form across the wide loop's 64-byte block edges: before, on and after one."""
    for number in BAD_NUMBERS:
        good = b"[" + b"1," * 60 + b"2]"
        body = good[: 1 + 2 * (at // 2)] + number + b"," + good[1 + 2 * (at // 2) :]
        assert scan(body) is None, body
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(body)


BAD_BODIES = [
    vector_body(b"1") + b" x",  # trailing garbage
    vector_body(b"1")[:-1],  # truncated: each cut below too
    *(vector_body(b"1")[:cut] for cut in (1, 30, 100, 200, 250)),
    vector_body(b"1").replace(b'"index"', b'"ind\xffex"'),  # bad UTF-8
    vector_body(b"1").replace(b'"index"', b'"ind\xed\xa0\x80ex"'),  # a surrogate written in UTF-8
    vector_body(b"1").replace(b'"index"', b'"ind\\ud800ex"'),  # a lone surrogate escaped
    vector_body(b"1").replace(b'"index"', b'"ind\\udc00ex"'),
    vector_body(b"1").replace(b'"index"', b'"ind\\ud800\\u0041"'),
    vector_body(b"1").replace(b'"index"', b'"ind\\x41"'),  # not an escape of JSON's
    vector_body(b"1").replace(b'"index"', b'"ind\tex"'),  # a raw control character
    vector_body(b"1").replace(b'"index":0', b'"index":nul'),
    vector_body(b"1").replace(b'"index":0', b'"index":True'),
    b"\xef\xbb\xbf" + vector_body(b"1"),
    b"[" * 2000 + b"]" * 2000,  # deep nesting
    b"",
    b"   ",
]


@pytest.mark.parametrize("body", BAD_BODIES, ids=range(len(BAD_BODIES)))
def test_a_bad_body_is_refused_with_orjson_message(body, loop):
    assert scan(body) is None
    assert verdict(lazyjson.loads, body) == verdict(orjson.loads, body)


GOOD_NUMBERS = [b"0", b"-0", b"-0.0", b"1e5", b"1E5", b"1e+05", b"1e-05", b"123456789", b"0.000001", b"-9.5e-7"]


@pytest.mark.parametrize("number", GOOD_NUMBERS, ids=[n.decode() for n in GOOD_NUMBERS])
def test_a_good_answer_is_accepted_and_counted(number, loop):
    body = vector_body(number)
    doc = scan(body)
    vector = doc["data"][0]["embedding"]
    expected = orjson.loads(body)["data"][0]["embedding"]
    assert isinstance(vector, Numbers) and len(vector) == len(expected) == 41
    assert vector.values() == expected and vector.numbers_only()


def test_the_mock_large_answer_is_read_by_the_pass_with_its_counts(loop):
    body = orjson.dumps(_openai([[(2 * (k % 64) - 63) / 128 for k in range(1024)]] * 64))
    doc = scan(body)
    assert doc is not None, "the pass refused a good answer: simdjson read it"
    assert [len(item["embedding"]) for item in doc["data"]] == [1024] * 64
    assert plain(doc) == orjson.loads(body)


NUMBER_BYTES = st.sampled_from([b"0", b"1", b"9", b"-", b"+", b".", b"e", b"E", b",", b" ", b"]", b"x", b"05", b"12"])
SOME_VALUES = st.lists(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**70), 2**70), max_size=40)


@settings(
    max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(SOME_VALUES, st.lists(NUMBER_BYTES, max_size=12), st.integers(0, 400))
def test_what_the_pass_accepts_orjson_accepts_alike(loop, values, noise, where):
    """Any body: the pass gives orjson's document or refuses; never a document orjson refuses or reads otherwise."""
    body = bytearray(
        json.dumps({"data": [{"embedding": values}, {"embedding": [0.5] * 20}]}, separators=(",", ":")).encode()
    )
    where = min(where, len(body))
    body[where:where] = b"".join(noise)
    doc = scan(bytes(body))
    if doc is not None:
        assert plain(doc) == orjson.loads(bytes(body))
    assert verdict(lazyjson.loads, bytes(body)) == verdict(orjson.loads, bytes(body))


ORDINARY = st.floats(min_value=-1e30, max_value=1e30).filter(lambda x: x == 0 or abs(x) > 1e-90)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(ORDINARY | st.integers(-(2**62), 2**62), min_size=1, max_size=60), max_size=5), st.booleans())
def test_good_vectors_are_accepted_and_counted(loop, vectors, spaced):
    """orjson's compact form and Python's spaced one: accepted (not left to simdjson), every length right."""
    body = (json.dumps if spaced else orjson.dumps)({"data": [{"embedding": v} for v in vectors]})
    body = body.encode() if isinstance(body, str) else body
    doc = scan(body)
    assert doc is not None
    assert [len(item["embedding"]) for item in doc["data"]] == [len(v) for v in vectors]
    assert plain(doc) == orjson.loads(body)


@pytest.mark.parametrize(
    ("vector", "raw"),
    [([1, -2, 3] * 30, True), ([1, 2.5] * 30, False), ([2**63, 1] * 30, False), ([10**20] * 30, False)],
    ids=["ints", "floats", "past int64", "past uint64"],
)
def test_as_int64_of_the_pass(vector, raw, loop):
    numbers = scan(orjson.dumps({"e": vector}) if max(vector) < 2**64 else json.dumps({"e": vector}).encode())
    if numbers is None:  # left to simdjson: nothing of the pass's to check
        return
    got = numbers["e"].as_int64()
    assert (got == array("q", vector).tobytes()) if raw else got is None


@pytest.mark.parametrize("body", [*ODD, *BAD, GOOD], ids=range(len(ODD) + len(BAD) + 1))
def test_where_the_pass_was_not_built_simdjson_reads_as_before(body, monkeypatch):
    """An install without a C compiler (Locust's image) has no _jsonscan: the same verdicts by simdjson."""
    monkeypatch.setattr(lazyjson, "_scan", None)
    assert verdict(lazyjson.loads, body) == verdict(orjson.loads, body)
