"""A free TCP port on 127.0.0.1, for a server, a browser or a Locust master a test or a benchmark starts.

Not one the kernel hands out. A port that bind(0) chose and a probe then closed is the kernel's to give again
(to the next bind(0), or as the source port of an outgoing connection: the suite opens thousands a minute)
before the process it was meant for binds it, a second later; a Locust master given such a port then fails
to bind. These ports lie below the kernel's ephemeral range (net.ipv4.ip_local_port_range), given in turn
from one cursor that every process shares (a file, read and advanced under an flock), so no port is given
twice until the cursor has gone round the 22,000 or so: never to two runs of one session, nor to the next
session's, where a Locust worker an earlier test left behind (it waits a minute for a master that is gone)
would join a new master on its old port. Each port is checked free by a bind before it is given.
"""

from __future__ import annotations

import fcntl
import socket
import tempfile
from pathlib import Path

LOWEST = 10000
"""Below it lie the well-known and many registered ports a developer's machine may have servers on."""
CURSOR = Path(tempfile.gettempdir()) / "poolbench-ports.next"


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port nothing listens on or connects from, given once (until the cursor comes round) by any process."""
    top = _ephemeral_start()
    with CURSOR.open("a+") as cursor:
        fcntl.flock(cursor, fcntl.LOCK_EX)  # let go when the file closes
        cursor.seek(0)
        text = cursor.read().strip()
        port = int(text) if text.isdigit() and LOWEST <= int(text) < top else LOWEST
        for _ in range(top - LOWEST):
            given, port = port, (port + 1 if port + 1 < top else LOWEST)
            if _free(given):
                cursor.seek(0)
                cursor.truncate()
                cursor.write(str(port))
                return given
    raise RuntimeError(f"no free port from {LOWEST} to {top}")
