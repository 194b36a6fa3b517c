"""The server's own request fields (issue 30): --truncate, --input-type and --extra-body reach every
request body in the server's own field, and what a class cannot send stops the run at start, naming
the option; the mock refuses what vLLM 0.34 and Cohere refuse."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import pytest
import requests
from locust.env import Environment

from poolbench_locust import users
from poolbench_locust.endpoints.spec import VLLM_TRUNCATION, Endpoint, data_answer
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.engine.user import EndpointUser
from poolbench_locust.mockserver.vllm import MAX_MODEL_LEN
from poolbench_locust.options import options_error
from poolbench_locust.options.parsers import MAX_EXTRA_BODY_CHARS
from poolbench_locust.wire import COHERE_NO_INPUT_TYPE
from tests.support.harness import first_body, options, start_error
from tests.support.hostile import server_process
from tests.support.locust_run import LOAD, run_locust

T = 10


def recording_server() -> AbstractContextManager[str]:
    return server_process("tests.support.recording_server:recording", {"RECORDING_DELAY_MS": "0"})


def bodies(url: str) -> list[dict[str, Any]]:
    return [(a["route"], a["body"]) for a in requests.get(f"{url}/arrivals", timeout=T).json()]


# ---- sent as each server names it, seen at a server that records the bodies --------------------------


def test_truncate_and_extra_body_reach_vllm_in_every_request():
    with recording_server() as url:
        result = run_locust(
            "locustfiles/embeddings.py",
            *LOAD,
            *("--truncate", "end", "--extra-body", '{"priority": 1, "use_activation": false}'),
            host=url,
            requests=20,
        )
        seen = bodies(url)
    assert result.returncode == 0, result.stderr[-2000:]
    assert seen and all(route == "/v1/embeddings" for route, _ in seen)
    for _, body in seen:
        assert body["truncate_prompt_tokens"] == -1 and body["truncation_side"] == "right", body
        assert body["priority"] == 1 and body["use_activation"] is False, body
        assert len(body["input"]) == 3, "the class's own fields are kept"


def test_truncate_reaches_tei_as_its_truncate_field():
    with recording_server() as url:
        result = run_locust(
            "locustfiles/tei.py",
            *("TEIEmbedUser", "TEIRerankUser"),  # the recording server answers these two routes
            *LOAD,
            *("--truncate", "start"),
            host=url,
            users=2,
            requests=20,
        )
        seen = bodies(url)
    assert result.returncode == 0, result.stderr[-2000:]
    assert {route for route, _ in seen} == {"/embed", "/rerank"}
    for _, body in seen:
        assert body["truncate"] is True and body["truncation_direction"] == "Left", body


@pytest.mark.parametrize(
    "user_class",
    [users.EmbeddingsUser, users.EmbeddingsChatUser, users.PoolingUser, users.RerankUser, users.ScoreUser],
    ids=lambda c: c.__name__,
)
def test_every_vllm_route_takes_truncate_prompt_tokens(user_class: type) -> None:
    assert first_body(user_class, "--truncate", "start").items() >= VLLM_TRUNCATION["start"].items()
    assert "truncate_prompt_tokens" not in first_body(user_class, "--truncate", "none"), "none: vLLM's default"
    assert "truncate_prompt_tokens" not in first_body(user_class), "not given: nothing is sent"


def test_cohere_embed_sends_truncate_and_input_type_as_cohere_names_them():
    body = first_body(users.CohereEmbedUser, "--truncate", "none", "--input-type", "search_query")
    assert body["truncate"] == "NONE" and body["input_type"] == "search_query"
    assert "input_type" not in first_body(users.CohereEmbedUser), "vLLM refuses an input_type its model does not define"


def test_nim_and_voyage_input_types_reach_v1_embeddings():
    assert first_body(users.EmbeddingsUser, "--input-type", "passage")["input_type"] == "passage"
    assert first_body(users.EmbeddingsUser, "--input-type", "document")["input_type"] == "document"


def test_extra_body_overrides_replaces_a_field_the_class_builds():
    body = first_body(users.EmbeddingsUser, "--extra-body", '{"encoding_format": "base64"}', "--extra-body-overrides")
    assert body["encoding_format"] == "base64"


# ---- refused at start, one line naming the option ------------------------------------------------------


class ListBodyUser(EndpointUser):
    """A route whose body is a JSON list (as KServe's batch forms are): nothing to merge fields into."""

    abstract = True
    endpoint = Endpoint(
        route="/list",
        shape="texts",
        body=lambda x, s: list(x.texts),
        answer=data_answer(None),
        truncation=VLLM_TRUNCATION,
    )


@pytest.mark.parametrize(
    ("user_class", "args", "line"),
    [
        (
            users.InfinityEmbeddingsUser,
            ["--truncate", "end"],
            "--truncate: InfinityEmbeddingsUser (/embeddings) cannot honour --truncate end: its server's request "
            "has no truncation field",
        ),
        (
            users.InfinityRerankUser,
            ["--input-type", "query"],
            "--input-type: InfinityRerankUser (/rerank) cannot honour --input-type query: its server's request has "
            "no input_type",
        ),
        (
            users.CohereEmbedUser,
            ["--input-type", "query"],
            "--input-type: CohereEmbedUser (/v2/embed) cannot honour --input-type query: it takes search_document, "
            "search_query, classification, clustering",
        ),
        (
            users.CohereEmbedUser,
            ["--model", "embed-english-v3.0"],
            "--input-type: CohereEmbedUser (/v2/embed) needs --input-type for the model embed-english-v3.0",
        ),
        (
            users.CohereEmbedUser,
            ["--model", "embed-v4.0"],
            "--input-type: CohereEmbedUser (/v2/embed) needs --input-type for the model embed-v4.0",
        ),
        (
            users.EmbeddingsUser,
            ["--extra-body", '{"input": ["x"], "priority": 1}'],
            "--extra-body: EmbeddingsUser (/v1/embeddings) builds 'input' itself: give --extra-body-overrides",
        ),
        (
            users.RerankUser,
            ["--truncate", "end", "--extra-body", '{"truncate_prompt_tokens": 512}'],
            "--extra-body: RerankUser (/rerank) builds 'truncate_prompt_tokens' itself",
        ),
        (ListBodyUser, ["--extra-body", '{"a": 1}'], "--extra-body: ListBodyUser (/list) cannot honour --extra-body"),
        (
            users.PoolingUser,
            ["--dimensions", "64"],
            "--dimensions: PoolingUser (/pooling) cannot honour --dimensions 64: vLLM's /pooling refuses it",
        ),
        (users.EmbeddingsUser, ["--extra-body-overrides"], "--extra-body-overrides: lets --extra-body replace"),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else getattr(v, "__name__", "-"),
)
def test_a_field_the_class_cannot_send_is_one_line_naming_the_option(user_class: type, args: list[str], line: str):
    error = start_error(user_class, *args)
    assert error is not None and error.startswith(line), error
    assert "\n" not in error


def test_a_cohere_v2_model_and_vllms_own_models_need_no_input_type():
    assert start_error(users.CohereEmbedUser, "--model", "embed-english-v2.0") is None
    assert start_error(users.CohereEmbedUser, "--model", "BAAI/bge-m3") is None
    assert (
        start_error(users.CohereEmbedUser, "--model", "embed-english-v3.0", "--input-type", "search_document") is None
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{priority: 1}", "must be a JSON object, e.g."),
        ('"text"', "must be a JSON object ({...}), got a JSON str"),
        ('{"a": 1, "a": 2}', "the field 'a' is given twice"),
        ('{"a": NaN}', "NaN is not JSON"),
        ('{"a": 100000000000000000000000}', "cannot be sent"),
        ('{"a": "' + "x" * MAX_EXTRA_BODY_CHARS + '"}', f"at most {MAX_EXTRA_BODY_CHARS} characters"),
        ("[" * 5000 + "]" * 5000, "nested too deep"),
    ],
    ids=["not-json", "not-object", "duplicate", "nan", "big-int", "too-large", "deep"],
)
def test_a_bad_extra_body_is_one_line_naming_it(text: str, says: str):
    given = options()
    given.extra_body = text  # as the web form or LOCUST_EXTRA_BODY give it: a text, judged by the same parser
    error = options_error(given)
    assert error is not None and error.startswith("--extra-body: ") and says in error, error
    assert "\n" not in error
    with pytest.raises(SystemExit):  # on the command line: argparse's one line, exit code 2
        options("--extra-body", text)


def test_extra_body_spelled_twice_is_one_plan():
    one = options("--extra-body", '{"b": 1, "a": [1, 2]}')
    other = options("--extra-body", '{ "a":[1,2],"b":1 }')
    env = Environment(user_classes=[users.EmbeddingsUser], parsed_options=one)
    assert plan_for(users.EmbeddingsUser, one, None, env) is plan_for(users.EmbeddingsUser, other, None, env)


def test_pooling_dimensions_stops_the_run_at_start_with_nothing_sent(mock_server):
    result = run_locust("locustfiles/pooling.py", *LOAD, "--dimensions", "64", host=mock_server.url, run_time="5s")
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "--dimensions: PoolingUser (/pooling) cannot honour --dimensions 64" in errors[0]
    assert mock_server.stats()["requests"] == 0
    assert "Traceback" not in result.stderr


# ---- the mock refuses what the real servers refuse ---------------------------------------------------------


def post(url: str, path: str, body: object, **headers: str) -> requests.Response:
    return requests.post(url + path, json=body, headers=headers, timeout=T)


def message(resp: requests.Response) -> str:
    doc = resp.json()
    return doc["error"]["message"] if "error" in doc else doc["message"]


def test_the_mock_refuses_dimensions_on_pooling_as_vllm_does(mock_server):
    resp = post(mock_server.url, "/pooling", {"input": ["a b"], "dimensions": 8})
    assert resp.status_code == 400 and message(resp) == "dimensions is currently not supported"
    assert post(mock_server.url, "/v1/embeddings", {"input": ["a b"], "dimensions": 8}).status_code == 200


@pytest.mark.parametrize("path", ["/v1/embeddings", "/pooling", "/classify"])
def test_the_mock_refuses_normalize_naming_use_activation(mock_server, path):
    resp = post(mock_server.url, path, {"input": ["a b"], "normalize": True})
    assert resp.status_code == 400 and "use_activation" in message(resp)
    assert post(mock_server.url, path, {"input": ["a b"], "use_activation": False}).status_code == 200


def test_the_mock_refuses_a_prompt_past_max_model_len_unless_truncated(mock_server):
    long = " ".join(["w"] * (MAX_MODEL_LEN + 5))
    refused = post(mock_server.url, "/v1/embeddings", {"input": [long]})
    assert refused.status_code == 400 and "maximum context length is 8192 tokens" in message(refused)
    cut = post(mock_server.url, "/v1/embeddings", {"input": [long, "a b"], "truncate_prompt_tokens": -1})
    assert cut.status_code == 200 and cut.json()["usage"]["prompt_tokens"] == MAX_MODEL_LEN + 2
    to_ten = post(mock_server.url, "/classify", {"input": [long], "truncate_prompt_tokens": 10})
    assert to_ten.status_code == 200 and to_ten.json()["usage"]["prompt_tokens"] == 10
    past = post(mock_server.url, "/pooling", {"input": ["a"], "truncate_prompt_tokens": MAX_MODEL_LEN + 1})
    assert past.status_code == 400 and "greater than max_model_len" in message(past)


def test_the_mock_answers_v2_embed_as_cohere_and_as_vllm(mock_server):
    v3 = {"model": "embed-english-v3.0", "texts": ["a b"], "embedding_types": ["float"]}
    cohere = {"x-mock-flavor": "cohere"}
    refused = post(mock_server.url, "/v2/embed", v3, **cohere)
    assert refused.status_code == 400 and refused.json() == {"message": COHERE_NO_INPUT_TYPE}
    assert post(mock_server.url, "/v2/embed", {**v3, "input_type": "search_query"}, **cohere).status_code == 200
    assert post(mock_server.url, "/v2/embed", {**v3, "model": "embed-english-v2.0"}, **cohere).status_code == 200
    assert post(mock_server.url, "/v2/embed", {**v3, "input_type": "search_document"}).status_code == 200  # vLLM
    assert post(mock_server.url, "/v2/embed", {**v3, "truncate": "MIDDLE"}).status_code == 400


def test_cohere_embed_user_with_input_type_runs_clean_against_cohere(mock_server_factory):
    server = mock_server_factory("--flavor", "cohere")
    result = run_locust(
        "locustfiles/cohere_embed.py",
        *LOAD,
        *("--model", "embed-english-v3.0", "--input-type", "search_document", "--truncate", "end"),
        host=server.url,
        requests=20,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    stats = server.stats()
    assert stats["requests"] > 0 and stats["ok"] == stats["requests"], stats
