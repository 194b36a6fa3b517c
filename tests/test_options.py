"""Options parsed the same from the command line, the environment and the web UI's form."""

from __future__ import annotations

import argparse

import pytest

import poolbench_locust as pb
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.options import OptionError, Settings, Span
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
