"""--server-metrics with --ab-host: each host's metrics read from its own URLs (A=URL, B=URL, or a URL on the
host's own server), shown marked [A] and [B] and reconciled with that host's requests; a URL whose host cannot be
told stops the run at start naming the option."""

from __future__ import annotations

import argparse

import pytest

from poolbench_locust.options import ALL_OPTIONS, OptionError, Settings
from poolbench_locust.servermetrics.hosts import targets
from tests.support.hostile import server_process
from tests.support.locust_run import LOAD, run_locust

A, B = "http://a:8000", "http://b:8001/v1"


def _options(**given: object) -> argparse.Namespace:
    values = {opt.dest: opt.default for opt in ALL_OPTIONS}
    return argparse.Namespace(**(values | given))


def test_each_url_is_told_its_host():
    assert targets("auto", A, B) == [(f"{A}/metrics", "A"), (f"{B}/metrics", "B")]
    assert targets("auto", A, None) == [(f"{A}/metrics", None)]
    assert targets("off", A, B) == []
    # on a host's own server (scheme, host and port; its path is not the server's), or said
    given = "http://a:8000/metrics, http://b:8001/metrics,B=http://gpu:9400/metrics,A=http://gpu:9401/metrics"
    assert targets(given, A, B) == [
        ("http://a:8000/metrics", "A"),
        ("http://b:8001/metrics", "B"),
        ("http://gpu:9400/metrics", "B"),
        ("http://gpu:9401/metrics", "A"),
    ]
    assert targets("http://x:1/metrics,http://y:2/metrics", A, None) == [
        ("http://x:1/metrics", None),
        ("http://y:2/metrics", None),
    ]


@pytest.mark.parametrize(
    ("given", "a", "b", "says"),
    [
        ("http://gpu:9400/metrics", A, B, "on neither --host's server nor --ab-host's"),
        ("http://a:8000/metrics", A, "http://a:8000/other", "on both --host's server and --ab-host's"),
    ],
    ids=["of neither host", "of both hosts"],
)
def test_a_url_whose_host_cannot_be_told_names_the_option(given, a, b, says):
    with pytest.raises(OptionError) as refused:
        targets(given, a, b)
    assert refused.value.option == "--server-metrics" and says in str(refused.value)
    assert f"A={given} or B={given}" in str(refused.value)


def test_labels_without_ab_host_and_bad_urls_are_refused():
    with pytest.raises(OptionError) as refused:
        Settings.from_options(_options(server_metrics="A=http://a:8000/metrics"))
    assert refused.value.option == "--server-metrics" and "give --ab-host" in str(refused.value)
    with pytest.raises(OptionError) as refused:
        Settings.from_options(_options(server_metrics="B=ftp://a/metrics", ab_host="http://b:1"))
    assert refused.value.option == "--server-metrics"
    assert Settings.from_options(_options(server_metrics=f"A={A}/metrics,B=http://g/m", ab_host=B)).ab_host == B


def _checks(doc) -> dict[str, dict]:
    return {row["Check"]: row for row in doc["server_metrics"]["reconciliation"]}


def test_each_hosts_metrics_are_reconciled_with_its_own_requests(mock_server_factory, tmp_path):
    a, b = mock_server_factory(), mock_server_factory("--ttfb-ms", "3")
    with server_process("tests.support.dcgm_page:two_gpus") as dcgm:
        result = run_locust(
            "locustfiles/embeddings.py",
            *LOAD,
            *("--ab-host", b.url, "--server-metrics-interval", "1", "--stop-timeout", "5"),
            *("--server-metrics", f"{a.url}/metrics,{b.url}/metrics,B={dcgm}/metrics"),
            host=a.url,
            users=2,
            run_time="4s",
            csv=tmp_path / "r",
            json_result=tmp_path / "r.json",
            timeout=90,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    doc = result.json()
    stats = result.csv()
    servers = {row["Server"]: row for row in doc["server_metrics"]["servers"]}
    assert set(servers) >= {f"{a.url}/metrics [A]", f"{b.url}/metrics [B]", f"{dcgm}/metrics [B]"}, set(servers)
    checks = _checks(doc)
    for side, mock in (("A", a), ("B", b)):
        ok = int(stats[f"/v1/embeddings [{side}]"]["Request Count"]) - int(
            stats[f"/v1/embeddings [{side}]"]["Failure Count"]
        )
        served = mock.stats()["requests"]
        assert servers[f"{mock.url}/metrics [{side}]"]["Requests"] == served == ok
        row = checks[f"Requests [{side}]"]
        assert row["Server"] == served and row["Client"] == ok and row["Gap"] == 0 and not row["Flagged"], row
        assert not checks[f"Prompt Tokens [{side}]"]["Flagged"], checks
    assert "Requests" not in checks  # no check of the two hosts together
    # B's GPUs' energy is per million of B's input tokens
    (block,) = doc["server_metrics"]["gpus"]
    b_tokens = next(r for r in doc["requests"] if r["name"] == "/v1/embeddings [B]")["pooling"]["Input Tokens"]
    assert block["server"] == f"{dcgm}/metrics [B]"
    assert block["energy_j_per_1m_input_tokens"] == pytest.approx(block["energy_j"] * 1e6 / b_tokens, rel=1e-3)
    assert "Requests [A]" in (tmp_path / "r_server_reconciliation.csv").read_text()
    assert f"{b.url}/metrics [B]" in result.stderr  # the console's table


def test_auto_reads_each_hosts_own_metrics(mock_server_factory, tmp_path):
    a, b = mock_server_factory(), mock_server_factory()
    result = run_locust(
        "locustfiles/embeddings.py",
        *LOAD,
        *("--ab-host", b.url, "--stop-timeout", "5"),  # the requests in flight at the end answered and counted
        host=a.url,
        users=2,
        requests=60,
        json_result=tmp_path / "r.json",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    checks = _checks(result.json())
    assert checks["Requests [A]"]["Server"] == a.stats()["requests"] == checks["Requests [A]"]["Client"]
    assert checks["Requests [B]"]["Server"] == b.stats()["requests"] == checks["Requests [B]"]["Client"]


def test_a_url_of_neither_host_stops_the_run_at_start(mock_server_factory, tmp_path):
    a, b = mock_server_factory(), mock_server_factory()
    other = "http://127.0.0.1:9/metrics"
    result = run_locust(
        "locustfiles/embeddings.py",
        *LOAD,
        *("--ab-host", b.url, "--server-metrics", other),
        host=a.url,
        users=1,
        requests=5,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-2000:]
    assert f"--server-metrics: {other} is on neither --host's server nor --ab-host's" in output, output[-2000:]
    assert a.stats()["requests"] == b.stats()["requests"] == 0
