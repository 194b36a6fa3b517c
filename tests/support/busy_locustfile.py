"""EmbeddingsUser in a process kept busy: OS threads that hash a buffer without pause from the start of
the test. hashlib lets go of the GIL on large buffers, so each thread takes a core's worth where it can,
and several threads keep the process above 90 % of a core on a machine that others share too. (Locust
patches `threading` into greenlets, which would block the run instead: the threads are the OS's own.)"""

import hashlib
from typing import Any

from gevent.monkey import get_original
from locust import events

from poolbench_locust import EmbeddingsUser  # noqa: F401  (Locust runs the User classes it finds here)

BUSY_THREADS = 6
BUFFER = b"x" * (1 << 20)
start_thread = get_original("_thread", "start_new_thread")
running = [False]


def _spin() -> None:
    while running[0]:
        hashlib.sha256(BUFFER).digest()


@events.test_start.add_listener
def _busy(**_: Any) -> None:
    running[0] = True
    for _ in range(BUSY_THREADS):
        start_thread(_spin, ())


@events.test_stop.add_listener
def _rest(**_: Any) -> None:
    running[0] = False
