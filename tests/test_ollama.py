"""OllamaEmbedUser: Ollama's native /api/embed (ollama/ollama server/routes.go EmbedHandler, api/types.go).

Its answer carries its own token count (`prompt_eval_count`) and its own timings in nanoseconds
(`total_duration`, `load_duration`), shown beside the client's TTFB as the server's own (Server Queue:
load_duration, Server Inference: the rest of total_duration); a duration that is not one is one failed
request with a message. The bundled mock answers as Ollama does, refusals included.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import requests

import poolbench_locust as pb
from poolbench_locust.engine.plan import plan_for
from tests.support.bad_then_good import assert_failed_then_ok, bad_then_good
from tests.support.harness import Run, failure_text, options
from tests.support.hostile import response
from tests.support.locust_run import LOAD, run_locust

T = 5
MODEL = ("--model", "all-minilm")


@pytest.fixture(scope="module")
def ollama_mock(mock_server_factory):
    return mock_server_factory("--flavor", "ollama", "--ttfb-ms", "30", "--dim", "8")


def embed(**fields: Any) -> dict[str, Any]:
    return {"model": "all-minilm", "input": ["one two three", "four five"], **fields}


def test_the_mock_answers_api_embed_as_ollama_does(ollama_mock):
    doc = requests.post(f"{ollama_mock.url}/api/embed", json=embed(), timeout=T).json()
    assert set(doc) == {"model", "embeddings", "total_duration", "load_duration", "prompt_eval_count"}
    assert doc["model"] == "all-minilm" and len(doc["embeddings"]) == 2 and len(doc["embeddings"][0]) == 8
    assert doc["prompt_eval_count"] == 5
    assert doc["total_duration"] == 30_000_000, "nanoseconds: the mock's 30 ms before the headers"
    shorter = requests.post(f"{ollama_mock.url}/api/embed", json=embed(dimensions=4), timeout=T).json()
    assert len(shorter["embeddings"][0]) == 4
    larger = requests.post(f"{ollama_mock.url}/api/embed", json=embed(dimensions=64), timeout=T).json()
    assert len(larger["embeddings"][0]) == 8, "Ollama gives the model's own size when asked for more"


def test_the_mock_refuses_what_ollama_refuses(ollama_mock):
    def post(body: dict[str, Any]) -> tuple[int, str]:
        answer = requests.post(f"{ollama_mock.url}/api/embed", json=body, timeout=T)
        return answer.status_code, answer.json()["error"]

    assert post({"input": ["a"]}) == (404, "model '' not found"), "the model is checked first"
    assert post(embed(input=[1, 2])) == (400, "invalid input type")
    too_long = " ".join(["w"] * 9000)
    assert post(embed(input=[too_long], truncate=False)) == (400, "the input length exceeds the context length")
    assert requests.post(f"{ollama_mock.url}/api/embed", json=embed(input=[too_long]), timeout=T).status_code == 200
    empty = requests.post(f"{ollama_mock.url}/api/embed", json=embed(input=[]), timeout=T).json()
    assert empty == {"model": "all-minilm", "embeddings": []}, "Go leaves out the zero durations and count"


def test_ollama_runs_against_the_bundled_mock_with_its_own_timings_beside_ttfb(tmp_path):
    run = run_locust("locustfiles/ollama.py", *MODEL, *LOAD, users=2, requests=20, csv=tmp_path / "run")
    assert run.returncode == 0, run.stderr[-2000:]
    row = run.csv("pooling")["/api/embed"]
    assert int(row["Request Count"]) > 0 and row["Failure Count"] == "0", row
    assert row["Token Source"] == "server", "prompt_eval_count is the server's count"
    # The embedded mock waits 20 ms before the headers and reports that wait as its load_duration.
    assert float(row["Server Queue 50%"]) == pytest.approx(20.0)
    assert float(row["Server Inference 50%"]) == pytest.approx(0.0)
    assert float(row["TTFB 50%"]) >= 20.0


def test_ollama_without_a_model_stops_at_start_naming_model(tmp_path):
    run = run_locust("locustfiles/ollama.py", *LOAD, users=1, run_time="3s", csv=tmp_path / "run")
    assert run.returncode == 1
    output = run.stdout + run.stderr
    assert "--model: OllamaEmbedUser (/api/embed): the server needs a model" in output, output[-2000:]


def answer(**fields: Any) -> bytes:
    doc = {
        "model": "all-minilm",
        "embeddings": [[0.5, 0.25, 0.125, 1.0], [1.0, 0.5, 0.25, 0.125]],
        "total_duration": 30_000_000,
        "load_duration": 10_000_000,
        "prompt_eval_count": 9,
        **fields,
    }
    return response(200, orjson.dumps({k: v for k, v in doc.items() if v is not ...}))


def test_ollamas_durations_and_count_reach_the_request_context():
    _, ok, _ = bad_then_good(pb.OllamaEmbedUser, answer(), answer(), *MODEL)
    context = ok["context"]
    assert context["input_tokens"] == 9 and context["token_source"] == "server"
    assert context["server_total_ms"] == 30.0
    assert context["server_queue_ms"] == 10.0 and context["server_inference_ms"] == 20.0
    assert context["ttfb_ms"] < 30.0, "the server's own times are beside the client's, not instead of them"


def test_a_zero_load_duration_left_out_is_no_failure():
    _, ok, _ = bad_then_good(pb.OllamaEmbedUser, answer(load_duration=...), answer(load_duration=...), *MODEL)
    assert ok["exception"] is None and ok["context"]["server_inference_ms"] == 30.0


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"total_duration": "30ms"}, "total_duration is not a whole number of nanoseconds: '30ms'"),
        ({"total_duration": 30.5}, "total_duration is not a whole number of nanoseconds: 30.5"),
        ({"load_duration": True}, "load_duration is not a whole number of nanoseconds: True"),
        ({"total_duration": -1}, "total_duration is negative"),
        ({"total_duration": 10**17}, "total_duration is implausible: more than a day"),
        ({"load_duration": 40_000_000}, "load_duration is longer than total_duration"),
        ({"prompt_eval_count": -3}, "prompt_eval_count is negative"),
        ({"embeddings": [[0.5, 0.25, 0.125, 1.0]]}, "expected 2 embeddings, got 1"),
        ({"embeddings": ...}, "answer has no 'embeddings' list"),
    ],
    ids=["text", "float", "bool", "negative", "huge", "load-past-total", "tokens", "fewer", "none"],
)
def test_a_bad_ollama_answer_is_one_failed_request_with_its_message(fields, expected):
    assert_failed_then_ok(pb.OllamaEmbedUser, answer(**fields), answer(), expected, *MODEL)


def test_ollamas_request_carries_the_model_the_inputs_and_the_dimensions():
    plan = plan_for(pb.OllamaEmbedUser, options(*MODEL, "--dimensions", "96", "--batch-size", "2"))
    body = orjson.loads(plan.requests[0].body)
    assert body["model"] == "all-minilm" and body["dimensions"] == 96 and len(body["input"]) == 2
    assert plan.path == "/api/embed"


def test_the_servers_durations_follow_the_delay_it_was_given(ollama_mock):
    """The mock waits 30 ms before its headers and says so in its durations: they are shown as its own."""
    event = Run(pb.OllamaEmbedUser, ollama_mock.url, *MODEL, "--batch-size", "2").one()
    context = event["context"]
    assert event["exception"] is None, failure_text(event)
    assert context["server_total_ms"] == 30.0 and context["server_queue_ms"] == 30.0
    assert context["ttfb_ms"] >= 30.0, "the client's time to the headers includes the server's wait"
