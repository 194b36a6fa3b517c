"""vLLM's max_model_len checked against each prepared input, not a request's average: a pool of uneven inputs
(--input-len 8:300, four a request, against a model of 256 tokens) whose every request averages under the
limit still holds inputs above it, and the warning at start names how many, and how many requests vLLM will
refuse; the bundled mock (--max-model-len) refuses exactly those. With --truncate end nothing is said and
nothing refused; with --count-tokens-with-server the counts are the server's, said to be exact. The
lengths are kept only for a pool whose server says a limit and is not asked to cut, in tallies by length."""

from __future__ import annotations

import logging
import re
from typing import Any

import orjson
import pytest
import requests
from locust.env import Environment

import poolbench_locust as pb
from poolbench_locust.endpoints.spec import Inputs
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.mockserver.tei import TEI_MAX_INPUT_LENGTH
from poolbench_locust.options import Settings
from poolbench_locust.serverlimits.limits_check import batch_error, warn_model_length
from poolbench_locust.workload.input_lengths import InputLengths, lengths_for
from poolbench_locust.workload.pool import prepare
from poolbench_locust.workload.request_fields import request_fields
from poolbench_locust.workload.tokens import WordEstimate
from tests.support.harness import options
from tests.support.locust_run import locust_argv
from tests.support.processes import run_and_find_leftovers

LIMIT = 256
UNEVEN = ("--input-len", "8:300", "--batch-size", "4")
WARNING = re.compile(
    r"--truncate: (\w+): (\d+) of its (\d+) prepared inputs are above the model's max_model_len (\d+) at \S+ "
    r"\(GET /v1/models\), the longest (\d+) tokens \((.*)\); vLLM answers 400 to every request holding one: "
    r"(\d+) of the pool's (\d+) requests, (.*) of those sent; give --truncate end"
)


@pytest.fixture(scope="module")
def short_model(mock_server_factory):
    """The mock's vLLM serving a model of 256 tokens."""
    return mock_server_factory("--max-model-len", str(LIMIT))


def _pool(*args: str, host: str | None = None) -> Any:
    return plan_for(type("EmbeddingsUser", (pb.EmbeddingsUser,), {}), options(*args), host)


def _expected(*args: str, host: str | None = None) -> tuple[int, int, int, int, int]:
    """(inputs above LIMIT, inputs, requests holding one, requests, longest input), read from the bodies as the
    mock counts them (a word a token)."""
    bodies = [r.body for r in _pool(*args, host=host).requests]
    per_request = [[len(text.split()) for text in orjson.loads(body)["input"]] for body in bodies]
    inputs = [n for request in per_request for n in request]
    return (
        sum(n > LIMIT for n in inputs),
        len(inputs),
        sum(max(request) > LIMIT for request in per_request),
        len(per_request),
        max(inputs),
    )


def test_the_mock_serves_the_length_it_is_given(short_model):
    models = requests.get(f"{short_model.url}/v1/models", timeout=5).json()
    assert models["data"][0]["max_model_len"] == LIMIT
    counted = requests.post(f"{short_model.url}/tokenize", json={"prompt": "a b"}, timeout=5).json()
    assert counted["count"] == 2 and counted["max_model_len"] == LIMIT
    fits = requests.post(f"{short_model.url}/v1/embeddings", json={"input": ["w " * LIMIT]}, timeout=5)
    assert fits.status_code == 200
    refused = requests.post(f"{short_model.url}/v1/embeddings", json={"input": ["a", "w " * (LIMIT + 1)]}, timeout=5)
    assert refused.status_code == 400 and f"maximum context length is {LIMIT} tokens" in refused.text
    cut = {"input": ["w " * (LIMIT + 1)], "truncate_prompt_tokens": -1}
    answer = requests.post(f"{short_model.url}/v1/embeddings", json=cut, timeout=5).json()
    assert answer["usage"]["prompt_tokens"] == LIMIT


