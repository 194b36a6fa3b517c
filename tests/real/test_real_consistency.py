"""Answer consistency against the real vLLM (CPU) and Infinity (marker `real`): at 16 users and batches of 32,
every answer to a reference text is compared with that text answered alone, and the figures say what the
servers really do (docs/answers-under-load.md, where bench/answers_under_load.py measures the four loads).

The `vllm_server` and `infinity_server` fixtures (tests/real/conftest.py, session-scoped: one start each
for the whole session, or the servers `make test-real` started) serve all-MiniLM-L6-v2 on 127.0.0.1.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from devsupport.real import servers
from tests.support.locust_run import CONSISTENCY_ON, PREFLIGHT_ON, run_locust

pytestmark = [pytest.mark.real, pytest.mark.timeout(servers.READY_TIMEOUT_S + 300)]
AFTER_STARTS = True
"""16 users of batches of 32 keep the server busy for a minute: beside servers' starts (and a loaded machine) its
answers took up to 60 s, and some were cut (tests/real/conftest.py runs this module after every start ended)."""

LOCUSTFILE = str(Path(__file__).with_name("all_users.py"))
POOL = 32
"""The distinct requests a synthetic workload prepares (workload/datasets.py's size_hint): with
--consistency-inputs 32 each of them carries a reference text (its first), so every answer is compared."""
RUN_S = 15
STOP_TIMEOUT_S = 60
"""A batch of 32 under 16 users takes vLLM's CPU build seconds on a loaded machine: every request sent ends."""
WORDS = "4:96"
"""Texts of 4 to 96 words: a batch of them is padded to its longest, as real traffic is (texts of one length,
the default, are padded alike alone and in a batch: Infinity's answers were then identical too)."""
FIGURES = ("compared", "identical_ratio", "cosine_min", "cosine_p01", "abs_diff_max")


def _under_load(server: Any, user_class: str, tmp_path: Path) -> tuple[dict[str, Any], int, str]:
    """A run of 16 users, batches of 32 texts of 4 to 96 words, consistency on: its JSON result's `consistency`,
    its request count, and its console output."""
    document = tmp_path / "result.json"
    result = run_locust(
        LOCUSTFILE,
        *(user_class, "--model", server.model, "--input-len", WORDS, "--batch-size", "32"),
        *("--consistency-inputs", str(POOL), "--consistency-rate", "1", "--stop-timeout", str(STOP_TIMEOUT_S)),
        users=16,
        run_time=f"{RUN_S}s",
        host=server.url,
        json_result=document,
        env={**CONSISTENCY_ON, **PREFLIGHT_ON},
        timeout=RUN_S + STOP_TIMEOUT_S + 60,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    doc = result.json()
    requests = int(doc["total"]["locust"]["Request Count"])
    assert requests > 0 and int(doc["total"]["locust"]["Failure Count"]) == 0, doc["total"]["locust"]
    return doc["consistency"], requests, result.stdout + result.stderr


def _checked(consistency: dict[str, Any], requests: int, console: str, name: str) -> dict[str, Any]:
    """The total's figures, after the checks every server's run must pass: one name and the total, every
    answer compared, each figure in its range, the console's table saying the same."""
    assert consistency is not None, "nothing was compared"
    assert set(consistency) == {name, "total"}, consistency
    total = consistency["total"]
    assert consistency[name] == total
    assert set(total) == set(FIGURES), total  # embeddings: no rerank or label figure
    # Every request carries a reference (POOL): a comparison lost on the way would show here.
    assert total["compared"] == requests, (total, requests)
    assert 0.0 <= total["identical_ratio"] <= 1.0
    assert -1.0 <= total["cosine_min"] <= total["cosine_p01"] <= 1.0
    assert total["abs_diff_max"] >= 0.0
    # The console's table: its title, then a row of the name and one of the total with the same count.
    title = console.index("Answer consistency (answers under load against their reference alone")
    table = console[title:].split("\n\n", 1)[0]
    for row in (name, "total"):
        assert re.search(rf"^{re.escape(row)}\s+{total['compared']:,}\s+\d\.\d{{6}}\s", table, re.M), table
    return total


def test_vllm_answers_a_text_in_a_batch_of_32_under_16_users_as_alone_bit_for_bit(
    vllm_server: Any, tmp_path: Path
) -> None:
    """vLLM 0.32's CPU build answers each text the same bits alone and in a batch of 32 texts of many lengths
    among 16 in flight (bench/answers_under_load.py: 100 % identical at every load, without
    VLLM_BATCH_INVARIANT): any difference at all is a change in the server, or in how the answers are read
    and compared."""
    consistency, requests, console = _under_load(vllm_server, "EmbeddingsUser", tmp_path)
    total = _checked(consistency, requests, console, "/v1/embeddings")
    assert total["identical_ratio"] == 1.0, total
    assert total["cosine_min"] == 1.0 and total["abs_diff_max"] == 0.0, total


def test_infinity_answers_a_text_in_a_padded_batch_in_its_last_bits_only(infinity_server: Any, tmp_path: Path) -> None:
    """Infinity 0.0.78 (torch, CPU) pads a batch to its longest text: a text answered among longer ones moves
    in its float32 last bits (bench/answers_under_load.py: 33 to 51 % identical under batching, the largest
    difference 1.2e-7 to 1.6e-7, 1 - cosine about 3e-13). Not identical, and never more than rounding: were
    the check blind to differences (every answer identical) or to their size, this would fail."""
    consistency, requests, console = _under_load(infinity_server, "InfinityEmbeddingsUser", tmp_path)
    total = _checked(consistency, requests, console, "/embeddings")
    assert total["identical_ratio"] < 1.0, total
    assert 0.0 < total["abs_diff_max"] < 1e-5, total
    assert 0.999999 < total["cosine_min"] <= 1.0, total
