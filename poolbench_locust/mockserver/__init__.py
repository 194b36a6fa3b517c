"""A mock pooling server (vLLM, Infinity, TEI wire formats) with fault injection, for tests and demos.

In-process: `MockServer(MockConfig(...), host="127.0.0.1", port=0).start()` serves in the current
gevent hub; as a process: `python -m poolbench_locust.mockserver --port 0` (see `__main__`).
"""

from poolbench_locust.mockserver.config import MockConfig
from poolbench_locust.mockserver.faults import FAULTS
from poolbench_locust.mockserver.server import MockServer

__all__ = ["FAULTS", "MockConfig", "MockServer"]
