"""The console's own tables fit --console-width (120 by default) in a run with every feature on, and
--console-width 0 prints them whole (docs/getting-started.md, "What a run prints")."""

from __future__ import annotations

from poolbench_locust.metrics.collector import PoolingStats
from poolbench_locust.metrics.console import console_table
from poolbench_locust.options.parsers import slo
from poolbench_locust.texttable import fitted, wrapped
from tests.support.locust_run import CONSISTENCY_ON, run_locust

WIDTH = 120
OURS = ("Answer consistency", "Pooling statistics")
"""The first of the plugin's tables in a run's output: what follows is ours but Locust's log records."""
WHOLE = ("Capacity: ", "Capacity over ")
"""The capacity's answer: one line, however long, as the log and the JSON result give it (read whole)."""


def table_lines(stderr: str) -> list[str]:
    """The lines of the plugin's console tables: from its first table on, without log records and the
    capacity's answer."""
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(OURS))
    return [line for line in lines[start:] if not line.startswith(("[20", *WHOLE))]


def widest(stderr: str) -> int:
    return max(len(line) for line in table_lines(stderr))


def test_every_table_of_a_capacity_search_with_every_feature_fits_120_columns(mock_server_factory, tmp_path):
    """Two classes (rerank's consistency columns beside embeddings'), client and server tokens, --slo's goodput,
    the open loop's client table, the server's metrics and its reconciliation, the capacity's probes with the
    answers' columns."""
    mock = mock_server_factory("--ttfb-ms", "5")
    done = run_locust(
        "locustfiles/demo.py",
        "--find-capacity",
        "--slo",
        "e2e_ms=100",
        "--capacity-start-rate",
        "40",
        "--sweep-step-time",
        "1",
        "--count-tokens-with-server",
        users=16,
        run_time="10s",
        host=mock.url,
        env=CONSISTENCY_ON,
        timeout=90,
    )
    assert done.returncode in (0, 3), done.stderr[-3000:]
    shown = "\n".join(table_lines(done.stderr))
    for title in ("Answer consistency", "Pooling statistics", "Goodput", "Client load (open loop", "Capacity search"):
        assert title in shown, title
    for column in ("Client Tokens", "Token Gap %", "Goodput Requests/s", "Lateness 99%", "Cos Min", "Queue Mean"):
        assert column in shown, column
    assert "Server against client" in shown
    assert widest(done.stderr) <= WIDTH, "\n".join(line for line in table_lines(done.stderr) if len(line) > WIDTH)


def test_an_open_loop_with_repeats_fits_and_width_0_prints_the_tables_whole(mock_server_factory):
    mock = mock_server_factory("--ttfb-ms", "5")
    args = ("--request-rate", "60", "--repeat", "2", "--slo", "e2e_ms=100", "--count-tokens-with-server")
    fitted_run = run_locust("locustfiles/demo.py", *args, users=8, run_time="4s", host=mock.url)
    assert fitted_run.returncode == 0, fitted_run.stderr[-3000:]
    assert "Repeats" in fitted_run.stderr and "Client load (open loop" in fitted_run.stderr
    assert widest(fitted_run.stderr) <= WIDTH
    whole = run_locust("locustfiles/demo.py", *args, "--console-width", "0", users=8, run_time="4s", host=mock.url)
    assert whole.returncode == 0, whole.stderr[-3000:]
    header = next(line for line in whole.stderr.splitlines() if line.startswith("Name ") and "Goodput" in line)
    assert "Request Count" in header and "E2E 95%" in header and "Client Tokens" in header  # one table
    assert widest(whole.stderr) > WIDTH


def test_a_wide_table_is_split_repeating_its_first_column_and_empty_columns_go():
    rows = [
        ["Name", "Empty", *(f"Column {i}" for i in range(12))],
        ["/" + "x" * 80, "", *("1,234.5" for _ in range(12))],
    ]
    tables = fitted(rows, 60)
    assert len(tables) > 1 and all(max(len(line) for line in t) <= 60 for t in tables)
    assert all(t[0].startswith("Name") and "Empty" not in t[0] for t in tables)
    assert tables[0][1].startswith("/xxxxxxxxxxxxxxxxx...") and len(tables[0][1].split("  ")[0]) == 40
    assert [len(t) for t in fitted(rows, 0)] == [2] and "Empty" in fitted(rows, 0)[0][0]
    assert all(len(line) <= 30 for line in wrapped("a title of many words that is much longer than thirty", 30))


def test_the_pooling_summary_is_throughput_latency_tokens_and_goodput_within_the_width():
    stats = PoolingStats()
    stats.slo = slo("e2e_ms=100")
    context = {"sequences": 2, "input_tokens": 10, "token_source": "server", "ttfb_ms": 2.0}
    context |= {"client_tokens": 9, "client_token_source": "client-estimate"}
    for _ in range(3):
        stats.on_request(name="/v1/embeddings", response_time=5.0, response_length=100, exception=None, context=context)
    lines = console_table(stats, WIDTH)
    headers = [line for line in lines if line.startswith("Name")]
    assert headers[0].split()[1:3] == ["Request", "Count"] and "TTFB 50%" in headers[1]
    assert "Client Tokens" in headers[2] and "Goodput Requests/s" in headers[3]
    assert max(len(line) for line in lines) <= WIDTH
    whole = console_table(stats, 0)
    assert len([line for line in whole if line.startswith("Name")]) == 1


def test_an_ab_run_with_a_price_fits_120_columns(mock_server_factory):
    """The A/B comparison (its title and verdicts wrapped, its table fitted) and the price lines, beside the
    two hosts' rows in every other table."""
    a, b = mock_server_factory("--ttfb-ms", "5"), mock_server_factory("--ttfb-ms", "8")
    args = ("--ab-host", b.url, "--gpu-hour-cost", "2.5", "--count-tokens-with-server", "--slo", "e2e_ms=100")
    done = run_locust("locustfiles/embeddings.py", *args, users=4, run_time="12s", host=a.url, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "A/B: B " in done.stderr and "B - A" in done.stderr
    assert widest(done.stderr) <= WIDTH, "\n".join(line for line in table_lines(done.stderr) if len(line) > WIDTH)
