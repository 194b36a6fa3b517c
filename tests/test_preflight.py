"""Fail fast: one request per User class before the users start; a 4xx stops the run with the server's words."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from devsupport.ports import free_port
from tests.support import zygote
from tests.support.locust_run import PREFLIGHT_ON, ROOT, csv_rows, locust_argv, run_locust
from tests.support.process_servers import served


def test_a_wrong_route_stops_the_run_at_once_with_the_servers_message(mock_server):
    result = run_locust(
        "locustfiles/embeddings.py",
        "--endpoint-path",
        "/v1/embedz",
        users=2,
        run_time="2s",
        host=mock_server.url,
        env=PREFLIGHT_ON,
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert (
        "preflight: EmbeddingsUser (POST /v1/embedz) failed: HTTP 404: Not Found: /v1/embedz "
        "(the run stops; --no-preflight skips this check)" in result.stderr
    )
    assert "Traceback" not in result.stderr
    assert "All users spawned" not in result.stderr


def test_no_preflight_sends_the_run_as_before(mock_server, tmp_path):
    result = run_locust(
        "locustfiles/embeddings.py",
        *("--endpoint-path", "/v1/embedz", "--no-preflight"),
        users=2,
        requests=20,
        host=mock_server.url,
        csv=tmp_path / "r",
        env=PREFLIGHT_ON,
    )
    assert "preflight" not in result.stderr
    row = csv_rows(tmp_path / "r_stats.csv")["Aggregated"]
    assert int(row["Failure Count"]) == int(row["Request Count"]) > 2


def test_an_encoding_the_server_rejects_422_stops_the_run():
    with served("answer_422") as url:
        result = run_locust(
            "locustfiles/embeddings.py",
            "--encoding-format",
            "base64",
            users=2,
            run_time="2s",
            host=url,
            env=PREFLIGHT_ON,
        )
    assert result.returncode == 1, result.stderr[-2000:]
    assert "preflight: EmbeddingsUser (POST /v1/embeddings) failed: HTTP 422: " in result.stderr
    assert "Input should be 'float'" in result.stderr


def test_a_huge_error_message_is_cut_in_the_line_that_stops_the_run():
    with served("answer_huge_400") as url:
        result = run_locust("locustfiles/embeddings.py", users=2, run_time="2s", host=url, env=PREFLIGHT_ON)
    assert result.returncode == 1
    line = next(line for line in result.stderr.splitlines() if "preflight:" in line)
    assert "HTTP 400: xxx" in line and len(line) < 1000


def test_a_server_error_is_logged_and_the_run_goes_on(mock_server_factory, tmp_path):
    mock = mock_server_factory("--fault", "status-503=1")
    result = run_locust(
        "locustfiles/embeddings.py", users=2, requests=20, host=mock.url, csv=tmp_path / "r", env=PREFLIGHT_ON
    )
    assert re.search(
        r"WARNING/poolbench_locust: preflight: EmbeddingsUser .*HTTP 503: .*the run goes on", result.stderr
    )
    assert int(csv_rows(tmp_path / "r_stats.csv")["Aggregated"]["Request Count"]) > 2


def test_distributed_the_master_sends_it_once(mock_server, tmp_path):
    prefix, port = tmp_path / "dist", str(free_port())
    # --processes forks workers that connect to --master-port: both set, away from Locust's 5557
    ports = ("--master-bind-port", port, "--master-port", port)
    result = run_locust(
        "locustfiles/embeddings.py",
        "--processes",
        "2",
        *ports,
        "--stop-timeout",
        "5",
        users=2,
        run_time="2s",
        host=mock_server.url,
        csv=prefix,
        env=PREFLIGHT_ON,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    counted = int(csv_rows(Path(f"{prefix}_stats.csv"))["Aggregated"]["Request Count"])
    assert mock_server.stats()["requests"] == counted + 1


def test_a_web_ui_run_is_checked_when_its_form_starts_it(mock_server, tmp_path):
    """The form may bring another host: the preflight waits for it, and a 4xx stops that run."""
    # Imported here: `python -m tests.support.hostile` imports this module for its handlers, before Locust's
    # gevent patching, and requests must not import ssl before it.
    import requests

    port = free_port()
    log = (tmp_path / "locust.log").open("w+")
    proc = zygote.popen(
        locust_argv(
            "locustfiles/embeddings.py",
            "--endpoint-path",
            "/v1/embedz",
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(port),
        ),
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **PREFLIGHT_ON},
    )
    try:
        base, deadline, state = f"http://127.0.0.1:{port}", time.monotonic() + 30, None
        while time.monotonic() < deadline:
            try:
                requests.post(f"{base}/swarm", data={"user_count": 1, "spawn_rate": 1, "host": mock_server.url},
                              timeout=10)  # fmt: skip
                break
            except (requests.ConnectionError, requests.Timeout):
                time.sleep(0.3)
        while time.monotonic() < deadline:
            time.sleep(0.5)
            stats = requests.get(f"{base}/stats/requests", timeout=10).json()
            if (state := stats["state"]) == "stopped":
                break
        assert state == "stopped"
        # The form's run is stopped from test_start, as start_checks.py's own check does: the users spawned in that
        # moment may send requests before the stop (about 30 in one run on this machine).
        log.seek(0)
        assert "preflight: EmbeddingsUser (POST /v1/embedz) failed: HTTP 404: Not Found: /v1/embedz" in log.read()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
