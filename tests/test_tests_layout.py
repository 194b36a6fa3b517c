"""The tests' own layout: helpers live in tests/support/ (or devsupport/, when bench/ uses them too, which
imports nothing from tests/ or bench/), no test module imports another, and tests/README.md names every test
file and every helper module.

A test module that imports another runs the other's module-level code and couples two rooms' tests;
a helper two files need belongs in tests/support/. Every import is counted: top-level, function-local,
`importlib.import_module("...")`, and a dotted name handed to a process that imports it
(`python -m tests.support.hostile tests.test_x:HANDLER`). No test module is loaded by its name at all,
not even by itself: a server that a test runs in a process of its own lives in tests/support/
(process_servers.py), so that a test module is imported by pytest alone."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.locust_run import ROOT

TESTS = ROOT / "tests"
README = TESTS / "README.md"
TEST_MODULE = re.compile(r"^tests\.(?:real\.)?test_\w+$")
NAMED_MODULE = re.compile(r"^(tests\.(?:real\.)?test_\w+)(?::\w+)?$")


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def imported(path: Path, own: str) -> tuple[set[str], set[str]]:
    """The modules `path` (the module `own`) imports, and those it names in a string for a process or a
    loader to import, as dotted names."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = own.rsplit(".", 1)[0]
    found: set[str] = set()
    named: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from tests import test_cli`
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (m := NAMED_MODULE.match(node.value)):
            named.add(m.group(1))
    return found, named


def other_test_modules_of(path: Path, own: str | None = None) -> list[str]:
    """The test modules `path` (the module `own`, by default its own name) loads: those it imports other
    than itself, and any it names for a process or a loader to import, itself included."""
    own = own or module_name(path)
    found, named = imported(path, own)
    return sorted({n for n in found if TEST_MODULE.match(n) and n != own} | {n for n in named if TEST_MODULE.match(n)})


def python_files() -> list[Path]:
    return sorted(p for p in [*TESTS.rglob("*.py"), *(ROOT / "bench").glob("*.py")] if "__pycache__" not in p.parts)


def test_no_test_module_imports_another_test_module() -> None:
    offences = {str(p.relative_to(ROOT)): found for p in python_files() if (found := other_test_modules_of(p))}
    assert offences == {}, f"move what they share, and the servers they name, to tests/support/: {offences}"


def test_devsupport_imports_nothing_from_tests_or_bench() -> None:
    """devsupport/ is what tests/ and bench/ share: it stands below both, so neither is needed to use it."""
    above = ("tests", "bench")
    shared = sorted(p for p in (ROOT / "devsupport").rglob("*.py") if "__pycache__" not in p.parts)
    assert shared, "devsupport/ has no module"
    offences = {
        str(p.relative_to(ROOT)): found
        for p in shared
        if (found := sorted(n for n in set().union(*imported(p, module_name(p))) if n.split(".")[0] in above))
    }
    assert offences == {}, f"devsupport/ must not import tests/ or bench/: {offences}"


def test_the_guard_sees_every_form_of_import(tmp_path: Path) -> None:
    """Each planted import of another test module is caught, and a module naming its own handlers for a
    process; a module importing a helper is not."""
    other, own = "tests.test_" + "cli", "tests.test_" + "planted"  # spelled in two: this file names neither
    planted = {
        "top": f"from {other} import csv_rows\n",
        "plain": f"import {other}\n",
        "package": "from tests import test_cli\n",
        "local": f"def f():\n    from {other} import csv_rows\n",
        "dynamic": f"import importlib\nimportlib.import_module('{other}')\n",
        "process": f"ARGS = ['-m', 'tests.support.hostile', '{other}:huge_failures']\n",
        "real": f"from {other.replace('tests.', 'tests.real.')} import x\n",
        "relative": "from .test_cli import csv_rows\n",
    }
    for name, source in planted.items():
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        assert other_test_modules_of(path, own) != [], name
    itself = tmp_path / "itself.py"
    itself.write_text(f"ARGS = ['-m', 'tests.support.hostile', '{own}:handler']\n")
    assert other_test_modules_of(itself, own) == [own], "its own handlers, loaded by name in another process"
    helper = tmp_path / "helper.py"
    helper.write_text("ARGS = ['tests.support.process_servers:slow']\nfrom tests.support.hostile import response\n")
    assert other_test_modules_of(helper, own) == []


def readme_named() -> set[str]:
    """The file names README.md mentions, relative to tests/ when given as tests/..."""
    return {name.removeprefix("tests/") for name in re.findall(r"[\w/]+\.py", README.read_text())}


def listed_files() -> list[str]:
    """Every test file and helper module, as tests/README.md names them (support/ and real/ with their folder)."""
    names = [p.name for p in TESTS.glob("*.py")]
    names += [f"{sub}/{p.name}" for sub in ("support", "real") for p in (TESTS / sub).glob("*.py")]
    return sorted(n for n in names if n != "__init__.py")


def test_the_readme_names_every_test_file_and_helper() -> None:
    named = readme_named()
    missing = [n for n in listed_files() if n not in named and n.rsplit("/", 1)[-1] not in named]
    assert missing == [], f"tests/README.md does not name {missing}"


def test_the_readme_names_no_file_that_is_gone() -> None:
    """Every file README.md names exists under tests/ or poolbench_locust/ (no options.py once it is options/)."""
    package = ROOT / "poolbench_locust"
    gone = []
    for name in sorted(readme_named()):
        candidates = [TESTS / name, TESTS / "support" / name, TESTS / "real" / name, package / name, ROOT / name]
        candidates += list(package.glob(f"*/{name}"))
        if not any(c.is_file() for c in candidates):
            gone.append(name)
    assert gone == [], f"tests/README.md names files that do not exist: {gone}"
