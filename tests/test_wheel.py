"""The package as a wheel, built as the Docker image's build stage builds it (`pip wheel` of the same files:
pyproject.toml, README.md, poolbench_locust/), installed into a fresh venv outside the repository: the
C pass comes with the wheel, loads there and is what the run's start log says.

The fresh venv takes the wheel alone (`--no-deps`); its dependencies are this interpreter's, put on its
path by a .pth file after its own site-packages (so the wheel's copy of the package, not this checkout's,
is the one imported; `make dist-check` installs them from the index instead). The Dockerfile's stages are
checked in tests/test_dockerfile.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.support.locust_run import ROOT

BUILD_TIMEOUT_S = 170
"""pip's isolated build fetches setuptools (from pip's cache, else the index) and compiles _jsonscan.c."""


def build_wheel(tmp_path: Path) -> Path:
    """The wheel, from a copy of the files the Dockerfile copies: nothing of this checkout's build (its .so)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "poolbench_locust", src / "poolbench_locust", ignore=shutil.ignore_patterns("*.so", "__pycache__")
    )
    wheels = tmp_path / "wheels"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(src)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = wheels.glob("poolbench_locust-*.whl")
    return wheel


@pytest.mark.timeout(300)
def test_the_wheel_carries_the_c_pass_into_a_fresh_venv_outside_the_repository(mock_server, tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("poolbench_locust/_jsonscan.") and n.endswith(".so") for n in names), names
    assert "poolbench_locust/results/schema.json" in names
    assert not any(n.endswith(".c") for n in names)  # the source stays out: the wheel is the build

    # this checkout stays off the path: pip would take its egg-info for the package installed already
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
        env=env,
        timeout=120,
    )
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        ).stdout.strip()
    )
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    where = tmp_path / "elsewhere"
    where.mkdir()
    code = (
        "import poolbench_locust, poolbench_locust._jsonscan as c;"
        " from poolbench_locust import lazyjson;"
        " print(poolbench_locust.__file__); print(c.__file__); print(lazyjson.validator())"
    )
    done = subprocess.run([str(python), "-c", code], cwd=where, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    package, extension, validator = done.stdout.split()
    assert Path(package).is_relative_to(site) and Path(extension).is_relative_to(site), done.stdout
    assert validator == "c"

    shutil.copy(ROOT / "locustfiles" / "demo.py", where / "demo.py")
    argv = [str(python), "-m", "locust", "-f", "demo.py", "--headless", "-u", "2", "-r", "2", "-t", "2s"]
    argv += ["--host", mock_server.url, "--json-result", "result.json", "--stop-timeout", "5"]
    run = subprocess.run(argv, cwd=where, env=env, capture_output=True, text=True, timeout=90)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stderr.count("JSON answers validated by the C pass") == 1, run.stderr[-3000:]
    doc = json.loads((where / "result.json").read_text())
    assert doc["validator"] == "c" and doc["total"]["locust"]["Request Count"] > 0
