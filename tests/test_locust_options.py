"""Locust's own options read once (poolbench_locust/locust_options.py): each one's coercion of what Locust's
parser, the web UI's form or a test's Namespace may leave in parsed_options. No process is started."""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

import pytest

from poolbench_locust.locust_options import LocustOptions, locust_options
from tests.support.harness import options


def read(**values: Any) -> LocustOptions:
    return LocustOptions(argparse.Namespace(**values))


def test_unset_options_read_as_their_unset_value():
    for unset in (LocustOptions(None), read(), locust_options(SimpleNamespace())):
        assert unset.num_users == 0 and unset.processes == 0 and unset.expect_workers == 1
        assert unset.run_time is None and unset.host is None
        assert unset.csv_prefix is None and unset.html_file is None and unset.web_base_path == ""
        assert not unset.headless and not unset.autostart and not unset.stats_history_enabled


def test_locusts_parser_and_its_defaults():
    parsed = locust_options(SimpleNamespace(parsed_options=options()))
    assert (parsed.num_users, parsed.run_time, parsed.csv_prefix, parsed.expect_workers) == (0, None, None, 1)
    given = options("-u", "3", "-t", "1m", "--csv", "out/run", "--web-base-path", "/lb/", "--headless")
    parsed = locust_options(SimpleNamespace(parsed_options=given))
    assert (parsed.num_users, parsed.run_time, parsed.csv_prefix, parsed.web_base_path) == (3, 60.0, "out/run", "/lb")
    assert parsed.headless and not parsed.autostart


@pytest.mark.parametrize(
    ("value", "users"),
    [(None, 0), ("", 0), (0, 0), (7, 7), ("7", 7), (" 12 ", 12)],
)
def test_num_users_from_a_flag_or_the_digits_a_form_sent(value, users):
    assert read(num_users=value).num_users == users


def test_num_users_that_is_no_number_is_refused():
    with pytest.raises(ValueError):
        read(num_users="many").num_users  # noqa: B018


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(None, None), (0, None), ("", None), (20, 20.0), ("20", 20.0), ("1m30s", 90.0), (2.5, 2.5)],
)
def test_run_time_in_seconds_none_when_unset_or_zero(value, seconds):
    assert read(run_time=value).run_time == seconds


def test_names_are_none_when_empty_and_text_otherwise(tmp_path):
    assert read(csv_prefix="").csv_prefix is None and read(html_file="").html_file is None
    assert read(csv_prefix=tmp_path / "run").csv_prefix == str(tmp_path / "run")
    assert read(html_file="r.html").html_file == "r.html" and read(host="").host is None
    assert read(host="http://127.0.0.1:8000").host == "http://127.0.0.1:8000"


@pytest.mark.parametrize(("value", "base"), [(None, ""), ("", ""), ("/", ""), ("/lb/", "/lb"), ("/lb", "/lb")])
def test_web_base_path_without_its_last_slash(value, base):
    assert read(web_base_path=value).web_base_path == base


def test_counts_of_processes_and_workers():
    assert read(processes=-1).processes == -1  # one per core: Locust forks
    assert read(processes=None, expect_workers=None).expect_workers == 1
    assert read(processes="4", expect_workers="3").processes == 4 and read(expect_workers="3").expect_workers == 3


def test_flags_are_booleans():
    flags = read(headless=1, autostart="yes", stats_history_enabled=True)
    assert (flags.headless, flags.autostart, flags.stats_history_enabled) == (True, True, True)
    assert read(headless=None, autostart=0).autostart is False


def test_options_are_read_when_asked_for():
    environment = SimpleNamespace(parsed_options=argparse.Namespace(num_users=2))
    environment.parsed_options.num_users = 5  # what the web form does before the next run
    assert locust_options(environment).num_users == 5
