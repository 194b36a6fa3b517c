"""Infinity's /classify as its own class: `data` holds one list of label scores per input."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import poolbench_locust as pb
from tests.support.bad_then_good import assert_failed_then_ok
from tests.support.class_runs import run_against_embedded_mock
from tests.support.hostile import response

LABELS = [{"score": 0.75, "label": "POSITIVE"}, {"score": 0.25, "label": "NEGATIVE"}]


def classify(data: Any, usage: Any = None) -> bytes:
    doc = {"object": "classify", "data": data, "model": "m", "id": "infinity-1", "created": 1}
    doc["usage"] = {"prompt_tokens": 12, "total_tokens": 12} if usage is None else usage
    return response(200, orjson.dumps(doc))


def test_runs_clean_against_the_mock_in_infinity_form(tmp_path):
    run = run_against_embedded_mock(tmp_path, "locustfiles/infinity.py", "InfinityClassifyUser", "/classify")
    assert run.requests > 5 and run.failures == 0
    assert run.input_tokens == run.mock_prompt_tokens, "Infinity's usage (characters by default), as it sent it"
    assert run.token_source == "server"


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        (classify([LABELS]), "expected 2 embeddings, got 1"),
        (classify(LABELS), "data[0] is not a non-empty list of label scores"),
        (classify([LABELS, [{"score": None, "label": "x"}]]), "data[1][0].score is not a number"),
        (classify([LABELS, [{"score": float("inf"), "label": "x"}]]), "data[1][0].score is not"),
        (classify([LABELS, [{"score": 0.5}]]), "data[1][0].label is not a string"),
        (classify([LABELS, LABELS], {"prompt_tokens": -4}), "usage.prompt_tokens is negative: -4"),
        (response(200, orjson.dumps([LABELS, LABELS])), "answer has no 'data' list"),
    ],
    ids=["fewer", "flat", "null-score", "infinite-score", "no-label", "negative-usage", "bare-list"],
)
def test_a_bad_classify_answer_is_one_failure(bad, expected):
    assert_failed_then_ok(pb.InfinityClassifyUser, bad, classify([LABELS, LABELS]), expected)
