"""The conformance table: each cell of tests/real/test_real_conformance.py adds its row, conftest.py prints them.

A module of its own, imported by the same name from both (pytest imports the test module by another).
"""

from __future__ import annotations

RESULTS: list[dict[str, object]] = []


def lines() -> list[str]:
    """The conformance table of the cells that ran: class x encoding, requests, failures, tokens both ways."""
    if not RESULTS:
        return []
    out: list[str] = [""]
    write = out.append
    write(
        "Conformance (client: poolbench-locust's Pooling CSV; server: vLLM's /metrics delta, Infinity's usage; "
        "Triton and KServe count none)"
    )
    write(f"{'server':9} {'cell':44} {'requests':>8} {'failures':>8} {'client tok':>10} {'server tok':>10} "
          f"{'source':16} {'bytes':>9} {'E2E ms':>7} {'server ms':>9}")  # fmt: skip
    for row in RESULTS:
        if "stopped" in row:
            write(f"{row['server']:9} {row['cell']:44} stopped at start with the server's message: {row['stopped']}")
            continue
        server_ms = row.get("server_mean_ms")
        write(f"{row['server']:9} {row['cell']:44} {row['requests']:>8} {row['failures']:>8} "
              f"{row['client_tokens']:>10} {row['server_tokens']:>10} {row['token_source']:16} {row['bytes']:>9} "
              f"{row['client_mean_ms']:>7} {'' if server_ms is None else server_ms:>9}")  # fmt: skip
    return out
