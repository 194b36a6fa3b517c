"""The server's own limits, learned before the run (poolbench_locust/serverlimits/): TEI refuses a batch
above its max_client_batch_size (32 by default) with 422 on every request, and an input above its
max_input_length when it does not truncate; its GET /info says both. A run that TEI cannot serve stops at
start with one line naming both numbers, having sent nothing. vLLM refuses an input above max_model_len
(GET /v1/models) unless asked to truncate: one warning names --truncate."""

from __future__ import annotations

import orjson
import pytest
import requests

from poolbench_locust.mockserver.tei import TEI_MAX_CLIENT_BATCH_SIZE, TEI_MAX_INPUT_LENGTH
from poolbench_locust.mockserver.vllm import MAX_MODEL_LEN
from poolbench_locust.serverlimits.tei_info import TeiLimits, read_info, tei_limits
from poolbench_locust.serverlimits.vllm_models import max_model_len, read_models
from tests.support.hostile import HostileServer, response, serve_requests
from tests.support.locust_run import locust_argv
from tests.support.processes import run_and_find_leftovers

CAP = TEI_MAX_CLIENT_BATCH_SIZE


@pytest.fixture(scope="module")
def tei_mock(mock_server_factory):
    return mock_server_factory("--flavor", "tei")


def test_the_mock_refuses_a_batch_above_teis_cap_as_tei_does(tei_mock):
    info = requests.get(f"{tei_mock.url}/info", timeout=5).json()
    assert info["max_client_batch_size"] == CAP
    fits = requests.post(f"{tei_mock.url}/embed", json={"inputs": ["a b"] * CAP}, timeout=5)
    assert fits.status_code == 200 and len(fits.json()) == CAP
    refused = requests.post(f"{tei_mock.url}/embed", json={"inputs": ["a b"] * (CAP + 1)}, timeout=5)
    assert refused.status_code == 422 and refused.json()["error_type"] == "Validation"
    too_many = requests.post(f"{tei_mock.url}/rerank", json={"query": "q", "texts": ["d"] * (CAP + 1)}, timeout=5)
    assert too_many.status_code == 422


@pytest.mark.parametrize(
    ("locustfile_class", "option"),
    [("TEIEmbedUser", "--batch-size"), ("TEIRerankUser", "--documents")],
)
def test_a_batch_tei_would_refuse_stops_the_run_before_any_request(tei_mock, tmp_path, locustfile_class, option):
    locustfile = tmp_path / "one.py"
    locustfile.write_text(f"from poolbench_locust import {locustfile_class}  # noqa: F401\n")
    tei_mock.reset()

    def argv(*args: str, run_time: str) -> list[str]:
        return locust_argv(locustfile, *args, headless=True, users=1, run_time=run_time, host=tei_mock.url)

    code, output, _ = run_and_find_leftovers(argv(option, str(CAP * 2), run_time="10s"), grace=0)
    assert code == 1, output[-2000:]
    line = next(line for line in output.splitlines() if f"{option}: {locustfile_class}" in line)
    assert f"up to {CAP * 2} inputs" in line and f"at most {CAP}" in line and "max_client_batch_size" in line
    assert tei_mock.stats()["requests"] == 0, "nothing was sent: not even the preflight request"

    code, output, _ = run_and_find_leftovers(argv(option, str(CAP), run_time="2s"), grace=0)
    assert code == 0, output[-2000:]
    assert tei_mock.stats()["requests"] > 0


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"<html>", "not JSON"),
        (b"[32]", "not a JSON object"),
        (b'{"max_client_batch_size": true}', "no max_client_batch_size"),
        (b'{"max_client_batch_size": 0}', "no max_client_batch_size"),
        (b'{"max_client_batch_size": 1e30}', "no max_client_batch_size"),
        (b'{"max_client_batch_size": "32"}', "no max_client_batch_size"),
        (b'{"max_client_batch_size": 99999999999999999999999}', "no max_client_batch_size"),
    ],
)
def test_a_garbled_info_answer_gives_no_limit(body, why):
    assert str(read_info(body)).startswith(why)
    assert read_info(orjson.dumps({"max_client_batch_size": 8, "x": [1] * 10})) == TeiLimits(8)


