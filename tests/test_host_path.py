"""A --host with a path: the path requested is the host's path and then the route, joined once, and
every message that names a request names that path (issue 26: `--host http://HOST/v1` sent
/v1/v1/embeddings while the preflight named /v1/embeddings). A host whose path doubles the route's
first segment stops at start, before any request, saying which --host to write."""

from __future__ import annotations

import csv

import pytest
from locust.env import Environment

from poolbench_locust import EmbeddingsUser, RerankUser
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.options import OptionError
from tests.support.harness import options
from tests.support.locust_run import PREFLIGHT_ON, run_locust


def test_a_host_ending_in_the_routes_first_segment_stops_at_start_before_any_request(mock_server):
    result = run_locust(
        "locustfiles/embeddings.py", users=2, run_time="2s", host=f"{mock_server.url}/v1", env=PREFLIGHT_ON
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert (
        f"--host: {mock_server.url}/v1 ends with /v1 and the route /v1/embeddings begins with it: requests would go "
        f"to /v1/v1/embeddings. Write --host {mock_server.url} (the route is added to it; an OpenAI SDK's base URL "
        "ends in /v1, --host does not)"
    ) in result.stderr
    assert "Traceback" not in result.stderr
    assert mock_server.stats()["requests"] == 0, "nothing was sent"


@pytest.mark.parametrize(
    ("user_class", "host", "endpoint_path"),
    [
        (EmbeddingsUser, "http://127.0.0.1:9/gateway/v1/", None),
        (RerankUser, "http://user:pw-secret@127.0.0.1:9/rerank", None),
        (EmbeddingsUser, "http://127.0.0.1:9/v2", "/v2/embed"),
    ],
)
def test_the_doubled_segment_is_refused_wherever_the_options_are_checked(user_class, host, endpoint_path):
    args = ("--endpoint-path", endpoint_path) if endpoint_path else ()
    with pytest.raises(OptionError, match=r"^--host: .* ends with /") as refused:
        plan_for(user_class, options(*args), host)
    assert "pw-secret" not in str(refused.value)


@pytest.mark.parametrize(
    ("suffix", "requested"), [("/gateway", "/gateway/v1/embeddings"), ("/", "/v1/embeddings"), ("", "/v1/embeddings")]
)
def test_the_path_requested_is_the_hosts_path_and_the_route(suffix, requested):
    plan = plan_for(EmbeddingsUser, options(), f"http://127.0.0.1:9{suffix}")
    assert (plan.path, plan.label, plan.route) == (requested, requested, "/v1/embeddings")


def test_the_preflight_names_the_path_it_requested(mock_server):
    result = run_locust(
        "locustfiles/embeddings.py", users=2, run_time="2s", host=f"{mock_server.url}/gateway", env=PREFLIGHT_ON
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert (
        "preflight: EmbeddingsUser (POST /gateway/v1/embeddings) failed: HTTP 404: Not Found: /gateway/v1/embeddings"
    ) in result.stderr


@pytest.mark.parametrize(("suffix", "failed"), [("/gateway", True), ("/", False)])
def test_the_stats_and_failures_name_the_path_requested(mock_server, tmp_path, suffix, failed):
    prefix = tmp_path / "run"
    result = run_locust(
        "locustfiles/embeddings.py", users=2, requests=20, host=f"{mock_server.url}{suffix}", csv=prefix
    )
    assert result.returncode == (1 if failed else 0), result.stderr[-2000:]
    path = f"{suffix.rstrip('/')}/v1/embeddings"
    with open(f"{prefix}_stats.csv") as f:
        names = [row["Name"] for row in csv.DictReader(f)]
    assert names == [path, "Aggregated"]
    with open(f"{prefix}_failures.csv") as f:
        failures = [(row["Name"], row["Error"]) for row in csv.DictReader(f)]
    assert failures == ([(path, f"CatchResponseError('HTTP 404: Not Found: {path}')")] if failed else [])
    with open(f"{prefix}_pooling.csv") as f:
        assert [row["Name"] for row in csv.DictReader(f)] == [path, "Aggregated"]


def test_the_web_uis_form_refuses_the_doubled_segment(monkeypatch):
    from poolbench_locust.webform.validation import form_error

    env = Environment(user_classes=[EmbeddingsUser], parsed_options=options(), host="http://127.0.0.1:9")
    monkeypatch.setattr(EmbeddingsUser, "host", "http://127.0.0.1:9")  # Locust set it at the run before
    error = form_error(env, {"user_count": "1", "spawn_rate": "1", "host": "http://127.0.0.1:9/v1"})
    assert error is not None and error.startswith("--host: http://127.0.0.1:9/v1 ends with /v1"), error
