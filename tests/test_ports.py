"""devsupport/ports.py: the ports tests give their servers and Locust masters are no other process's, and
never ones the kernel may hand out meanwhile (below its ephemeral range)."""

from __future__ import annotations

import socket
import subprocess
import sys

from devsupport import ports
from tests.support.locust_run import ROOT

TAKE = (
    "from devsupport.ports import free_port; import sys, time; "
    "print(*[free_port() for _ in range(150)], flush=True); time.sleep(2)"  # alive while the others take theirs
)


def test_a_port_is_below_the_kernels_range_and_free():
    port = ports.free_port()
    assert ports.LOWEST <= port < ports._ephemeral_start()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # nobody holds it


def test_processes_never_get_the_same_port_together_or_one_after_another():
    """Three processes at once, and this one before and after: no port twice. A process that starts later does
    not start over (a worker left behind by an earlier run would join a master given its old port)."""
    before = {ports.free_port() for _ in range(5)}
    takers = [
        subprocess.Popen([sys.executable, "-c", TAKE], cwd=ROOT, stdout=subprocess.PIPE, text=True) for _ in range(3)
    ]
    given = [set(map(int, p.stdout.readline().split())) for p in takers if p.stdout is not None]
    for p in takers:
        p.wait(timeout=30)
    after = {ports.free_port() for _ in range(5)}
    everyone = [before, *given, after]
    assert [len(g) for g in everyone] == [5, 150, 150, 150, 5]
    assert sum(map(len, everyone)) == len(set().union(*everyone))


def test_a_port_someone_listens_on_is_skipped():
    port = ports.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port + 1))
        s.listen()
        assert ports.free_port() not in (port, port + 1)
