"""Where the suite's time goes: each test's wall time against the CPU it and its child processes used.

    make test-times                      # the suite as `make test` runs it, then the table below
    python -m devsupport.test_times DIR  # the table again from the records of an earlier run

As a pytest plugin (`-p devsupport.test_times` or PYTEST_PLUGINS=devsupport.test_times, with
POOLBENCH_TEST_TIMES=DIR) it writes one JSON line per
test (setup, call and teardown together) to DIR/<worker>.jsonl; under pytest-xdist each worker writes its own
file. A test whose wall time is far above its CPU time waits (on a run length, a server, a timeout): such
tests overlap well in parallel. CPU counts this process and the children it has waited for (a Locust run,
a mock server stopped at the end of a module: that one is billed to the module's last test).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ENV = "POOLBENCH_TEST_TIMES"


def _cpu_s() -> float:
    self_, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    # The Locust runs forked by the suite's zygote (tests/support/zygote.py) are its children, not this
    # process's: it reports their CPU.
    zygote = sys.modules.get("tests.support.zygote")
    forked = zygote.children_cpu_s() if zygote is not None else 0.0
    return self_.ru_utime + self_.ru_stime + children.ru_utime + children.ru_stime + forked


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    folder = os.environ.get(ENV)
    wall0, cpu0 = time.monotonic(), _cpu_s()
    yield
    if not folder:
        return
    record = {
        "test": item.nodeid,
        "wall_s": round(time.monotonic() - wall0, 3),
        "cpu_s": round(_cpu_s() - cpu0, 3),
        "ended": round(time.time(), 3),  # when, across workers: which tests a part's last seconds waited on
    }
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(Path(folder) / f"{worker}.jsonl", "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


def read(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(folder.glob("*.jsonl")) for line in path.read_text().splitlines()]


def table(records: list[dict[str, Any]], rows: int = 25) -> str:
    """Per module, longest wall time first: tests, wall, CPU, and the share of the wall spent waiting."""
    modules: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for record in records:
        module = modules[record["test"].split("::", 1)[0]]
        module[0] += 1
        module[1] += record["wall_s"]
        module[2] += record["cpu_s"]
    total_wall = sum(m[1] for m in modules.values())
    total_cpu = sum(m[2] for m in modules.values())
    lines = ["| module | tests | wall s | CPU s | waiting |", "| --- | ---: | ---: | ---: | ---: |"]
    ranked = sorted(modules.items(), key=lambda kv: -kv[1][1])
    for name, (count, wall, cpu) in ranked[:rows]:
        lines.append(f"| {name} | {int(count)} | {wall:.0f} | {cpu:.0f} | {_waiting(wall, cpu)} |")
    rest = ranked[rows:]
    if rest:
        count, wall, cpu = (sum(m[i] for _, m in rest) for i in range(3))
        lines.append(f"| {len(rest)} other modules | {int(count)} | {wall:.0f} | {cpu:.0f} | {_waiting(wall, cpu)} |")
    lines.append(f"| all | {len(records)} | {total_wall:.0f} | {total_cpu:.0f} | {_waiting(total_wall, total_cpu)} |")
    return "\n".join(lines)


def _waiting(wall: float, cpu: float) -> str:
    # The share of a test's wall time in which it (and its children) used no CPU: time that other tests can
    # use when they run beside it.
    return f"{max(0.0, 1 - cpu / wall):.0%}" if wall > 0 else "-"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    records = read(Path(argv[0]))
    if not records:
        print(f"no records in {argv[0]}", file=sys.stderr)
        return 1
    print(table(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
