"""Locust's own options read once (poolbench_locust/locust_options.py): each one's coercion of what Locust's
parser, the web UI's form or a test's Namespace may leave in parsed_options; and the start checks' one
template (poolbench_locust/lifecycle.py's StartCheck): where a declared check runs. No process is started."""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

import gevent
import pytest
from locust.runners import WorkerRunner

from poolbench_locust.lifecycle import StartCheck
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


class Ran:
    """A StartCheck whose checks say so, with the error each gives."""

    def __init__(self, error: str | None = None, before_the_form: bool = True) -> None:
        self.calls: list[str] = []
        self.error = error
        early = (lambda environment: self.called("before the form")) if before_the_form else None
        self.start_check = StartCheck(lambda environment: self.called("check"), early)

    def called(self, which: str) -> str | None:
        self.calls.append(which)
        return self.error


class Worker(WorkerRunner):
    """Only its type is asked: no master to connect to."""

    def __init__(self) -> None:
        self.greenlet = None


class Runner:
    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


def environment(**values: Any) -> SimpleNamespace:
    return SimpleNamespace(parsed_options=argparse.Namespace(**values), runner=None)


def test_a_headless_or_autostart_run_is_checked_at_init_and_its_error_ends_the_process():
    for env, web_ui in ((environment(headless=True), None), (environment(autostart=True), object())):
        ran = Ran()
        ran.start_check.on_init(env, runner=None, web_ui=web_ui)
        assert ran.calls == ["check"]
        with pytest.raises(SystemExit) as ended:
            Ran("bad").start_check.on_init(env, runner=None, web_ui=web_ui)
        assert ended.value.code == 1


def test_a_run_that_waits_for_the_web_form_is_checked_at_init_only_by_what_comes_before_the_form():
    ran, alone = Ran(), Ran(before_the_form=False)
    ran.start_check.on_init(environment(), runner=None, web_ui=object())
    alone.start_check.on_init(environment(), runner=None, web_ui=object())
    assert ran.calls == ["before the form"] and alone.calls == []


def test_a_worker_is_never_checked():
    worker = Worker()
    ran = Ran("bad")
    ran.start_check.on_init(environment(headless=True), runner=worker, web_ui=None)
    env = environment()
    env.runner = worker
    ran.start_check.on_test_start(env)
    assert ran.calls == []


def test_test_start_checks_again_and_an_error_stops_that_run_only():
    env = environment()
    ran = Ran()
    ran.start_check.on_test_start(env)  # no runner: no run to check
    env.runner = Runner()
    ran.start_check.on_test_start(env)
    assert ran.calls == ["check"]
    Ran("bad").start_check.on_test_start(env)
    gevent.sleep(0)
    assert env.runner.stopped
