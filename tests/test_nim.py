"""NVIDIA NIM's /v1/ranking: a query and passages as {"text"} objects, rankings by logit, no usage."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import poolbench_locust as pb
from poolbench_locust.endpoints.spec import NAMED_TRUNCATION
from tests.support.bad_then_good import assert_failed_then_ok
from tests.support.class_runs import run_against_embedded_mock
from tests.support.harness import Run, failure_text
from tests.support.hostile import HostileServer, response, serve_requests

GOOD = [{"index": 1, "logit": 2.5}, {"index": 0, "logit": -1.25}]


def test_runs_clean_against_the_mock_in_nim_form(tmp_path):
    run = run_against_embedded_mock(tmp_path, "locustfiles/nim.py", "NIMRankingUser", "/v1/ranking")
    assert run.requests > 5 and run.failures == 0
    assert run.input_tokens == run.mock_prompt_tokens
    assert run.token_source == "client-estimate", "NIM sends no token count"


def test_the_request_is_nims_and_truncation_is_its_named_field():
    bodies: list[bytes] = []
    server = HostileServer(serve_requests(lambda _head, body, _n: bodies.append(body) or rankings(GOOD)))
    try:
        event = Run(pb.NIMRankingUser, server.url, "--model", "nv", "--documents", "2").one()
    finally:
        server.close()
    assert event["exception"] is None, failure_text(event)
    body = orjson.loads(bodies[0])
    assert set(body) == {"model", "query", "passages"} and body["model"] == "nv"
    assert isinstance(body["query"]["text"], str)
    assert [set(p) for p in body["passages"]] == [{"text"}, {"text"}]
    assert pb.NIMRankingUser.endpoint.truncation == NAMED_TRUNCATION


def rankings(value: Any) -> bytes:
    return response(200, orjson.dumps({"rankings": value}))


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        (rankings(GOOD[:1]), "expected 2 results, got 1"),
        (response(200, orjson.dumps(GOOD)), "answer has no 'rankings' list"),
        (rankings([GOOD[0], {"index": 0, "logit": "high"}]), "ranking 1 logit is not a number: 'high'"),
        (rankings([GOOD[0], {"index": 0.5, "logit": 1.0}]), "ranking 1 index is not a whole number >= 0"),
        (rankings([GOOD[0], [0, 1.0]]), "ranking 1 is not an object"),
    ],
    ids=["fewer", "bare-list", "string-logit", "float-index", "not-an-object"],
)
def test_a_bad_ranking_answer_is_one_failure(bad, expected):
    assert_failed_then_ok(pb.NIMRankingUser, bad, rankings(GOOD), expected, "--documents", "2")
