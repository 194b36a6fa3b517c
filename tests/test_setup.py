"""`make demo` on a fresh machine installs the package alone: the test extras (kubectl, the
Kubernetes schemas) are hundreds of MB that the demo never uses (issue 17)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.support.locust_run import ROOT


def planned(target: str, venv: str) -> list[str]:
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make on this machine")
    done = subprocess.run([make, "-n", target, f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_make_demo_installs_only_the_package(tmp_path) -> None:
    installs = [line for line in planned("demo", str(tmp_path / "venv")) if "pip install" in line]
    assert installs[-1].endswith("pip install --quiet -e ."), installs
    assert not any("[test]" in line for line in installs), installs


def test_make_test_installs_the_test_extras(tmp_path) -> None:
    """And the docs extra: `make test` builds the documentation site with mkdocs --strict."""
    plan = planned("test", str(tmp_path / "venv"))
    installs = [line for line in plan if "pip install" in line]
    assert any(line.endswith("-e '.[test,docs]'") for line in installs), installs
    assert any("mkdocs build --strict" in line for line in plan), plan
