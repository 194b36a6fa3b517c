"""The plugin's options in the help (issue 17: `locust -f ... --help` prints Locust's help before it
imports the locustfile, so the plugin's options are not in it): `poolbench-locust --help` lists them."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from poolbench_locust.options import ALL_OPTIONS
from tests.support.locust_run import COUNTED_RUN_CAP, ROOT


def poolbench_locust(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "poolbench_locust.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_the_console_script_is_declared() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^poolbench-locust = "poolbench_locust.cli:main"', pyproject, re.M)


@pytest.mark.parametrize("args", [["--help"], ["-f", "locustfiles/embeddings.py", "--help"]])
def test_help_lists_every_option_of_the_plugin(args: list[str]) -> None:
    result = poolbench_locust(*args)
    assert result.returncode == 0, result.stderr[-2000:]
    for flag in [o.flag for o in ALL_OPTIONS]:
        assert f"\n  {flag} " in result.stdout or f"\n  {flag}\n" in result.stdout, flag
    assert "--run-time" in result.stdout  # and Locust's own


def test_it_runs_locust_with_the_same_arguments(tmp_path) -> None:
    prefix = tmp_path / "run"
    result = poolbench_locust(
        "-f", "locustfiles/embeddings.py", "--headless", "-u", "1", "-r", "1", "-t", COUNTED_RUN_CAP,
        "--max-requests", "10", "--csv", str(prefix),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Pooling statistics" in result.stderr
    assert (tmp_path / "run_pooling.csv").exists()
