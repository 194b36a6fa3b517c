"""The web UI as users drive it, through its HTTP API: a new run starts every pooling figure from
zero (issue 17: after STOP and START the Pooling tab kept 884 requests beside Locust's 440), and a
bad value typed into the form is refused in the form itself, logged once, with no traceback."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.support.webui import WebUI

USERS = 2
RUN_S = 3.0


@pytest.fixture
def web_ui(request, mock_server) -> Iterator[WebUI]:
    ui = WebUI("locustfiles/embeddings.py", "--host", mock_server.url, *getattr(request, "param", []))
    yield ui
    ui.close()


def one_run(ui: WebUI, host: str) -> tuple[dict, dict]:
    """Locust's and the pooling Aggregated rows of one run, once both hold every report."""
    answer = ui.swarm(user_count=USERS, spawn_rate=USERS, host=host)
    assert answer["success"], answer
    time.sleep(RUN_S)
    ui.stop()
    # A master's own stats take the workers' last reports up to a report interval after STOP, where
    # the pooling stats wait for them (metrics.pooling_reports): give Locust's that time.
    deadline = time.monotonic() + 6
    while (locust_total := ui.locust_total())["num_requests"] != (pooling := ui.pooling_total())["Request Count"]:
        if time.monotonic() > deadline:
            break
        time.sleep(0.25)
    return locust_total, pooling


@pytest.mark.parametrize("web_ui", [[], ["--processes", "2"]], ids=["one process", "2 workers"], indirect=True)
def test_a_new_run_starts_every_pooling_figure_from_zero(web_ui: WebUI, mock_server) -> None:
    if web_ui.proc.args[-1] == "2":
        deadline = time.monotonic() + 20
        while len(web_ui.requests_json().get("workers") or []) < 2:
            assert time.monotonic() < deadline, "the workers never connected"
            time.sleep(0.2)
    locust_total, pooling = one_run(web_ui, mock_server.url)
    assert pooling["Request Count"] == locust_total["num_requests"] > 0
    mock_server.reset()
    locust_total, pooling = one_run(web_ui, mock_server.url)
    served = mock_server.stats()
    counted = locust_total["num_requests"]
    assert pooling["Request Count"] == counted > 0
    # The hand count: what the mock served in the second run, less the requests STOP cut off in flight
    # (one a user), and those the first STOP cut off, which the mock may finish after its reset.
    cut_off = 2 * USERS
    assert 0 <= served["requests"] - counted <= cut_off, (served["requests"], counted)
    assert 0 <= served["prompt_tokens"] - pooling["Input Tokens"] <= cut_off * served["prompt_tokens"] / counted + 1
    # Rates over the second run's time, as Locust's: tokens/s over tokens is requests/s over requests.
    assert pooling["Input Tokens/s"] / pooling["Input Tokens"] == pytest.approx(
        locust_total["total_rps"] / counted, rel=0.1
    )


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("batch_size", "0", "--batch-size: must be a whole number >= 1, got 0"),
        ("batch_size", "abc", "--batch-size: must be a whole number >= 1, got 'abc'"),
        ("warmup", "soon", "--warmup: must be a number >= 0, got 'soon'"),
        # issue 21: these three were answered "success": true, and the bad value stuck
        (
            "slo",
            "bogus",
            "--slo: must be KEY=MS pairs separated by commas, KEY one of e2e_ms, ttfb_ms, transfer_ms (or the answers' "
            "cosine=X in (-1, 1], top1_changed=R in [0, 1]); got 'bogus'",
        ),
        (
            "server_metrics",
            "ftp://x y",
            "--server-metrics: must be auto, off, or http(s):// URLs separated by commas, got 'ftp://x y'",
        ),
        ("ca_bundle", "/no/such/ca.pem", "--ca-bundle: no such file: /no/such/ca.pem"),
        ("encoding_format", "bytes_only", None),  # a good value: the run starts
    ],
)
def test_a_bad_value_in_the_form_is_shown_in_the_form_and_logged_once(
    web_ui: WebUI, mock_server, field: str, value: str, message: str | None
) -> None:
    answer = web_ui.swarm(user_count=USERS, spawn_rate=USERS, host=mock_server.url, **{field: value})
    if message is None:
        assert answer["success"], answer
        web_ui.wait_for("running")
        web_ui.stop()
        return
    assert answer == {"success": False, "message": message, "host": mock_server.url}
    time.sleep(0.5)
    assert web_ui.requests_json()["state"] == "ready", "the run never started"
    assert mock_server.stats()["requests"] == 0
    log = web_ui.log()
    assert log.count(message) == 1, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    # nothing stuck: the form's next start, without the bad value, starts
    answer = web_ui.swarm(user_count=USERS, spawn_rate=USERS, host=mock_server.url)
    assert answer["success"], answer
    web_ui.wait_for("running")
    web_ui.stop()
    assert web_ui.log().count(message) == 1
