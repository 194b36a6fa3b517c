"""The task pages' commands run as written against the bundled mock (docs/measure.md, capacity.md, ci.md), and
the Kubernetes page applies overlays that exist (tests/test_k8s.py renders and runs them).

Each `poolbench-locust` and `poolbench-compare` command of a page's `sh` blocks runs in order, in one folder, as
the page spells it, with only these changes: each `--host` (and `--server-metrics`) of a server named on the page
becomes a bundled mock answering in that server's form; the run's length is shortened (`-t`, `--warmup`,
`--sweep-step-time`, `--repeat`; a capacity search gets a `-t` cap); `-f locustfiles/...` is the repository's."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.locust_run import ROOT

DOCS = ROOT / "docs"
BIN = Path(sys.executable).parent
MOCK_FLAVORS = {
    "vllm": (),
    "tei": ("--flavor", "tei"),
    "infinity": ("--flavor", "infinity"),
    "sglang": ("--flavor", "sglang"),
}
"""The servers a page's commands name (`http://NAME:PORT`), and the mock's flags that answer as each does."""
SHORTER = {"-t": "4s", "--warmup": "1", "--sweep-step-time": "1", "--repeat": "2"}
CAPACITY_CAP = "12s"
TIMEOUT_S = 90


def commands(page: str) -> list[list[str]]:
    """The page's `poolbench-locust` and `poolbench-compare` commands, in order, each split as a shell would."""
    text = (DOCS / page).read_text(encoding="utf-8")
    found = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith(("poolbench-locust ", "poolbench-compare ")):
                found.append(shlex.split(line))
    return found


def _mock_url(match: re.Match[str], start: Callable[..., Any], mocks: dict[str, str]) -> str:
    server, path = match.group(1), match.group(3) or ""
    if server not in mocks:
        mocks[server] = start(*MOCK_FLAVORS[server]).url
    return mocks[server] + path


def as_run(argv: list[str], start: Callable[..., Any], mocks: dict[str, str]) -> list[str]:
    """The command with the changes the module's docstring lists."""
    out = [str(BIN / argv[0])]
    args = argv[1:]
    for i, arg in enumerate(args):
        before = args[i - 1] if i else ""
        if before in SHORTER:
            arg = SHORTER[before]
        elif before == "-f":
            arg = str(ROOT / arg)
        elif before in ("--host", "--server-metrics"):
            arg = re.sub(r"^http://(\w+):(\d+)(/\S*)?$", lambda m: _mock_url(m, start, mocks), arg)
            assert arg.startswith("http://127.0.0.1"), f"{argv}: a server the test has no mock for"
        out.append(arg)
    if "--find-capacity" in args and "-t" not in args:
        out += ["-t", CAPACITY_CAP]
    return out


@pytest.mark.parametrize("page", ["measure.md", "capacity.md", "ci.md"])
def test_every_command_of_the_task_page_runs_against_the_mock(page, mock_server_factory, tmp_path):
    found = commands(page)
    assert found and found[0][0] == "poolbench-locust", f"{page} opens with no poolbench-locust command"
    mocks: dict[str, str] = {}
    for argv in found:
        for folder in {Path(a).parent for a in argv if "/" in a and not a.startswith(("http", "locustfiles"))}:
            (tmp_path / folder).mkdir(parents=True, exist_ok=True)  # results/, baseline/: a user's mkdir -p
        done = subprocess.run(
            as_run(argv, mock_server_factory, mocks), cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT_S
        )
        said = f"{shlex.join(argv)}\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
        if argv[0] == "poolbench-compare":
            assert done.returncode in (0, 1) and "== Aggregated" in done.stdout, said  # 1: a regression found
            assert (tmp_path / argv[argv.index("--html") + 1]).is_file(), said
        elif "--find-capacity" in argv:
            assert done.returncode in (0, 3) and "Capacity" in done.stderr, said  # 3: no capacity claimed
        elif any(a.startswith("--check-") for a in argv):
            assert done.returncode == 0 or (done.returncode == 3 and "Check failed" in done.stderr), said
        else:
            assert done.returncode == 0, said
        assert "Pooling statistics" in done.stderr or argv[0] == "poolbench-compare", said
        for option in ("--csv", "--json-result"):
            if option in argv:
                written = argv[argv.index(option) + 1]
                assert list(tmp_path.glob(written + "*")), f"{said}\nno {written}"


def test_the_kubernetes_page_applies_overlays_that_exist():
    text = (DOCS / "kubernetes.md").read_text(encoding="utf-8")
    applied = re.findall(r"kubectl (?:apply|delete) -k ([^\s`]+)", text)
    assert "k8s/overlays/headless" in applied
    for path in applied:
        assert (ROOT / path / "kustomization.yaml").is_file(), path
    assert text.index("kubectl apply -k k8s/overlays/headless") < text.index("## ")  # the page opens with it
