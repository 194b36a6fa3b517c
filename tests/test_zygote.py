"""The suite's zygote (tests/support/zygote.py): a process forked from it says, exits and takes signals as the same
command started afresh does, so that the tests that drive one through it test what a user's process does."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import zygote

MOCK = [sys.executable, "-m", "poolbench_locust.mockserver", "--host", "127.0.0.1", "--port", "0"]
LISTENING = b"poolbench-mock listening on "


def both(monkeypatch: pytest.MonkeyPatch, argv: list[str], **kwargs: object) -> tuple[object, object]:
    """`argv` forked from the zygote, and started afresh (POOLBENCH_TESTS_FORK=0)."""
    forked = zygote.popen(argv, **kwargs)  # type: ignore[arg-type]
    with monkeypatch.context() as patch:
        patch.setenv(zygote.SWITCH, "0")
        fresh = zygote.popen(argv, **kwargs)  # type: ignore[arg-type]
    assert isinstance(forked, zygote.Forked) and isinstance(fresh, subprocess.Popen)
    return forked, fresh


def test_a_forked_run_says_and_exits_as_a_fresh_one(monkeypatch, tmp_path):
    argv = [sys.executable, "-m", "locust", "-f", "locustfiles/embeddings.py", "--no-such-option"]
    forked, fresh = both(monkeypatch, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said = [p.communicate(timeout=60) for p in (forked, fresh)]  # type: ignore[attr-defined]
    assert said[0] == said[1] and "--no-such-option" in said[0][1]
    assert forked.returncode == fresh.returncode == 2  # type: ignore[attr-defined]
    # The environment and the output file are the test's.
    out = tmp_path / "out"
    with out.open("wb") as f:
        code = zygote.popen(
            [sys.executable, "-m", "locust", "--version"], stdout=f, stderr=subprocess.STDOUT, env={**os.environ}
        ).wait(60)
    assert code == 0 and out.read_bytes().startswith(b"locust ")


@pytest.mark.parametrize("how", ["terminate", "kill"])
def test_a_forked_server_runs_until_signalled_and_ends_as_a_fresh_one(monkeypatch, how):
    forked, fresh = both(monkeypatch, MOCK, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    codes = []
    for proc in (forked, fresh):
        line = proc.stdout.readline()  # type: ignore[attr-defined]
        assert line.startswith(LISTENING), line
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(0.3)  # type: ignore[attr-defined]
        assert proc.poll() is None  # type: ignore[attr-defined]
        getattr(proc, how)()
        codes.append(proc.wait(30))  # type: ignore[attr-defined]
        proc.stdout.close()  # type: ignore[attr-defined]
    assert codes[0] == codes[1] == (0 if how == "terminate" else -9)
    forked.kill()  # type: ignore[attr-defined]  (after its end: reaches no process, raises nothing)
    assert forked.poll() == codes[0]  # type: ignore[attr-defined]


def test_what_a_fork_cannot_give_starts_afresh():
    assert zygote.forkable(MOCK, zygote.ROOT, os.environ)
    assert not zygote.forkable(MOCK, "/", os.environ), "another working directory"
    assert not zygote.forkable(MOCK, zygote.ROOT, {**os.environ, "PYTHONHASHSEED": "7"}), "read at import"
    assert not zygote.forkable([sys.executable, "-m", "pip", "--version"], zygote.ROOT, os.environ)
    assert not zygote.forkable(["locust", "--version"], zygote.ROOT, os.environ), "the console script"
