"""One conformance cell's run, as a user would start it against a real server (tests/real): a short headless
Locust run of one user of one class, bounded by a request count and a time, its CSVs read back."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from devsupport.real.servers import RealServer
from tests.support.locust_run import ROOT, run_locust

LOCUSTFILE = str(ROOT / "tests" / "real" / "all_users.py")
CELL_REQUESTS = 20
"""Each cell's run ends at this many requests (--max-requests): what the cell checks is counts and agreement."""
RUN_S = 30
"""...and within this many seconds whatever the server's speed (a cell's own -t, given after, wins)."""


@dataclass
class Outcome:
    code: int
    log: str
    stats: dict[str, str]
    pooling: dict[str, str]
    failures: list[dict[str, str]]

    @property
    def requests(self) -> int:
        return int(self.stats.get("Request Count", 0))

    @property
    def failed(self) -> int:
        return int(self.stats.get("Failure Count", -1))

    def row(self, server: str, cell: str, user_class: str, **figures: object) -> dict[str, object]:
        """The cell's line of the real servers' table (tests/real/table.py): its counts, the tokens as the
        pooling table gave them (the client's; `figures` adds or overrides: the server's count, the model)."""
        return {
            "server": server, "cell": cell, "class": user_class, "requests": self.requests, "failures": self.failed,
            "client_tokens": int(self.pooling.get("Input Tokens", -1)), "server_tokens": "-",
            "token_source": self.pooling.get("Token Source", ""), "bytes": int(self.pooling.get("Bytes", 0)),
            "client_mean_ms": round(float(self.stats.get("Average Response Time", 0)), 1), **figures,
        }  # fmt: skip


def _aggregated(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    with path.open() as f:
        return next((row for row in csv.DictReader(f) if row["Name"] == "Aggregated"), {})


def headless(server: RealServer, user_class: str, *args: str, tmp: Path, preflight: bool = False) -> Outcome:
    """A run of USER_CLASS against SERVER (its first model, unless ARGS name another with --model)."""
    prefix = tmp / user_class
    done = run_locust(
        LOCUSTFILE,
        *(user_class, "--model", server.model, "--stop-timeout", "10", "--only-summary"),
        *("--max-requests", str(CELL_REQUESTS), *args),
        users=1,
        run_time=f"{RUN_S}s",
        host=server.url,
        csv=prefix,
        env={"LOCUST_NO_PREFLIGHT": "false" if preflight else "true"},
        timeout=RUN_S + 60,
    )
    failures_path = Path(f"{prefix}_failures.csv")
    failures = list(csv.DictReader(failures_path.open())) if failures_path.is_file() else []
    return Outcome(done.returncode, done.stdout + done.stderr, _aggregated(Path(f"{prefix}_stats.csv")),
                   _aggregated(Path(f"{prefix}_pooling.csv")), failures)  # fmt: skip
