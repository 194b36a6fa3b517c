"""Options parsed the same from the command line, the environment and the web UI's form."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re

import pytest
from locust.argument_parser import get_parser

import poolbench_locust as pb
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.options import ALL_OPTIONS, BY_FLAG, GROUPS, OptionError, Settings, Span
from tests.support.harness import options


def test_api_key_is_sent_as_bearer_and_openai_api_key_only_when_asked(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    assert "Authorization" not in plan_for(pb.EmbeddingsUser, options()).headers
    from_env = plan_for(pb.EmbeddingsUser, options("--api-key-from-env"))
    assert from_env.headers["Authorization"] == "Bearer sk-from-env"
    assert plan_for(pb.EmbeddingsUser, options("--api-key", "sk-flag")).headers["Authorization"] == "Bearer sk-flag"
    monkeypatch.delenv("OPENAI_API_KEY")
    assert "Authorization" not in plan_for(pb.EmbeddingsUser, options()).headers


def test_api_key_never_in_the_settings_text():
    settings = Settings.from_options(options("--api-key", "sk-secret-123"))
    assert settings.api_key == "sk-secret-123"
    assert "sk-secret-123" not in repr(settings)


def test_web_ui_strings_are_parsed_like_the_command_line():
    form = argparse.Namespace(**{**vars(options()), "batch_size": "16", "dimensions": "", "request_timeout": "2.5"})
    settings = Settings.from_options(form)
    assert (settings.batch_size, settings.dimensions, settings.request_timeout) == (Span(16, 16), None, 2.5)
    with pytest.raises(OptionError, match=r"^--batch-size: must be a whole number >= 1, got 0$"):
        Settings.from_options(argparse.Namespace(**{**vars(options()), "batch_size": "0"}))


def test_binary_encoding_on_a_json_only_endpoint_is_refused():
    with pytest.raises(OptionError, match="--encoding-format: ScoreUser"):
        plan_for(pb.ScoreUser, options("--encoding-format", "bytes_only"))


# ---- the registry: each option declared once, everything else read from it -------------------------


def test_every_option_is_declared_once_with_its_names_group_and_label():
    flags = [opt.flag for opt in ALL_OPTIONS]
    assert len(flags) == len(set(flags)) == len(BY_FLAG) >= 40
    assert all(re.fullmatch(r"--[a-z][a-z0-9-]+", f) for f in flags), flags
    for opt in ALL_OPTIONS:
        assert opt.env_var == "LOCUST_" + opt.flag[2:].replace("-", "_").upper()
        assert opt.group in GROUPS and opt.help.strip() and opt.label.strip(), opt.flag
        assert (opt.parse is None) == opt.is_flag, opt.flag
        if opt.is_flag:
            assert opt.default is False and not opt.secret, opt.flag
    labels = [opt.label for opt in ALL_OPTIONS if opt.web_ui]
    assert len(labels) == len(set(labels))


def test_settings_has_a_field_per_option_and_the_parsed_defaults_of_the_command_line(monkeypatch):
    for name in [n for n in os.environ if n.startswith("LOCUST_")]:  # the suite's own (tests/conftest.py)
        monkeypatch.delenv(name)
    assert [f.name for f in dataclasses.fields(Settings)] == [opt.dest for opt in ALL_OPTIONS]
    assert Settings() == Settings.from_options(options()) == Settings.from_options(None)
    assert Settings().batch_size == Span(1, 1) and Settings().validate


def test_every_option_is_on_locusts_parser_as_the_registry_says():
    parser = get_parser()
    actions = {a.dest: a for a in parser._actions}
    for opt in ALL_OPTIONS:
        action = actions[opt.dest]
        assert action.option_strings == [opt.flag] and action.env_var == opt.env_var and action.help == opt.help
        assert action.include_in_web_ui == opt.web_ui and action.is_secret == opt.secret, opt.flag
        assert tuple(action.choices or ()) == (opt.choices or ()), opt.flag


def test_a_secret_option_is_in_no_text_of_the_settings():
    secret = [opt for opt in ALL_OPTIONS if opt.secret]
    assert [opt.flag for opt in secret] == ["--api-key"]
    settings = Settings(**{opt.dest: "sk-registry-secret" for opt in secret})
    assert "sk-registry-secret" not in repr(settings) and "sk-registry-secret" not in str(settings)
