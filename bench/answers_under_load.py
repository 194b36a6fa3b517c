"""Are the answers right under load? The real vLLM (CPU) and Infinity, each answering the same texts alone
and under load, compared by poolbench-locust's answer consistency check (docs/answers-under-load.md).

    python bench/answers_under_load.py [--servers vllm,infinity] [--seconds 15] [--input-lens 24,4:96]
                                       [--vllm-url URL] [--infinity-url URL]

Each server is started in turn from the real servers' venvs (devsupport/real/servers.py, built by
devsupport/real/install.sh) on a free loopback port and stopped by PID after its runs, or attached to with
--vllm-url / --infinity-url (127.0.0.1 only). Per server, after a short warm-up run, four headless runs of
--seconds each, with answer consistency on (`LOCUST_NO_CONSISTENCY=false`, `--consistency-rate 1`):

- 1 user, --batch-size 1: one request in flight, each text alone: the baseline;
- 16 users, --batch-size 1: sixteen in flight, the server batches the requests together;
- 1 user, --batch-size 32: the reference text is the first of 32 in one request;
- 16 users, --batch-size 32: both.

Every reference (the first text of each of the pool's 32 distinct requests: --consistency-inputs 32) is
answered alone before the users start; every answer to it under load is compared with that. vLLM's
/rerank and /score (all-MiniLM-L6-v2 served as a bi-encoder: the scores are the cosines of the query's and
each document's embeddings) are measured at 1 and 16 users too. The table prints each run's requests,
compared answers, identical %, cosine min and 1st percentile, largest absolute difference, and for scores
the top-1 changed share and Kendall's tau min; --json writes the rows.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

if __package__ in (None, ""):  # run as `python bench/answers_under_load.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import CHILD_ENV, PYTHON, ROOT, machine_line, run, table
from devsupport.real import servers

CONSISTENCY_ON = {"LOCUST_NO_CONSISTENCY": "false", "LOCUST_NO_PREFLIGHT": "false"}
POOL = 32
"""The distinct requests a synthetic workload prepares (workload/datasets.py): with --consistency-inputs 32
every one of them carries a reference (a texts request its first text, a rerank or score request itself),
so every answer is compared, even in a run of a few dozen batches of 32."""
STOP_TIMEOUT_S = 60.0
"""A batch of 32 texts under 16 users takes vLLM's CPU build seconds: every request sent ends, so that every
answer to a reference is compared."""
RUN_MARGIN_S = 120.0
"""What a run may take beyond its seconds and stop timeout: the start (tokenizer, pool, references)."""


@dataclass(frozen=True)
class Cell:
    """One run: a User class of a locustfile at a load, on texts of a length."""

    locustfile: str
    user_class: str
    users: int
    batch: int | None
    """--batch-size, or None for the pairs routes (a query and --documents documents)."""
    input_len: str
    """--input-len: N words, or LOW:HIGH drawn per text (texts of many lengths: a batch is padded)."""


def cells(server: str, input_lens: list[str]) -> list[Cell]:
    if server == "vllm":
        file, user = "locustfiles/embeddings.py", "EmbeddingsUser"
    else:
        file, user = "locustfiles/infinity.py", "InfinityEmbeddingsUser"
    found = [Cell(file, user, users, batch, n) for n in input_lens for batch in (1, 32) for users in (1, 16)]
    if server == "vllm":
        # At the first length only: a rerank of 8 documents of up to 96 words takes vLLM's CPU build about
        # 0.5 s alone, and the 32 references, taken one at a time before the users start, would use up the run.
        found += [Cell(f"locustfiles/{route}.py", f"{route.title()}User", users, None, input_lens[0])
                  for route in ("rerank", "score") for users in (1, 16)]  # fmt: skip
    return found


def measure(server: servers.RealServer, cell: Cell, args: argparse.Namespace, seconds: float) -> dict[str, Any]:
    """One headless run of the cell with consistency on: its JSON result."""
    shape = ["--batch-size", str(cell.batch)] if cell.batch else ["--documents", str(args.documents)]
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        cmd = [PYTHON, "-m", "locust", "-f", cell.locustfile, "--headless", "--only-summary",
               "-u", str(cell.users), "-r", str(cell.users), "-t", f"{seconds:g}s",
               "--stop-timeout", f"{STOP_TIMEOUT_S:g}", "--host", server.url, "--model", server.model,
               "--input-len", cell.input_len, *shape, "--consistency-inputs", str(POOL), "--consistency-rate", "1",
               "--json-result", str(result), cell.user_class]  # fmt: skip
        finished = run(cmd, seconds + STOP_TIMEOUT_S + RUN_MARGIN_S, {**CHILD_ENV, **CONSISTENCY_ON}, ROOT)
        if finished.returncode != 0 or not result.is_file():
            raise RuntimeError(f"locust exited {finished.returncode}: {' '.join(cmd)}\n{finished.stderr[-3000:]}")
        return json.loads(result.read_text())


def _short(value: float | None) -> float | None:
    """Three significant digits: the last-bit differences are of the order of 1e-7 (float32), 1e-13 (cosine)."""
    return None if value is None else float(f"{value:.3g}")


def _rounded(value: Any, scale: float = 1.0, digits: int = 9) -> float | None:
    return None if value is None else round(scale * float(value), digits)


def row(server: str, cell: Cell, args: argparse.Namespace, document: dict[str, Any]) -> dict[str, Any]:
    """The table's row of one run: its load, its requests, its answers' figures against their references."""
    locust = document["total"]["locust"]
    figures = (document.get("consistency") or {}).get("total") or {}
    abs_diff = figures.get("abs_diff_max")
    return {
        "server": server,
        "class": cell.user_class,
        "words": cell.input_len,
        "users": cell.users,
        "inputs": cell.batch if cell.batch else f"1+{args.documents}",
        "requests": int(locust["Request Count"]),
        "failures": int(locust["Failure Count"]),
        "compared": int(figures.get("compared") or 0),
        "identical_pct": _rounded(figures.get("identical_ratio"), 100, 2),
        "cosine_min": figures.get("cosine_min"),
        "1-cosine_min": _short(1 - figures["cosine_min"]) if figures.get("cosine_min") is not None else None,
        "cosine_p01": figures.get("cosine_p01"),
        "abs_diff_max": _short(abs_diff),
        "top1_changed_pct": _rounded(figures.get("top1_changed_ratio"), 100, 2),
        "tau_min": _rounded(figures.get("kendall_tau_min"), digits=4),
    }


def attached(name: str, url: str) -> servers.RealServer:
    """A server already running at `url` (127.0.0.1 only)."""
    if urlsplit(url).hostname not in ("127.0.0.1", "localhost"):
        raise SystemExit(f"--{name}-url: 127.0.0.1 only")
    server = servers.RealServer(name, url.rstrip("/"))
    servers.name_models(server)
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", default="vllm,infinity", help="comma-separated: vllm, infinity")
    parser.add_argument("--seconds", type=float, default=15.0, help="each run's time (10-20 s is enough)")
    parser.add_argument(
        "--input-lens",
        default="24,4:96",
        help="comma-separated --input-len values (words a text: "
        "N, or LOW:HIGH drawn per text); each load is run with each",
    )
    parser.add_argument("--documents", type=int, default=8, help="documents a rerank or score request")
    parser.add_argument("--vllm-url", help="a running vLLM on 127.0.0.1 serving the model as `minilm`")
    parser.add_argument("--infinity-url", help="a running Infinity on 127.0.0.1")
    parser.add_argument("--json", type=Path, help="write the rows to this file")
    args = parser.parse_args()
    names = [n.strip() for n in args.servers.split(",") if n.strip()]
    input_lens = [n.strip() for n in args.input_lens.split(",") if n.strip()]
    if unknown := [n for n in names if n not in ("vllm", "infinity")]:
        parser.error(f"--servers: unknown {unknown} (vllm, infinity)")
    if not 1 <= args.seconds <= 600:
        parser.error("--seconds: 1 to 600")
    rows: list[dict[str, Any]] = []
    for name in names:  # one at a time: the servers share the machine's cores with the client
        if url := getattr(args, f"{name}_url"):
            server = attached(name, url)
        else:
            servers.install(name)
            server = servers.start(name)
            print(f"{name} ready at {server.url} in {server.ready_s:.0f} s", flush=True)
        try:
            measure(server, cells(name, input_lens[:1])[1], args, 5)  # warm-up (16 users, batch 1), not counted
            for cell in cells(name, input_lens):
                rows.append(row(name, cell, args, measure(server, cell, args, args.seconds)))
                print(json.dumps(rows[-1]), flush=True)
        finally:
            server.stop()  # only a server this script started: an attached one has no process here
    headers = list(rows[0]) if rows else []
    print()
    print(table(headers, [["" if r[h] is None else r[h] for h in headers] for r in rows]))
    print(machine_line())
    if args.json:
        args.json.write_text(json.dumps({"machine": machine_line(), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
