"""The web UI's start form: every option of ours in a group with a human label and its help text, the
names the browser posts mapped back to their options, and values typed as text accepted."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gevent
import locust
import pytest
import requests
from locust.argument_parser import get_parser
from locust.env import Environment
from locust.event import Events

from devsupport.ports import free_port
from poolbench_locust import EmbeddingsUser
from poolbench_locust.options import ALL_OPTIONS, BY_FLAG, Settings, Span
from poolbench_locust.webform import layout as webform
from poolbench_locust.webform import validation
from tests.support import zygote
from tests.support.bad_values import BAD_VALUES
from tests.support.harness import options
from tests.support.locust_run import ROOT, locust_argv

BUNDLE = next((Path(locust.__file__).parent / "webui" / "dist" / "assets").glob("src-*.js"))


def test_every_option_has_a_group_and_a_human_label_and_keeps_its_help():
    spec = webform.form_spec(webform.extra_actions())
    fields = spec["fields"]
    assert len(fields) == len(webform.extra_actions()) == len([o for o in ALL_OPTIONS if o.web_ui]) >= 28
    unplaced = sorted(f["flag"] for f in fields.values() if spec["groups"][f["group"]] == webform.OTHER)
    assert unplaced == [], f"give these a group and a label in webform.GROUPS: {unplaced}"
    labels = [f["label"] for f in fields.values()]
    assert len(set(labels)) == len(labels)
    assert all(re.fullmatch(r"[A-Z][\w ,/'-]+", label) for label in labels), labels
    check = fields["checkP95Ms"]
    assert (check["label"], spec["groups"][check["group"]]) == ("Highest p95 response time, ms", "Checks")
    assert check["help"] == get_parser().args_included_in_web_ui["check_p95_ms"].help
    assert spec["groups"][: len(webform.GROUPS)] == [
        "Request",
        "Workload",
        "Open loop",
        "Sweep",
        "Capacity",
        "Checks",
        "A/B",
        "Cost",
        "Server metrics",
        "Prometheus",
    ]


def test_the_names_the_browser_uses_are_the_ones_locusts_bundle_makes():
    # webform mirrors the two key transforms of Locust's bundle; if Locust changes them, this fails.
    bundle = BUNDLE.read_text(encoding="utf-8")
    assert "e.replace(/_([a-z0-9])/g,(e,t)=>t.toUpperCase())" in bundle
    assert "e.replace(/([a-z0-9])([A-Z0-9])/g,`$1_$2`).toLowerCase()" in bundle
    assert webform.browser_key("check_p95_ms") == "checkP95Ms"
    assert webform.posted_name("check_p95_ms") == "check_p9_5ms"
    assert webform.posted_name("input_len_range") == "input_len_range"
    mangled = {d for d in webform.extra_actions() if webform.posted_name(d) != d}
    assert mangled == {"check_p95_ms", "check_max_top1_changed"}
    assert webform.posted_name("check_max_top1_changed") == "check_max_top_1changed"


@pytest.fixture
def web_ui(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["locust"])  # Locust's page parses sys.argv for the form's defaults
    env = Environment(
        user_classes=[EmbeddingsUser], parsed_options=options(), host="http://127.0.0.1:9", events=Events()
    )
    runner = env.create_local_runner()
    web = env.create_web_ui("127.0.0.1", 0, delayed_start=True)
    webform.on_init(environment=env, runner=runner, web_ui=web)
    yield env, web
    runner.quit()


@pytest.mark.parametrize(
    ("posted", "dest", "value"),
    [("check_p9_5ms", "check_p95_ms", "250"), ("check_max_top_1changed", "check_max_top1_changed", "0.1")],
)
def test_a_value_typed_into_a_mangled_field_reaches_its_option(web_ui, posted, dest, value):
    env, web = web_ui
    form = {"user_count": "1", "spawn_rate": "1", "host": "http://127.0.0.1:9", posted: value}
    answer = web.app.test_client().post("/swarm", data=form)
    assert answer.status_code == 200 and answer.get_json()["success"]
    assert getattr(env.parsed_options, dest) == value
    assert not hasattr(env.parsed_options, posted)


def test_a_range_typed_where_the_default_is_a_number_starts_the_run(web_ui):
    env, web = web_ui
    form = {
        "user_count": "1",
        "spawn_rate": "1",
        "host": "http://127.0.0.1:9",
        "batch_size": "1:16",
        "burstiness": "0.5",
    }
    answer = web.app.test_client().post("/swarm", data=form)
    assert answer.status_code == 200, answer.get_data(as_text=True)[:300]
    settings = Settings.from_options(env.parsed_options)
    assert settings.batch_size == Span(1, 16) and settings.burstiness == 0.5


def test_the_page_carries_the_groups_and_labels_and_no_help_text_can_end_its_script(web_ui):
    _, web = web_ui
    page = web.app.test_client().get("/").get_data(as_text=True)
    script = page[page.index("const SPEC = ") :]
    spec = json.loads(script[len("const SPEC = ") : script.index(";\n")])
    assert spec == json.loads(json.dumps(webform.form_spec(webform.extra_actions())))
    hostile = webform.script({"groups": ["</script><script>alert(1)</script>"], "fields": {}})
    assert hostile.count("</script>") == 1


CHROMIUM = shutil.which("chromium")


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install chromium)")
def test_in_a_browser_the_form_shows_the_groups_in_order_with_human_labels(mock_server):
    port = free_port()
    proc = zygote.popen(
        locust_argv(
            "locustfiles/embeddings.py", *("--web-host", "127.0.0.1", "--web-port", str(port)), host=mock_server.url
        ),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    profile = tempfile.mkdtemp(prefix="poolbench-chromium-")
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                requests.get(f"http://127.0.0.1:{port}/", timeout=10)
                break
            except (requests.ConnectionError, requests.Timeout):
                time.sleep(0.3)
        dom = subprocess.run(
            [
                *(CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"),
                *("--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}"),
                *("--virtual-time-budget=8000", "--dump-dom", f"http://127.0.0.1:{port}/"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        shutil.rmtree(profile, ignore_errors=True)
    headings = re.findall(r'<p class="poolbench-group"[^>]*order: (\d+)[^>]*>([^<]+)</p>', dom)
    assert sorted(headings, key=lambda h: int(h[0])) == [
        ("0", "Request"),
        ("1000", "Workload"),
        ("2000", "Open loop"),
        ("3000", "Sweep"),
        ("4000", "Capacity"),
        ("5000", "Checks"),
        ("6000", "A/B"),
        ("7000", "Cost"),
        ("8000", "Server metrics"),
        ("9000", "Prometheus"),
    ]
    assert ">Highest p95 response time, ms<" in dom and "Check P9 5Ms" not in dom
    assert (
        "Fail the run if Locust's total p95 response time exceeds this. Default: not set. (--check-p95-ms)"
        in dom.replace("&#39;", "'")
    )


# ---- every option typed into the form is checked before the run starts -----------------------------

FORM_FIELDS = [opt for opt in ALL_OPTIONS if opt.web_ui and not opt.is_flag]
"""The form's text fields; a flag's field is a checkbox, true or false, and has no bad value."""
ANY_TEXT = {"--model", "--api-key", "--prometheus-host", "--infer-input", "--infer-output"}
"""Options whose every text is good (the key goes to the loopback mock: no --api-key-over-http needed;
the Prometheus interface is bound at launch, the form's text only draws the warning that it stays)."""
FORM_BAD_VALUES: dict[str, str] = {
    **{flag: bad for flag, (bad, _) in BAD_VALUES.items() if BY_FLAG[flag].web_ui},
    # values argparse accepts that the checks at start refuse
    "--ca-bundle": "/no/such/ca.pem",
    "--tokenizer": "/no/such/tokenizer.json",
    "--dataset-column": "passage",  # the default --dataset random has no columns
    "--input-type": "search_document",  # not one of the input types EmbeddingsUser's /v1/embeddings takes
    # the values of issue 21
    "--slo": "bogus",
    "--server-metrics": "ftp://x y",
}
FORM_BAD_COMBINATIONS: list[dict[str, str]] = [
    {"--check-min-goodput": "5"},
    {"--max-concurrency": "4"},
    {"--sweep-rates": "10,20", "--sweep-users": "4,8"},
    {"--embed-dtype": "float16"},
    {"--request-rate": "5", "--dataset": "trace:requests.jsonl"},
    {"--extra-body": '{"input": ["typed in the form"]}'},  # a field EmbeddingsUser builds itself
    {"--extra-body": '{"truncate_prompt_tokens": 16}', "--truncate": "end"},  # a field --truncate builds
    {"--find-capacity": "true"},  # a search needs --slo
    {"--sweep-rates": "10,20", "--find-capacity": "true", "--slo": "e2e_ms=60"},  # it sets each probe's rate
    {"--max-requests": "100", "--repeat": "3"},  # the repeats' stats resets would start the count again
    {"--ab-paired": "true"},  # pairs need a second host
    {"--gpus": "4"},  # prices nothing without --gpu-hour-cost
    {"--gpu-hour-cost": "2.5,1.2"},  # a price per host needs a second host
    {"--server-metrics": "B=http://127.0.0.1:9/metrics"},  # so does a metrics URL of host B
]
"""Good values each, that the checks at start refuse together (the first flag is the one named)."""


def test_every_field_of_the_form_has_a_bad_value_here():
    assert set(FORM_BAD_VALUES) == {opt.flag for opt in FORM_FIELDS} - ANY_TEXT


@pytest.fixture(scope="module")
def mock_url(mock_server_factory) -> str:
    return mock_server_factory().url


@pytest.fixture
def checked_web_ui(monkeypatch, mock_url):
    """Locust's web UI in this process, with the form's layout and checks of the plugin installed."""
    monkeypatch.setattr(sys, "argv", ["locust"])
    env = Environment(user_classes=[EmbeddingsUser], parsed_options=options(), host=mock_url, events=Events())
    runner = env.create_local_runner()
    web = env.create_web_ui("127.0.0.1", 0, delayed_start=True)
    webform.on_init(environment=env, runner=runner, web_ui=web)
    validation.install(env, web)
    yield env, web.app.test_client()
    runner.quit()


def swarm(client: Any, host: str, values: dict[str, str]) -> dict[str, Any]:
    """POST /swarm as the page sends it: each option under the name the browser posts."""
    form = {"user_count": "1", "spawn_rate": "1", "host": host}
    form |= {webform.posted_name(BY_FLAG[flag].dest): value for flag, value in values.items()}
    answer = client.post("/swarm", data=form)
    assert answer.status_code == 200, answer.get_data(as_text=True)[:500]
    return answer.get_json()


def assert_refused_then_a_good_start_starts(checked_web_ui, mock_url: str, values: dict[str, str]) -> None:
    env, client = checked_web_ui
    before = dict(vars(env.parsed_options))
    answer = swarm(client, mock_url, values)
    flag = next(iter(values))
    assert answer["success"] is False, answer
    assert answer["message"].startswith(f"{flag}: "), answer
    assert "\n" not in answer["message"]
    assert vars(env.parsed_options) == before, "a refused form changes no option"
    assert env.runner.state == "ready"
    good = swarm(client, mock_url, {})
    assert good["success"] is True, good
    deadline = time.monotonic() + 10
    while env.runner.state not in ("spawning", "running") and time.monotonic() < deadline:
        gevent.sleep(0.05)  # Locust starts the run in a greenlet of its own
    assert env.runner.state in ("spawning", "running")
    env.runner.stop()


@pytest.mark.parametrize("flag", list(FORM_BAD_VALUES))
def test_a_bad_value_of_each_option_is_refused_by_the_form_and_nothing_sticks(checked_web_ui, mock_url, flag):
    assert_refused_then_a_good_start_starts(checked_web_ui, mock_url, {flag: FORM_BAD_VALUES[flag]})


@pytest.mark.parametrize("values", FORM_BAD_COMBINATIONS, ids=lambda v: next(iter(v)))
def test_options_that_cannot_go_together_are_refused_by_the_form(checked_web_ui, mock_url, values):
    assert_refused_then_a_good_start_starts(checked_web_ui, mock_url, values)