def test_the_scenario_every_request_averages_under_the_limit_and_some_inputs_are_above_it():
    plan = _pool(*UNEVEN)
    averages = [-(-r.client_tokens // r.sequences) for r in plan.requests]
    assert max(averages) <= LIMIT, "the old check (a request's tokens over its inputs) would say nothing"
    above, inputs, refused, requests_, longest = _expected(*UNEVEN)
    assert 0 < above < inputs and 0 < refused < requests_ and longest > LIMIT


def _warnings(output: str) -> list[re.Match[str]]:
    return [m for line in output.splitlines() if (m := WARNING.search(line))]


def test_uneven_inputs_above_max_model_len_are_counted_and_refused_as_said(short_model, tmp_path):
    locustfile = tmp_path / "one.py"
    locustfile.write_text("from poolbench_locust import EmbeddingsUser  # noqa: F401\n")
    above, inputs, refused, requests_, longest = _expected(*UNEVEN)

    def run(*args: str) -> str:
        short_model.reset()
        # three turns of the pool, whatever the machine's speed: the refused share is judged per turn
        argv = locust_argv(
            locustfile, *UNEVEN, *args, headless=True, users=1, requests=3 * requests_, host=short_model.url
        )
        code, output, _ = run_and_find_leftovers(argv, grace=0)
        assert code in (0, 1), output[-2000:]  # 1: the refused requests are failures
        return output

    output = run()
    (warning,) = _warnings(output)
    assert warning.group(1) == "EmbeddingsUser" and int(warning.group(4)) == LIMIT
    said = tuple(int(warning.group(i)) for i in (2, 3, 7, 8, 5))
    assert said == (above, inputs, refused, requests_, longest)
    assert warning.group(9) == f"{round(100 * refused / requests_)} %"
    assert "the client's estimate, one token a word" in warning.group(6) and "at least this many" in warning.group(6)
    served = short_model.stats()
    # The mock refuses a request holding an input above its limit: the pool's share of its requests, sent in turn.
    assert 0 < served["requests"] - served["ok"] < served["requests"], served
    cycles = served["requests"] / requests_
    assert abs((served["requests"] - served["ok"]) / served["requests"] - refused / requests_) <= 1 / cycles

    output = run("--truncate", "end")
    assert _warnings(output) == [] and "max_model_len" not in output, output[-2000:]
    served = short_model.stats()
    assert served["requests"] == served["ok"] > 0, "vLLM cut every input to its limit: nothing refused"


def _check(*args: str, host: str) -> tuple[str | None, list[str]]:
    """The start checks' stop and max_model_len warnings for an EmbeddingsUser run, in-process."""
    user = type("EmbeddingsUser", (pb.EmbeddingsUser,), {})
    env = Environment(user_classes=[user], host=host, parsed_options=options(*args))
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = Keep(logging.WARNING)
    logging.getLogger("poolbench_locust").addHandler(handler)
    try:
        error = batch_error(env)
        warn_model_length(env)
        warn_model_length(env)  # the web UI's next start: said once
    finally:
        logging.getLogger("poolbench_locust").removeHandler(handler)
    return error, [r for r in records if "max_model_len" in r]


def test_counts_from_the_servers_tokenize_are_said_to_be_exact(short_model):
    _, (line,) = _check(*UNEVEN, "--count-tokens-with-server", host=short_model.url)
    warning = WARNING.search(line)
    assert warning is not None, line
    assert warning.group(6) == "exact, the server's /tokenize count"
    above, inputs, refused, requests_, longest = _expected(*UNEVEN, "--count-tokens-with-server", host=short_model.url)
    said = tuple(int(warning.group(i)) for i in (2, 3, 7, 8, 5))
    assert said == (above, inputs, refused, requests_, longest)


def test_a_pool_within_the_limit_or_cut_to_it_gets_no_word(short_model):
    assert _check("--input-len", str(LIMIT), host=short_model.url) == (None, [])
    assert _check(*UNEVEN, "--truncate", "start", host=short_model.url) == (None, [])
    # /tokenize says the limit too: a span only partly above it is counted and warned of, not stopped
    assert _check(*UNEVEN, "--count-tokens-with-server", "--truncate", "end", host=short_model.url) == (None, [])


def test_lengths_are_kept_only_where_a_limit_is_checked():
    assert _pool(*UNEVEN).input_lengths is not None
    assert _pool(*UNEVEN, "--truncate", "end").input_lengths is None
    infinity = plan_for(type("U", (pb.InfinityEmbeddingsUser,), {}), options(*UNEVEN))
    assert infinity.input_lengths is None
    assert lengths_for(pb.TEIEmbedUser.endpoint, Settings(truncate="none")) is not None


def test_the_tally_grows_with_distinct_lengths_not_with_the_pool():
    tally = InputLengths()
    for request in range(10_000):
        tally.add((request % 7, 300 + request % 3, 5))
    assert tally.input_count == 30_000 and tally.request_count == 10_000
    assert len(tally.inputs) == 7 + 3 and len(tally.requests) == 3
    assert tally.above(300) == (6666, 6666, 302)
    assert tally.above(302) == (0, 0, 302)


def test_each_input_is_tallied_as_the_server_sees_it():
    counter = WordEstimate()

    def tallied(user: Any, inputs: Inputs, *args: str) -> InputLengths:
        settings = Settings.from_options(options(*args))
        tally = InputLengths()
        fields = request_fields(user.endpoint, settings)
        request = prepare(user.endpoint, settings, inputs, counter, fields, False, tally)
        assert sum(tally.inputs.elements()) == request.client_tokens, "the counts the request's total is made of"
        return tally

    texts = tallied(pb.EmbeddingsUser, Inputs(("a b c", "d", "e f")))
    assert sorted(texts.inputs.elements()) == [1, 2, 3] and dict(texts.requests) == {3: 1}
    # a cross-encoder's prompt is the query and the document together
    pairs = tallied(pb.RerankUser, Inputs(("a b c", "d"), query="q r"))
    assert sorted(pairs.inputs.elements()) == [3, 5]
    conversations = (
        ({"role": "system", "content": "x y"}, {"role": "user", "content": "z"}),
        ({"role": "user", "content": "w"},),
    )
    chats = tallied(
        pb.EmbeddingsChatUser,
        Inputs(("x y", "z", "w"), conversations=conversations),
        "--batch-size",
        "2",
    )
    assert sorted(chats.inputs.elements()) == [1, 3]


def test_an_input_tei_refuses_is_counted_exactly_in_the_stop(mock_server_factory):
    tei = mock_server_factory("--flavor", "tei")
    user = type("TEIEmbedUser", (pb.TEIEmbedUser,), {})
    span = ("--input-len", f"8:{TEI_MAX_INPUT_LENGTH + 600}", "--batch-size", "4", "--truncate", "none")
    env = Environment(user_classes=[user], host=tei.url, parsed_options=options(*span))
    error = batch_error(env)
    plan = plan_for(user, options(*span), tei.url)
    counts = [len(t.split()) for r in plan.requests for t in orjson.loads(r.body)["inputs"]]
    above = sum(n > TEI_MAX_INPUT_LENGTH for n in counts)
    assert 0 < above < len(counts)
    assert error is not None and error.startswith(f"--truncate: TEIEmbedUser: {above} of its {len(counts)} prepared")
    assert f"the longest {max(counts)} (the client's estimate" in error and "--truncate none" in error
