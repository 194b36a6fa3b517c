"""TEI's routes beside /embed and /rerank: /predict, /embed_sparse, /embed_all and /similarity.

TEI's answers carry no usage: the token count is its x-compute-tokens header."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import poolbench_locust as pb
from poolbench_locust.endpoints.spec import TEI_TRUNCATION
from tests.support.bad_then_good import assert_failed_then_ok
from tests.support.class_runs import run_against_embedded_mock
from tests.support.harness import Run, failure_text
from tests.support.hostile import HostileServer, response, serve_requests


@pytest.mark.parametrize(
    ("user", "route"),
    [
        ("TEIPredictUser", "/predict"),
        ("TEISparseEmbedUser", "/embed_sparse"),
        ("TEIEmbedAllUser", "/embed_all"),
        ("TEISimilarityUser", "/similarity"),
    ],
)
def test_runs_clean_against_the_mock_in_tei_form(tmp_path, user, route):
    run = run_against_embedded_mock(tmp_path, "locustfiles/tei.py", user, route)
    assert run.requests > 5 and run.failures == 0
    assert run.input_tokens == run.mock_prompt_tokens
    assert run.token_source == "server", "tokens from x-compute-tokens"


def tei(doc: Any, tokens: int = 8) -> bytes:
    """A TEI answer with its headers (x-compute-type marks TEI's header set)."""
    headers = [("x-compute-type", "cpu"), ("x-compute-tokens", str(tokens)), ("x-compute-time", "1")]
    return response(200, orjson.dumps(doc), headers=headers)


LABELS = [{"score": 0.75, "label": "POSITIVE"}, {"score": 0.25, "label": "NEGATIVE"}]
SPARSE = [{"index": 7, "value": 0.5}, {"index": 2011, "value": 1.25}]
MATRIX = [[0.5, 0.25, 0.125], [1.0, 0.5, 0.25]]

NOT_WHOLE = "entry 0 index is not a whole number >= 0"
PREDICT, SPARSE_EMBED = pb.TEIPredictUser, pb.TEISparseEmbedUser
BAD = [
    (PREDICT, [LABELS, LABELS], LABELS, "expected 2 embeddings, got 1"),  # one input's form: one result
    (PREDICT, [LABELS, LABELS], {"label": "x"}, "answer is not a JSON list"),
    (PREDICT, [LABELS, LABELS], [LABELS, [{"score": "high", "label": "x"}]], "prediction 1[0].score is not a number"),
    (PREDICT, [LABELS, LABELS], [LABELS, [{"score": 0.5, "label": 3}]], "prediction 1[0].label is not a string"),
    (PREDICT, [LABELS, LABELS], [LABELS, []], "prediction 1 is not a non-empty list of label scores"),
    (SPARSE_EMBED, [SPARSE, SPARSE], [SPARSE], "expected 2 embeddings, got 1"),
    (SPARSE_EMBED, [SPARSE, SPARSE], [SPARSE, {"index": 1}], "sparse embedding 1 is not a list"),
    (SPARSE_EMBED, [SPARSE, SPARSE], [SPARSE, [{"index": -1, "value": 0.5}]], NOT_WHOLE),
    (SPARSE_EMBED, [SPARSE, SPARSE], [SPARSE, [{"index": 1.5, "value": 0.5}]], NOT_WHOLE),
    (SPARSE_EMBED, [SPARSE, SPARSE], [SPARSE, [{"index": True, "value": 0.5}]], NOT_WHOLE),
    (SPARSE_EMBED, [SPARSE, SPARSE], [SPARSE, [{"index": 1, "value": None}]], "entry 0 value is not a number"),
    (pb.TEIEmbedAllUser, [MATRIX, MATRIX], [MATRIX], "expected 2 embeddings, got 1"),
    (pb.TEIEmbedAllUser, [MATRIX, MATRIX], [MATRIX, []], "embedding 1 is not a non-empty list of token rows"),
    (pb.TEIEmbedAllUser, [MATRIX, MATRIX], [MATRIX, MATRIX[0]], "embedding 1 is not a non-empty list of token rows"),
    (pb.TEIEmbedAllUser, [MATRIX, MATRIX], [MATRIX, [MATRIX[0], [0.5]]], "a token row of 1 value, expected 3"),
    (pb.TEISimilarityUser, [0.5, 0.25], [0.5], "expected 2 results, got 1"),
    (pb.TEISimilarityUser, [0.5, 0.25], [0.5, "0.25"], "similarity 1 is not a number: '0.25'"),
    (pb.TEISimilarityUser, [0.5, 0.25], {"scores": [0.5, 0.25]}, "answer is not a JSON list"),
]


@pytest.mark.parametrize(
    ("user", "good", "bad", "expected"), BAD, ids=[f"{u.__name__}-{i}" for i, (u, *_) in enumerate(BAD)]
)
def test_a_bad_answer_is_one_failure(user, good, bad, expected):
    assert_failed_then_ok(user, tei(bad), tei(good), expected, "--documents", "2")


def test_predict_reads_one_inputs_answer_and_sends_a_batch_of_one_text_lists():
    bodies: list[bytes] = []
    server = HostileServer(serve_requests(lambda _head, body, _n: bodies.append(body) or tei(LABELS)))
    try:
        event = Run(pb.TEIPredictUser, server.url, "--batch-size", "1").one()
    finally:
        server.close()
    assert event["exception"] is None, failure_text(event)
    inputs = orjson.loads(bodies[0])["inputs"]
    assert len(inputs) == 1 and isinstance(inputs[0], list) and len(inputs[0]) == 1, "a [a, b] list is one pair"


def test_tei_truncation_is_declared_where_teis_request_takes_it():
    for user in (pb.TEIPredictUser, pb.TEISparseEmbedUser, pb.TEIEmbedAllUser):
        assert user.endpoint.truncation == TEI_TRUNCATION
    # /similarity takes it under "parameters" (SimilarityParameters in TEI's router/src/http/types.rs)
    assert pb.TEISimilarityUser.endpoint.truncation["start"] == {"parameters": TEI_TRUNCATION["start"]}
