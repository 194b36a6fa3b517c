"""SGLang's /v1/rerank (a bare list, tokens in each result's meta_info) and /v1/score (a scores matrix)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import poolbench_locust as pb
from tests.support.bad_then_good import assert_failed_then_ok, bad_then_good
from tests.support.class_runs import run_against_embedded_mock
from tests.support.hostile import response

DOCS = ("--documents", "2")


@pytest.mark.parametrize(
    ("user", "route", "source"),
    [("SGLangRerankUser", "/v1/rerank", "server"), ("SGLangScoreUser", "/v1/score", "client-estimate")],
)
def test_runs_clean_against_the_mock_in_sglang_form(tmp_path, user, route, source):
    run = run_against_embedded_mock(tmp_path, "locustfiles/sglang.py", user, route)
    assert run.requests > 5 and run.failures == 0
    assert run.input_tokens == run.mock_prompt_tokens
    assert run.token_source == source, "SGLang's score answer has usage null: the count is the client's own"


def rerank(results: Any) -> bytes:
    return response(200, orjson.dumps(results))


GOOD_RERANK = [
    {"score": 0.9, "document": None, "index": 1, "meta_info": {"prompt_tokens": 5}},
    {"score": 0.1, "document": None, "index": 0, "meta_info": {"prompt_tokens": 4}},
]


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        (GOOD_RERANK[:1], "expected 2 results, got 1"),
        ({"results": GOOD_RERANK}, "answer is not a JSON list of rerank results"),
        ([GOOD_RERANK[0], "x"], "result 1 is not an object"),
        ([GOOD_RERANK[0], {**GOOD_RERANK[1], "score": "0.1"}], "result 1 score is not a number: '0.1'"),
        ([GOOD_RERANK[0], {**GOOD_RERANK[1], "index": -1}], "result 1 index is not a whole number >= 0"),
        ([GOOD_RERANK[0], {**GOOD_RERANK[1], "meta_info": {"prompt_tokens": 2**63}}], "is implausible"),
    ],
    ids=["fewer", "not-a-list", "not-an-object", "string-score", "negative-index", "huge-tokens"],
)
def test_a_bad_rerank_answer_is_one_failure(bad, expected):
    assert_failed_then_ok(pb.SGLangRerankUser, rerank(bad), rerank(GOOD_RERANK), expected, *DOCS)


def test_rerank_tokens_are_the_sum_of_meta_info():
    _, ok, _ = bad_then_good(pb.SGLangRerankUser, rerank(GOOD_RERANK), rerank(GOOD_RERANK), *DOCS)
    assert ok["context"]["input_tokens"] == 9 and ok["context"]["token_source"] == "server"


def score(scores: Any) -> bytes:
    return response(200, orjson.dumps({"scores": scores, "model": "m", "usage": None, "object": "scoring"}))


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ([[0.5]], "expected 2 results, got 1"),
        ([[0.5], 0.25], "scores[1] is not a non-empty list of numbers"),
        ([[0.5], [None]], "scores[1][0] is not a number"),
        ([[0.5], []], "scores[1] is not a non-empty list of numbers"),
    ],
    ids=["fewer", "flat", "null", "empty-row"],
)
def test_a_bad_score_answer_is_one_failure(bad, expected):
    assert_failed_then_ok(pb.SGLangScoreUser, score(bad), score([[0.5], [0.25]]), expected, *DOCS)


def test_a_score_answer_without_scores_is_one_failure():
    bad = response(200, orjson.dumps({"data": [{"score": 0.5}] * 2, "usage": {"prompt_tokens": 4}}))
    assert_failed_then_ok(pb.SGLangScoreUser, bad, score([[0.5], [0.25]]), "answer has no 'scores' list", *DOCS)
