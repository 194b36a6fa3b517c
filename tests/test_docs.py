"""The documentation site: every option of the plugin is on the options page, which is made from the code."""

from __future__ import annotations

import ast

from locust.argument_parser import get_empty_argument_parser, get_parser, setup_parser_arguments

import poolbench_locust.plugin  # noqa: F401  (importing the plugin puts its options on Locust's parser)
from docsgen import options_page
from poolbench_locust.options import ALL_OPTIONS
from poolbench_locust.options.cli import help_text
from tests.support.locust_run import ROOT


def plugin_actions() -> list:
    """The plugin's options as Locust's parser holds them: whatever declared them, and however."""
    locust_alone = get_empty_argument_parser()
    setup_parser_arguments(locust_alone)  # Locust's own options, without the listeners that add ours
    locust_own = {a.dest for a in locust_alone._actions}
    return [a for a in get_parser()._actions if a.dest not in locust_own]


def test_every_option_of_the_parser_is_on_the_options_page_and_its_help_says_its_default() -> None:
    page = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")  # as GitHub shows it
    declared = {opt.flag: opt for opt in ALL_OPTIONS}
    actions = plugin_actions()
    assert len(actions) >= 30, [a.dest for a in actions]
    for action in actions:
        flag = next(s for s in action.option_strings if s.startswith("--"))
        row = next((line for line in page.splitlines() if line.startswith(f"| `{flag}` |")), None)
        assert row is not None, f"{flag} is not on the options page: declare it where the page reads options"
        opt = declared[flag]
        assert opt.help in row.replace("\\|", "|"), f"{flag}: its help text is not on the page"
        assert f"`LOCUST_{action.dest.upper()}`" in row, f"{flag}: its environment variable is not on the page"
        assert action.help == help_text(opt) and " Default: " in action.help, f"{flag}: --help does not say its default"
    by_flag = {next(s for s in a.option_strings if s.startswith("--")): a.help for a in actions}
    assert by_flag["--input-len"].endswith(" Default: 128.")
    assert by_flag["--request-timeout"].endswith(" Default: 60.")
    assert by_flag["--capacity-start-rate"].endswith(" Default: 1.")
    assert by_flag["--capacity-attainment"].endswith(" Default: 0.99.")


def test_the_page_holds_the_options_of_every_room_and_marks_those_outside_the_form() -> None:
    page = options_page.tables(options_page.all_options())
    for flag in ("--model", "--slo", "--server-metrics", "--json-result", "--no-preflight", "--tls-verify"):
        assert f"| `{flag}` |" in page, flag
    json_result = next(line for line in page.splitlines() if line.startswith("| `--json-result` |"))
    assert "*command line only*" in json_result  # a path on the master's disk: no field in the web form


def test_the_options_tables_in_the_file_are_the_registrys() -> None:
    """docs/options.md holds its tables (GitHub shows the file as it is): made again from the registry,
    they are the same; else `python -m docsgen.options_page` writes them."""
    text = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    assert options_page.render(text) == text, "docs/options.md is stale: run python -m docsgen.options_page"
    assert "| `--batch-size` | `LOCUST_BATCH_SIZE` | `1` | Inputs per request |" in text


def test_every_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f": {page.name}" in nav, f"docs/{page.name} is not in mkdocs.yml's nav"


def _failure_texts() -> list[tuple[str, str]]:
    """The fixed words of each failure message the engine and the endpoints write: the text of a
    `BadResponse(...)`/`AnswerError(...)`/`HeadersTooLarge(...)` or of a string a function returns
    in engine/ (an f-string's words up to its first value)."""
    found = []
    paths = sorted(
        [*(ROOT / "poolbench_locust" / "engine").glob("*.py"), *(ROOT / "poolbench_locust" / "endpoints").glob("*.py")]
    )
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in (
                "BadResponse",
                "AnswerError",
                "HeadersTooLarge",
            ):
                text = node.args[0] if node.args else None
            elif isinstance(node, ast.Return) and path.parent.name == "engine":
                text = node.value
            else:
                continue
            if isinstance(text, ast.JoinedStr) and text.values:
                text = text.values[0]
            if isinstance(text, ast.Constant) and isinstance(text.value, str) and len(text.value) >= 10:
                found.append((f"{path.name}:{node.lineno}", text.value))
    return found


def test_every_failure_message_of_the_engine_is_in_troubleshooting() -> None:
    page = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    texts = _failure_texts()
    assert len(texts) >= 40, texts  # the walk finds the messages at all
    missing = [f"{where}: {text!r}" for where, text in texts if text not in page]
    assert not missing, "say what these mean and what to do in docs/troubleshooting.md:\n" + "\n".join(missing)
