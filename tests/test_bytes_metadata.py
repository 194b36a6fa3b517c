"""The `bytes` answer's metadata read by the C pass (`_jsonscan.offsets`): the same verdict as orjson's reading.

vLLM describes a `bytes` body in a header of JSON, one object per input; the pass adds up `end - start` over
them without building them (16 us -> 4 us for 64 inputs). Whatever it reads, the checks must judge exactly as
they do on orjson's document: the same failure message, the same tokens, the same bytes kept for the first
vector. Where it is unsure it must say so (None), never read a document otherwise.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from poolbench_locust import lazyjson
from poolbench_locust.endpoints.spec import AnswerError
from poolbench_locust.endpoints.vllm_bytes import BytesForm, metadata
from poolbench_locust.engine.body import BadResponse
from poolbench_locust.options import Settings
from tests.support.answers import judged
from tests.support.one_edit import one_edit

pytestmark = pytest.mark.skipif(not lazyjson.SCANS, reason="the C pass was not built (no C compiler)")

DIMS = 4
HEAD = struct.pack(f"<{DIMS}f", 0.5, -0.25, 0.125, 1.0)


@dataclass
class Req:
    expected_items: int
    input_tokens: Any = None


def vllm_metadata(items: int, dims: int = DIMS, **extra: Any) -> dict[str, Any]:
    """vLLM's metadata for `items` float32 vectors, as its serving code writes it."""
    width = dims * 4
    data = [
        {
            "index": i,
            "embed_dtype": "float32",
            "endianness": "little",
            "start": i * width,
            "end": (i + 1) * width,
            "shape": [dims],
        }
        for i in range(items)
    ]
    return {
        "id": "embd-1",
        "created": 1796440871,
        "model": "m",
        "data": data,
        "usage": {"prompt_tokens": 7 * items, "total_tokens": 7 * items},
        **extra,
    }


def verdict(text: str, body_size: int, expected: int, check: Settings, *, each_item: bool) -> str:
    """What the engine makes of a `bytes` answer with this metadata: the failure's message, or its figures."""
    try:
        form = BytesForm(check, token_level=False, each_item=each_item)
        answer, kept = judged(form, {"metadata": text}, HEAD, body_size, Req(expected), check)
        return f"ok: {answer.prompt_tokens} tokens, {kept} bytes kept"
    except (AnswerError, BadResponse) as e:
        return str(e)


CHECKS = [Settings(check_vectors=True), Settings(), Settings(no_validate=True)]


def same_verdict(text: str, body_size: int, expected: int) -> None:
    for check in CHECKS:
        by_orjson = verdict(text, body_size, expected, check, each_item=True)
        assert verdict(text, body_size, expected, check, each_item=False) == by_orjson, (text, check)


def test_vllm_metadata_is_read_by_the_pass_with_its_sum():
    doc = vllm_metadata(64, dims=1024)
    meta = lazyjson.offsets(orjson.dumps(doc))
    assert meta is not None, "the pass refused vLLM's metadata: orjson read it"
    items = meta["data"]
    assert isinstance(items, lazyjson.Offsets)
    assert len(items) == 64 and items.described == 64 * 4096
    first = {k: v for k, v in doc["data"][0].items() if k != "shape"}
    assert {k: v for k, v in items[0].items() if k != "shape"} == first
    assert list(items[0]["shape"]) == [1024]
    assert {k: v for k, v in meta.items() if k != "data"} == {k: v for k, v in doc.items() if k != "data"}
    with pytest.raises(IndexError, match="only the first of the 64"):
        items[1]
    text = orjson.dumps(doc).decode()
    assert verdict(text, 64 * 4096, 64, Settings(), each_item=False) == "ok: 448 tokens, 0 bytes kept"


