"""A free TCP port on 127.0.0.1, for a server, a browser or a Locust master a test or a benchmark starts.

Not one the kernel hands out. A port that bind(0) chose and a probe then closed is the kernel's to give again
(to the next bind(0), or as the source port of an outgoing connection: the suite opens thousands a minute)
before the process it was meant for binds it, a second later; a Locust master given such a port then fails
to bind, or a worker an earlier run left behind joins it. These ports lie below the kernel's ephemeral range
(net.ipv4.ip_local_port_range), in blocks of BLOCK: a process takes a block by an exclusive flock on a file
of its own (held while it lives, let go by the kernel when it ends, however it ends), so no two processes
give the same port, and each port is checked free by a bind before it is given.
"""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

LOWEST = 10000
"""Below it lie the well-known and many registered ports a developer's machine may have servers on."""
BLOCK = 100
LOCKS = Path(tempfile.gettempdir()) / "poolbench-ports"


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


class _Blocks:
    """The blocks this process holds (their locks' files stay open), and the ports not yet given."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.held: list[int] = []  # open lock files' descriptors
        self.ports: Iterator[int] = iter(())

    def take(self) -> None:
        LOCKS.mkdir(exist_ok=True)
        for start in range(LOWEST, _ephemeral_start() - BLOCK + 1, BLOCK):
            fd = os.open(LOCKS / f"{start}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.held.append(fd)
            self.ports = iter(range(start, start + BLOCK))
            return
        raise RuntimeError(f"no free block of {BLOCK} ports below {_ephemeral_start()}: {LOCKS} is full")


_blocks: _Blocks | None = None


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port nothing listens on or connects from, given once by this process and by no other."""
    global _blocks
    if _blocks is None or _blocks.pid != os.getpid():  # a forked child holds none of its parent's blocks
        _blocks = _Blocks()
    while True:
        for port in _blocks.ports:
            if _free(port):
                return port
        _blocks.take()  # the next block, or a RuntimeError when every block is some process's
