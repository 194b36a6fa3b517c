"""EmbeddingsUser, and every request's own response_time written to RECORD_DIR/<pid>.json at quit:
the exact times the pooling table's figures are checked against (tests/test_precision.py)."""

import json
import os
from pathlib import Path
from typing import Any

from locust import events

from poolbench_locust import EmbeddingsUser  # noqa: F401  (Locust runs the User classes it finds here)

times_ms: list[float] = []


@events.request.add_listener
def record(response_time: float, **_: Any) -> None:
    times_ms.append(response_time)


@events.quitting.add_listener
def write(**_: Any) -> None:
    Path(os.environ["RECORD_DIR"], f"{os.getpid()}.json").write_text(json.dumps(times_ms))
