"""--server-metrics' prefix-cache hit rate (vLLM's vllm:prefix_cache_hits_total over vllm:prefix_cache_queries_total,
over the run) beside the client's --repeat-ratio, hostile pages too, and the mock's two counters.

Pages are parsed in-process (servermetrics/parse.py) and the mock's page written by its Metrics; one run of Locust
against the mock shows the figures in PREFIX_server_metrics.csv."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from poolbench_locust.mockserver import vllm
from poolbench_locust.mockserver.metrics import Metrics, PrefixCache
from poolbench_locust.servermetrics.deltas import ServerView
from poolbench_locust.servermetrics.parse import reading
from poolbench_locust.servermetrics.report import CLIENT_REPEAT, HEADER, console_lines, server_rows
from tests.support.hostile_metrics import vllm_text
from tests.support.locust_run import run_locust

ROUTES = frozenset({"/v1/embeddings"})
HIT = "Prefix Cache Hit %"


def counters(queries: float | str, hits: float | str, prefix: str = "vllm:prefix_cache_") -> str:
    labels = 'engine="0",model_name="m"'
    return (
        f"# TYPE {prefix}queries_total counter\n{prefix}queries_total{{{labels}}} {queries}\n"
        f"# TYPE {prefix}hits_total counter\n{prefix}hits_total{{{labels}}} {hits}\n"
    )


def cache_text(queries: float | str, hits: float | str) -> str:
    return vllm_text(0, extra=counters(queries, hits))


def view_of(*pages: str) -> ServerView:
    view = ServerView("http://vllm:8000/metrics")
    for at, page in enumerate(pages):
        view.observe(reading(page, ROUTES), float(at))
    return view


def test_the_hit_rate_is_the_runs_hits_over_its_queries_beside_the_clients_repeat_share():
    view = view_of(cache_text(1000, 100), cache_text(1200, 180), cache_text(1400, 300))
    (row,) = server_rows([view], repeat_ratio=0.25)
    assert row[HIT] == 50.0  # (300 - 100) / (1400 - 1000), not the server's 300 / 1400 since its start
    assert row[CLIENT_REPEAT] == 25.0
    assert HIT in HEADER and HEADER.index(CLIENT_REPEAT) == HEADER.index(HIT) + 1
    lines = console_lines(server_rows([view], repeat_ratio=0.25), [])
    assert HIT in lines[1] and CLIENT_REPEAT in lines[1] and "50.0" in lines[2] and "25.0" in lines[2]


def test_the_counters_older_names_are_read_where_the_current_ones_are_absent():
    def older(queries: float, hits: float) -> str:
        return counters(queries, hits, prefix="vllm:gpu_prefix_cache_")

    assert (
        server_rows([view_of(vllm_text(0, extra=older(100, 10)), vllm_text(0, extra=older(300, 110)))])[0][HIT] == 50.0
    )
    # a release that writes both names is read once, under the current one
    view = view_of(*(vllm_text(0, extra=counters(q, h) + older(3 * q, h)) for q, h in ((0, 0), (10, 4))))
    assert view.counters["prefix_cache_queries"] == 10 and server_rows([view])[0][HIT] == 40.0


def test_a_server_that_exports_no_such_counters_has_an_empty_figure_not_a_zero():
    (row,) = server_rows([view_of(vllm_text(10), vllm_text(50))], repeat_ratio=0.5)
    assert row[HIT] is None and row[CLIENT_REPEAT] is None
    assert HIT not in console_lines(server_rows([view_of(vllm_text(10), vllm_text(50))]), [])[1]
    # nothing looked up during the run (a model without prefix caching): no rate either
    (row,) = server_rows([view_of(cache_text(0, 0), cache_text(0, 0))])
    assert row[HIT] is None


def test_hostile_counters_never_make_a_rate_outside_0_to_100():
    # NaN, negative and infinite values are left out (and counted): the good scrapes give the rate
    view = view_of(cache_text(100, 0), cache_text("NaN", 50), cache_text(200, "-4"), cache_text(300, "+Inf"))
    view.observe(reading(cache_text(500, 100), ROUTES), 9.0)
    (row,) = server_rows([view])
    assert row[HIT] == 25.0 and view.rejected == 3
    # a counter that decreased was restarted: it counts from zero again (Prometheus's increase())
    view = view_of(cache_text(1000, 400), cache_text(1100, 450), cache_text(100, 20))
    assert view.counters["prefix_cache_queries"] == 100 + 100 and view.counters["prefix_cache_hits"] == 50 + 20
    assert server_rows([view])[0][HIT] == 35.0 and view.resets == 2
    # more hits than lookups is no share: empty
    (row,) = server_rows([view_of(cache_text(100, 0), cache_text(150, 90))])
    assert row[HIT] is None


def _served(metrics: Metrics, prompts: tuple[tuple[object, int], ...], served: bool = True) -> None:
    tokens = sum(n for _, n in prompts)
    number = metrics.began(0.0, 0.0, len(prompts))
    metrics.ended(number, "/v1/embeddings", 200, 0.0, 0.001, served, len(prompts), tokens, 0.0, prompts)


def test_the_mocks_vllm_page_counts_the_tokens_of_prompts_it_served_before():
    metrics = Metrics("m", vllm.METRICS)
    first = metrics.text().decode()
    assert "vllm:prefix_cache_queries_total" in first and "vllm:prefix_cache_hits_total" in first
    _served(metrics, (("a b c", 3), ("d e", 2)))
    _served(metrics, (("a b c", 3), ("f", 1)))  # one repeat: 3 of its 4 tokens
    _served(metrics, (("d e", 2),), served=False)  # a failed request counts nowhere
    _served(metrics, ((("q", "d"), 2), (("q", "d"), 2)))  # the same pair twice in one request: its second is a hit
    view = view_of(first, metrics.text().decode())
    assert view.counters["prefix_cache_queries"] == 5 + 4 + 4
    assert view.counters["prefix_cache_hits"] == 3 + 2
    assert server_rows([view])[0][HIT] == pytest.approx(round(100 * 5 / 13, 1))


def test_the_mocks_prefix_cache_is_bounded_and_forgets_the_least_recently_used():
    cache = PrefixCache(size=2)
    assert cache.hits((("a", 1), ("b", 1))) == 0
    assert cache.hits((("a", 1),)) == 1  # "a" now the most recent
    assert cache.hits((("c", 1),)) == 0  # "b" forgotten
    assert cache.hits((("c", 5), ("a", 7))) == 12
    assert cache.hits((("b", 1),)) == 0


def test_against_the_mock_the_hit_rate_shows_beside_the_repeat_share(mock_server_factory, tmp_path):
    mock = mock_server_factory("--ttfb-ms", "5")
    prefix = tmp_path / "p"
    # one user, 2 s at 10 requests/s: fewer requests than the pool's 32, each sent once; the hits are the repeats'
    # (those whose first was sent in the window), not the pool's cycle's
    shape = ("--input-len", "6", "--batch-size", "3", "--repeat-ratio", "0.5", "--request-rate", "10")
    scraped = ("--stop-timeout", "5", "--server-metrics-interval", "0.5")
    result = run_locust(
        "locustfiles/embeddings.py", *shape, *scraped, host=mock.url, users=1, run_time="2s", csv=prefix
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (server,) = csv.DictReader(Path(f"{prefix}_server_metrics.csv").read_text().splitlines())
    assert server["Kind"] == "vllm" and server[CLIENT_REPEAT] == "50.0"
    assert 0 < float(server[HIT]) < 60, server[HIT]
    assert HIT in result.stderr  # the console's server table has it too