def test_a_hostile_info_route_is_bounded_and_checks_nothing():
    huge = serve_requests(lambda head, body, n: response(200, b"{" + b" " * (2 << 20) + b"}"))
    with HostileServer(huge) as server:
        assert tei_limits(server.url) == "answer larger than 1 MiB"
    missing = serve_requests(lambda head, body, n: response(404, b'{"error":"no"}'))
    with HostileServer(missing) as server:
        assert tei_limits(server.url) == "HTTP 404"


def test_info_gives_the_longest_input_tei_takes_and_whether_it_truncates():
    info = {"max_client_batch_size": 32, "max_batch_tokens": 16384, "auto_truncate": False}
    assert read_info(orjson.dumps(info)) == TeiLimits(32, 16384, False, "max_batch_tokens")
    info |= {"max_input_length": 512}
    assert read_info(orjson.dumps(info)) == TeiLimits(32, 512, False, "max_input_length")
    info |= {"max_input_length": -1, "max_batch_tokens": "x", "auto_truncate": "no"}
    assert read_info(orjson.dumps(info)) == TeiLimits(32)  # garbled fields: unknown, never guessed


LONG = str(TEI_MAX_INPUT_LENGTH + 600)


def test_an_input_tei_would_refuse_stops_the_run_before_any_request(tei_mock, tmp_path):
    locustfile = tmp_path / "one.py"
    locustfile.write_text("from poolbench_locust import TEIEmbedUser  # noqa: F401\n")
    tei_mock.reset()
    # The mock's TEI truncates on its own (auto_truncate true): only a run that asks it not to is refused.
    argv = locust_argv(
        locustfile,
        *("--input-len", LONG, "--batch-size", "1", "--truncate", "none"),
        headless=True,
        users=1,
        run_time="10s",
        host=tei_mock.url,
    )
    code, output, _ = run_and_find_leftovers(argv, grace=0)
    assert code == 1, output[-2000:]
    line = next(line for line in output.splitlines() if "--truncate: TEIEmbedUser" in line)
    assert "the client's estimate" in line and f"above {TEI_MAX_INPUT_LENGTH} tokens" in line, line
    assert "max_input_length" in line and "--truncate none" in line
    assert tei_mock.stats()["requests"] == 0, "nothing was sent: not even the preflight request"


def _length_warnings(output: str) -> list[str]:
    return [line for line in output.splitlines() if "max_model_len" in line]


def test_an_input_above_vllms_max_model_len_gives_one_warning_naming_truncate(mock_server, tmp_path):
    locustfile = tmp_path / "one.py"
    locustfile.write_text("from poolbench_locust import EmbeddingsUser  # noqa: F401\n")
    long = ("--input-len", str(MAX_MODEL_LEN + 500), "--batch-size", "1")

    def argv(*args: str) -> list[str]:
        return locust_argv(locustfile, *long, *args, headless=True, users=1, run_time="2s", host=mock_server.url)

    code, output, _ = run_and_find_leftovers(argv(), grace=0)
    assert code in (0, 1), output[-2000:]  # the mock answers; whether it refuses is not this test's
    (line,) = _length_warnings(output)
    assert "WARNING" in line and "--truncate: EmbeddingsUser" in line and f"max_model_len {MAX_MODEL_LEN}" in line
    assert "the client's estimate" in line and "--truncate end" in line
    code, output, _ = run_and_find_leftovers(argv("--truncate", "end"), grace=0)
    assert _length_warnings(output) == [], output[-2000:]


def test_a_server_without_a_models_route_or_length_gives_no_limit_and_no_word():
    assert read_models(b'{"data":[{"id":"m","max_model_len":512},{"id":"n","max_model_len":256}]}', "n") == 256
    assert read_models(b'{"data":[{"id":"m","max_model_len":512}]}', None) == 512
    for garbled in (b"<html>", b"[]", b'{"data":{}}', b'{"data":[{"max_model_len":true}]}', b'{"data":[1]}'):
        assert read_models(garbled, None) is None
    missing = serve_requests(lambda head, body, n: response(404, b'{"error":"no"}'))
    with HostileServer(missing) as server:
        assert max_model_len(server.url, None, None) is None
