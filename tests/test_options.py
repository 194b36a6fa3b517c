"""Options parsed the same from the command line, the environment and the web UI's form."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import types
import typing
from typing import Any

import pytest
from locust.argument_parser import get_parser

import poolbench_locust as pb
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.options import ALL_OPTIONS, BY_FLAG, GROUPS, Option, OptionError, Settings, Span
from poolbench_locust.options.cli import help_text
from poolbench_locust.options.parsers import non_negative, positive, ratio
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


def _parsed_type(opt: Option) -> Any:
    """The type of an option's value as its parser declares it (None added for an option not given)."""
    if opt.is_flag:
        return bool
    parse = opt.parse if isinstance(opt.parse, types.FunctionType) else type(opt.parse).__call__
    returned = str if opt.parse is str else typing.get_type_hints(parse)["return"]
    return returned | None if opt.default is None else returned


def _runtime(annotation: Any) -> tuple[type, ...]:
    """The classes isinstance can check an annotation with (tuple[int, ...] -> tuple)."""
    args = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    return tuple(typing.get_origin(a) or a for a in args)


def settings_disagreements(settings_class: type) -> list[str]:
    """Where a typed Settings class and the registry part: a field without an option or an option without a
    field, a field's type other than its parser's, a default other than the option's parsed default."""
    fields = {f.name: f for f in dataclasses.fields(settings_class)}
    hints = typing.get_type_hints(settings_class)
    found = [f"{dest}: a field with no option" for dest in fields.keys() - BY_DEST.keys()]
    for dest, opt in BY_DEST.items():
        if (field := fields.get(dest)) is None:
            found.append(f"{opt.flag}: an option with no field")
            continue
        if hints[dest] != (expected := _parsed_type(opt)):
            found.append(f"{dest}: annotated {hints[dest]}, the parser of {opt.flag} gives {expected}")
        if not isinstance(opt.default_value, _runtime(hints[dest])):
            found.append(f"{dest}: the default of {opt.flag} parses to {opt.default_value!r}, not {hints[dest]}")
        if field.default != opt.default_value or field.repr == opt.secret:
            found.append(f"{dest}: default {field.default!r}, the option's is {opt.default_value!r}")
    return found


BY_DEST = {opt.dest: opt for opt in ALL_OPTIONS}


def test_settings_is_typed_field_by_field_as_the_registry_parses():
    assert settings_disagreements(Settings) == []


def test_the_typed_settings_check_fails_on_a_field_that_parts_from_the_registry():
    @dataclasses.dataclass(frozen=True)
    class Planted:
        model: str = ""
        batch_size: int = 1  # --batch-size parses to a Span
        request_rate: float = 1.0  # not given is None
        not_an_option: bool = False

    found = settings_disagreements(Planted)
    assert "batch_size: annotated <class 'int'>, the parser of --batch-size gives <class " in " ".join(found)
    assert "request_rate: default 1.0, the option's is None" in found
    assert "not_an_option: a field with no option" in found and "--encoding-format: an option with no field" in found


def test_every_option_is_on_locusts_parser_as_the_registry_says():
    parser = get_parser()
    actions = {a.dest: a for a in parser._actions}
    for opt in ALL_OPTIONS:
        action = actions[opt.dest]
        assert action.option_strings == [opt.flag] and action.env_var == opt.env_var and action.help == help_text(opt)
        assert action.include_in_web_ui == opt.web_ui and action.is_secret == opt.secret, opt.flag
        offered = ("", *opt.choices) if opt.choices and opt.default is None else (opt.choices or ())
        assert tuple(action.choices or ()) == offered, opt.flag


def test_a_field_with_choices_and_no_default_left_alone_in_the_web_form_is_not_given():
    """The form selects a select field's first choice when it has no default: --truncate was "end" and
    --pooling-task "embed" in every run started from the form. Its first choice is now empty: not given."""
    actions = {a.dest: a for a in get_parser()._actions}
    unset = [opt for opt in ALL_OPTIONS if opt.choices and opt.default is None and opt.web_ui]
    assert {"--truncate", "--pooling-task", "--embedding-type"} <= {opt.flag for opt in unset}
    for opt in unset:
        assert opt.value(actions[opt.dest].choices[0]) is None, opt.flag


def test_a_secret_option_is_in_no_text_of_the_settings():
    secret = [opt for opt in ALL_OPTIONS if opt.secret]
    assert [opt.flag for opt in secret] == ["--api-key"]
    settings = Settings(**{opt.dest: "sk-registry-secret" for opt in secret})
    assert "sk-registry-secret" not in repr(settings) and "sk-registry-secret" not in str(settings)


@pytest.mark.parametrize(
    "schedule", [("--request-rate", "5"), ("--sweep-rates", "1,2"), ("--dataset", "trace:t.jsonl")], ids=lambda a: a[0]
)
def test_an_open_loop_is_a_rate_a_sweeps_rates_or_a_trace_for_every_rule(schedule):
    """One definition: what needs an open loop (--max-concurrency, --check-min-rate-ratio) takes each of them."""
    settings = Settings.from_options(options(*schedule, "--max-concurrency", "4", "--check-min-rate-ratio", "0.9"))
    assert settings.open_loop and settings.max_concurrency == 4 and settings.check_min_rate_ratio == 0.9


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--max-concurrency", "--max-concurrency: caps an open-loop run: give --request-rate, --sweep-rates or a"),
        ("--check-min-rate-ratio", "--check-min-rate-ratio: the rate sent is an open loop's: give --request-rate or"),
    ],
)
def test_a_closed_loop_refuses_what_needs_an_open_loop(flag, message):
    closed = Settings.from_options(options("--sweep-users", "1,2"))
    assert not closed.open_loop
    with pytest.raises(OptionError, match=f"^{re.escape(message)}"):
        Settings.from_options(options("--sweep-users", "1,2", flag, "0.5" if "ratio" in flag else "4"))


@pytest.mark.parametrize("flag", [o.flag for o in ALL_OPTIONS if o.parse in (non_negative, positive, ratio)])
@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e999"])
def test_a_number_option_refuses_nan_and_infinity_naming_the_option(flag, text):
    """nan passes every comparison (`nan < 0` is false) and inf is a wait, a length or a price that never ends:
    each would have gone through to a run that never stops or a report of nan."""
    typed = options()
    setattr(typed, BY_FLAG[flag].dest, text)
    with pytest.raises(OptionError, match=rf"^{re.escape(flag)}: must be a"):
        Settings.from_options(typed)
