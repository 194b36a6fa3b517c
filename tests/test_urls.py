"""One way to show a URL (poolbench_locust/urls.py): nothing secret in it reaches a message, a log, the
JSON result or a Prometheus label."""

from __future__ import annotations

import pytest

from poolbench_locust.urls import shown_url

SECRET = "s3cr3t-pass"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("https://user:" + SECRET + "@example.test/v1", "https://***@example.test/v1"),
        ("http://" + SECRET + "@127.0.0.1:9/x", "http://***@127.0.0.1:9/x"),
        ("http://h:1/metrics?api_key=" + SECRET + "#" + SECRET, "http://h:1/metrics"),
        ("http://a@b:" + SECRET + "@h/", "http://***@h/"),  # the last @ ends the user info
        ("not a url " + SECRET, "not a url " + SECRET),  # nothing to hide in text that is no URL
    ],
)
def test_a_url_is_shown_without_its_secrets(url, shown):
    assert shown_url(url) == shown


def test_every_place_that_shows_a_url_uses_it(tmp_path):
    from poolbench_locust.host_probe import host_error
    from poolbench_locust.options import OptionError
    from poolbench_locust.options.parsers import metrics_targets

    said = host_error("ftp://user:" + SECRET + "@127.0.0.1:1/")
    assert said is not None and SECRET not in said and "***@" in said
    with pytest.raises(Exception) as refused:
        metrics_targets("ftp://u:" + SECRET + "@h/metrics")
    assert SECRET not in str(refused.value) and "***@" in str(refused.value)
    from poolbench_locust.engine.target import request_path

    with pytest.raises(OptionError) as doubled:
        request_path("http://u:" + SECRET + "@127.0.0.1:8000/v1", "/v1/embeddings")
    assert SECRET not in str(doubled.value) and "http://***@127.0.0.1:8000" in str(doubled.value)


def test_the_json_results_options_hide_every_url_of_a_list():
    import argparse

    from poolbench_locust.results.document import options_of

    targets = f"http://u:{SECRET}@a:1/metrics,http://v:{SECRET}@b:2/metrics?t={SECRET}"
    kept, _ = options_of(argparse.Namespace(server_metrics=targets))
    assert kept["server_metrics"] == "http://***@a:1/metrics,http://***@b:2/metrics"
