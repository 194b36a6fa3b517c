"""The server's own limits, learned before the run (poolbench_locust/serverlimits/): TEI refuses a batch
above its max_client_batch_size (32 by default) with 422 on every request, and its GET /info says so.
A run whose batches are larger stops at start with one line naming both numbers, having sent nothing."""

from __future__ import annotations

import orjson
import pytest
import requests

from poolbench_locust.mockserver.routes import TEI_MAX_CLIENT_BATCH_SIZE
from poolbench_locust.serverlimits.tei_info import TeiLimits, read_info, tei_limits
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