@pytest.mark.parametrize(
    "doc",
    [
        vllm_metadata(3),
        vllm_metadata(1),
        vllm_metadata(0),
        vllm_metadata(3, usage=None),
        {"data": [{"start": 0, "end": 16}, {"start": 16, "end": 32, "start2": [], "x": None, "y": True, "z": -1.5e3}]},
        {"data": [{"start": 0, "end": 16}, {"start": 16.0, "end": 32}]},  # int() reads 16.0
        {"data": [{"start": 0, "end": 16}, {"start": "16", "end": 32}]},  # int() reads "16"
        {"data": [{"start": 0, "end": 16}, {"end": 32}]},
        {"data": [{"start": 0, "end": 16}, 7]},
        {"data": [{"start": 0, "end": 16}, {"start": 16, "end": 32, "shape": {"a": 1}}]},
        {"data": [{"end": 16}, {"start": 0, "end": 16}]},
        {"data": [{"start": 10**18, "end": 10**18 + 16}, {"start": -(10**18), "end": 10**18}]},
        {"data": [{"start": 0, "end": 2**70}]},
        {"data": [{"start": 0, "end": 16, "embed_dtype": "float99"}]},
        {"data": [{"start": 0, "end": 16, "endianness": "middle"}]},
        {"data": [{"start": 0, "end": 16, "endianness": "lit\u00e9"}, {"start": 16, "end": 32, "k\u00e9": "\u00e9"}]},
        {"data": [{"start": 0, "end": 16}], "usage": {"prompt_tokens": -3}},
        {"data": [{"start": 0, "end": 16}], "usage": {"prompt_tokens": 2.5}},
        {"data": {"start": 0, "end": 16}},
        {"data": [[0, 16]]},
        {"usage": {"prompt_tokens": 3}},
        [{"start": 0, "end": 16}],
    ],
)
def test_corners_are_judged_as_on_orjsons_reading(doc):
    text = json.dumps(doc)
    for expected in (1, 2, 3):
        for body_size in (0, 16, 32, 48, 64):
            same_verdict(text, body_size, expected)


@pytest.mark.parametrize(
    "text",
    [
        '{"data":[{"start":0,"end":16}],"data":[]}',  # a repeated key: orjson keeps the last
        '{"data":[{"start":0,"end":16},{"start":16,"end":32,"start":0}]}',
        '{"data":[{"start":0,"end":16,"end":8},{"start":16,"end":32}]}',
        '{"data":[{"start":0,"end":16}]} x',
        '{"data":[{"start":0,"end":16},]}',
        '{"data":[{"start":0,"end":16}{"start":16,"end":32}]}',
        '{"data":[{"start":0,"end":16},{"start":16,"end":032}]}',
        '{"data":[{"start":0,"end":16},{"start":16,"end":32,"s":"a\\u0000"}]}',
        '{"data":[{"start":0,"end":16},{"start":16,"end":32,"s":"\\ud800"}]}',
        '{"data":[{"start":0,"end":16},{"start":16,"end":32,"s":[1,]}]}',
        '{"data":[{"start":0,"end":16},{"start":16,"end":32,"s":tru}]}',
        '{"data":[{"start":0,"end":16},{"start":16,"end":3',
        "\ud800",
        "",
    ],
)
def test_written_corners_are_judged_as_on_orjsons_reading(text):
    same_verdict(text, 32, 2)


GARBLE = list('0123456789.eE+-,:[]{}" \tNa\\\u00e9\x00tfn')


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 6), st.data())
def test_a_garbled_metadata_is_judged_as_on_orjsons_reading(items, data):
    """Any metadata one edit away from vLLM's: the pass's reading is judged as orjson's, message for message."""
    text = one_edit(list(orjson.dumps(vllm_metadata(items)).decode()), data, GARBLE)
    same_verdict("".join(text), items * DIMS * 4, items)


ITEM = st.fixed_dictionaries(
    {"start": st.integers(-(10**19), 10**19), "end": st.integers(-(10**19), 10**19)},
    optional={
        "index": st.integers(0, 10),
        "embed_dtype": st.sampled_from(["float32", "float16", "bfloat16", "int8"]),
        "endianness": st.sampled_from(["little", "big", "native", "x"]),
        "shape": st.lists(st.integers(0, 4096), max_size=2),
    },
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ITEM, max_size=6), st.integers(-40, 200), st.booleans())
def test_any_offsets_are_judged_as_on_orjsons_reading(items, body_size, spaced):
    """Offsets that add up or not, past int64 or not, spaced as Python writes JSON or packed as orjson does."""
    doc = {"data": items, "usage": {"prompt_tokens": 5}}
    text = json.dumps(doc, separators=(", ", ": ") if spaced else (",", ":"))
    same_verdict(text, max(body_size, 0), len(items))


def test_where_the_pass_was_not_built_orjson_reads_as_before(monkeypatch):
    monkeypatch.setattr(lazyjson, "_offsets", None)
    text = orjson.dumps(vllm_metadata(3)).decode()
    assert type(metadata({"metadata": text})["data"]) is list
    assert verdict(text, 3 * DIMS * 4, 3, Settings(), each_item=False) == "ok: 21 tokens, 0 bytes kept"
