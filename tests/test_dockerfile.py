"""The Dockerfile's two stages, read statically (no Docker engine runs here): a build stage with a C
compiler that builds the package's wheel with lazyjson's C pass, and the image itself, Locust's, that
installs that wheel without a compiler and fails to build unless the C pass loads. The shell checks the
build runs are run here too, on a wheel and an install of this machine's."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.locust_run import ROOT
from tests.support.no_c_pass import without_c_pass


@dataclass
class Stage:
    image: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def stages(text: str) -> list[Stage]:
    """The Dockerfile's stages: each FROM's image and name, and its instructions (continuation lines joined,
    comments left out)."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    found: list[Stage] = []
    for line in joined.splitlines():
        if not line.strip():
            continue
        keyword, _, args = line.strip().partition(" ")
        args = re.sub(r"\s+", " ", args.strip())
        if keyword.upper() == "FROM":
            image, _, name = args.partition(" AS ")
            found.append(Stage(image.strip(), name.strip() or None))
        elif found:
            found[-1].instructions.append((keyword.upper(), args))
    return found


@pytest.fixture(scope="module")
def dockerfile() -> list[Stage]:
    return stages((ROOT / "Dockerfile").read_text())


def test_two_stages_on_the_same_locust_image(dockerfile: list[Stage]) -> None:
    """The wheel is built on the image it runs on: the same Python (the wheel's tag) and C library."""
    build, image = dockerfile
    assert build.name == "build" and image.name is None
    assert build.image == image.image == "locustio/locust:${LOCUST_VERSION}"


def test_the_build_stage_has_a_compiler_and_builds_a_wheel_with_the_c_pass(dockerfile: list[Stage]) -> None:
    build = dockerfile[0]
    runs = " && ".join(build.all("RUN"))
    assert re.search(r"apt-get install -y --no-install-recommends gcc libc6-dev", runs), runs
    assert "python -m pip wheel --no-cache-dir --no-deps --wheel-dir /tmp/wheels /tmp/poolbench-src" in runs
    # what pip needs to build: pyproject.toml, the readme it names, the package (tests/test_wheel.py copies the same)
    copied = {src for args in build.all("COPY") for src in args.split()[:-1]}
    readme = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["readme"]
    assert copied == {"pyproject.toml", readme, "poolbench_locust/"}


def test_the_image_installs_the_wheel_without_a_compiler(dockerfile: list[Stage]) -> None:
    image = dockerfile[-1]
    assert image.all("COPY")[0] == "--from=build /tmp/wheels/ /tmp/wheels/"
    assert not any("poolbench_locust/" in c or "pyproject.toml" in c for c in image.all("COPY"))  # no source
    runs = " && ".join(image.all("RUN"))
    assert "apt-get" not in runs and "gcc libc6-dev" not in runs
    assert "python -m pip install --no-cache-dir /tmp/wheels/poolbench_locust-*.whl" in runs
    assert "! command -v gcc && ! command -v cc" in runs
    assert image.all("USER")[-1] == "locust" and image.all("ENTRYPOINT") == ['["locust"]']


def grep_of_the_build(dockerfile: list[Stage]) -> str:
    """The build stage's check that the wheel holds the extension: its grep pattern."""
    (pattern,) = re.findall(r"\| grep -q '([^']+)'", " ".join(dockerfile[0].all("RUN")))
    return pattern


@pytest.mark.parametrize("holds", [True, False], ids=["with-the-c-pass", "without"])
def test_the_build_fails_on_a_wheel_without_the_c_pass(holds: bool, dockerfile: list[Stage], tmp_path: Path) -> None:
    """The build stage's own check, run on a wheel of each kind: `python -m zipfile -l` piped to its grep."""
    wheel = tmp_path / "poolbench_locust-0.1.0-cp313-cp313-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("poolbench_locust/lazyjson.py", "")
        z.writestr("poolbench_locust/_jsonscan.c", "")  # a source alone is no build
        if holds:
            z.writestr("poolbench_locust/_jsonscan.cpython-313-x86_64-linux-gnu.so", b"\x7fELF")
    listing = subprocess.run([sys.executable, "-m", "zipfile", "-l", str(wheel)], capture_output=True, timeout=30)
    found = subprocess.run(["grep", "-q", grep_of_the_build(dockerfile)], input=listing.stdout, timeout=30)
    assert (found.returncode == 0) is holds


@pytest.mark.parametrize("built", [True, False], ids=["c-pass", "no-c-pass"])
def test_the_image_fails_to_build_unless_the_c_pass_loads(built: bool, dockerfile: list[Stage], tmp_path: Path) -> None:
    """The image's own check (`python -c ...` of its RUN), run here with the C pass and with it hidden."""
    (check,) = re.findall(r"(python -c '[^']+')", " ".join(dockerfile[-1].all("RUN")))
    argv = shlex.split(check)
    env = {**os.environ, **({} if built else without_c_pass(tmp_path))}
    done = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode == 0) is built, done.stderr
    if not built:
        assert "AssertionError: simdjson" in done.stderr
