"""Reference inputs put into a workload whose inputs do not recur (docs/consistency.md, "Workloads whose inputs
do not recur"; workload/injected_references.py): a trace, a large dataset. A share of the pool's requests,
spread evenly and drawn from --seed, carries a reference input in place of one of its own of the same token
length; every other request is sent as it was, and the workload's counts stay what they were. A trace replayed
against the bundled mock is compared, finds its drift, and sends the trace's own tokens."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

import poolbench_locust as pb
from poolbench_locust.engine.plan import Plan, plan_for
from poolbench_locust.workload.injected_references import RECURRING_MOST, marked_share
from tests.support.harness import options
from tests.support.locust_run import CONSISTENCY_ON, run_locust

DRIFTED_COSINE = 1891 / 2080
"""The mock's drifted vector against the honest one (docs/mock-server.md)."""
LINES = 400
SPAN_MS = 4000
TRACE: list[dict[str, Any]] = [
    {"timestamp": i * SPAN_MS // LINES, "input_length": (3, 5, 8)[i % 3], "batch_size": 1 + i % 2} for i in range(LINES)
]
"""100 requests a second for 4 s, of three lengths (words: the mock counts them so) and batches of 1 and 2."""
TRACE_TOKENS = sum(line["input_length"] * line["batch_size"] for line in TRACE)


@pytest.fixture(autouse=True)
def _consistency_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite turns the check off (tests/conftest.py); here it is on, as by default."""
    monkeypatch.setenv("LOCUST_NO_CONSISTENCY", "false")


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def _plan(user_class: type, *args: str) -> Plan:
    """A plan built anew (a User class of its own: no cached plan)."""
    return plan_for(type(user_class.__name__, (user_class,), {}), options(*args))


def _carriers(plan: Plan) -> list[int]:
    return [i for i, r in enumerate(plan.requests) if r.refs]


def _same_workload(plan: Plan, plain: Plan) -> None:
    """The requests that carry no reference are the plain plan's, byte for byte; every request keeps its
    inputs' count and tokens."""
    assert len(plan.requests) == len(plain.requests)
    for marked, own in zip(plan.requests, plain.requests, strict=True):
        if not marked.refs:
            assert marked == own
        assert (marked.sequences, marked.client_tokens, marked.expected_items) == (
            own.sequences,
            own.client_tokens,
            own.expected_items,
        )


def _texts_carry_their_reference(plan: Plan) -> None:
    for request in (plan.requests[i] for i in _carriers(plan)):
        ((position, ref_id),) = request.refs
        (text,) = orjson.loads(plan.references[ref_id].body)["input"]
        assert orjson.loads(request.body)["input"][position] == text
        assert plan.reference_inputs[ref_id] == text


def test_a_trace_carries_references_in_place_of_inputs_of_the_same_length(tmp_path):
    trace = _write(tmp_path / "trace.jsonl", TRACE)
    plan = _plan(pb.EmbeddingsUser, "--dataset", f"trace:{trace}")
    plain = _plan(pb.EmbeddingsUser, "--dataset", f"trace:{trace}", "--no-consistency")
    _same_workload(plan, plain)
    _texts_carry_their_reference(plan)
    assert sum(r.client_tokens for r in plan.requests) == TRACE_TOKENS
    # every length of the trace is a reference's, then more texts of them, up to --consistency-inputs
    assert len(plan.references) == 8
    assert {r.client_tokens for r in plan.references} == {3, 5, 8}
    assert len(set(plan.reference_inputs)) == 8
    carriers = _carriers(plan)
    # 1.5 inputs a request, 100 requests a second: 2 x 1 % x 1.5 = 3 % of the requests (above 2 a second)
    share = marked_share(plan.settings, False, 1.5, LINES / (TRACE[-1]["timestamp"] / 1000))
    assert share == pytest.approx(0.03, abs=0.001)
    assert abs(len(carriers) - share * LINES) <= 2, len(carriers)
    assert len(carriers) / (SPAN_MS / 1000) >= 1  # at least one a second to compare
    gaps = [b - a for a, b in itertools.pairwise(carriers)]
    assert max(gaps) <= 1 / share + 2, gaps  # spread evenly, not bunched at the start


def test_the_marks_are_deterministic_with_the_seed(tmp_path):
    trace = _write(tmp_path / "trace.jsonl", TRACE)
    first = _plan(pb.EmbeddingsUser, "--dataset", f"trace:{trace}", "--seed", "7")
    again = _plan(pb.EmbeddingsUser, "--dataset", f"trace:{trace}", "--seed", "7")
    other = _plan(pb.EmbeddingsUser, "--dataset", f"trace:{trace}", "--seed", "8")
    assert first.requests == again.requests and first.references == again.references
    assert _carriers(first) != _carriers(other)
    assert abs(len(_carriers(first)) - len(_carriers(other))) <= 1


def test_consistency_rate_sets_the_share_and_a_slow_trace_gets_one_a_second(tmp_path):
    trace = _write(tmp_path / "trace.jsonl", TRACE)
    tenth = _plan(pb.EmbeddingsUser, "--dataset", f"trace:{trace}", "--consistency-rate", "0.1")
    assert abs(len(_carriers(tenth)) - 0.3 * LINES) <= 2  # 2 x 10 % x 1.5 inputs a request
    # 2 requests a second: one a second asks for every other request, capped at 10 % of them
    slow = _write(tmp_path / "slow.jsonl", [{**line, "timestamp": i * 500} for i, line in enumerate(TRACE)])
    plan = _plan(pb.EmbeddingsUser, "--dataset", f"trace:{slow}")
    assert abs(len(_carriers(plan)) - 0.1 * LINES) <= 2
    every = _plan(pb.EmbeddingsUser, "--dataset", f"trace:{trace}", "--consistency-rate", "1")
    assert len(_carriers(every)) == LINES
    _same_workload(every, _plan(pb.EmbeddingsUser, "--dataset", f"trace:{trace}", "--no-consistency"))


def test_a_large_dataset_carries_references_a_small_one_recurs(tmp_path):
    records = [{"text": " ".join(["word"] * (2 + i % 8) + [f"record{i}"])} for i in range(3000)]
    large = _write(tmp_path / "large.jsonl", records)
    plan = _plan(pb.EmbeddingsUser, "--dataset", f"file:{large}")
    plain = _plan(pb.EmbeddingsUser, "--dataset", f"file:{large}", "--no-consistency")
    assert len(plan.requests) == 3000 > RECURRING_MOST
    _same_workload(plan, plain)
    _texts_carry_their_reference(plan)
    assert {r.client_tokens for r in plan.references} == set(range(3, 11))  # each of the 8 lengths
    # a closed loop: 50 requests a second assumed, two a second of them = 4 % (above 2 x 1 %)
    carriers = _carriers(plan)
    assert abs(len(carriers) - 0.04 * 3000) <= 2, len(carriers)
    assert carriers == _carriers(_plan(pb.EmbeddingsUser, "--dataset", f"file:{large}"))
    assert carriers[0] < 50 and carriers[-1] > 2950
    # a pool the users go round: its first distinct requests carry the references, as before
    small = _write(tmp_path / "small.jsonl", records[:200])
    recurring = _plan(pb.EmbeddingsUser, "--dataset", f"file:{small}")
    assert [recurring.requests[i].refs for i in range(8)] == [((0, i),) for i in range(8)]
    assert len(_carriers(recurring)) == 8


def test_more_lengths_than_references_take_the_closest(tmp_path):
    records = [{"text": " ".join(["w"] * (1 + i % 40) + [f"r{i}"])} for i in range(1000)]
    large = _write(tmp_path / "lengths.jsonl", records)
    plan = _plan(pb.EmbeddingsUser, "--dataset", f"file:{large}", "--consistency-inputs", "4")
    plain = _plan(pb.EmbeddingsUser, "--dataset", f"file:{large}", "--consistency-inputs", "4", "--no-consistency")
    _texts_carry_their_reference(plan)
    lengths = sorted(r.client_tokens for r in plan.references)
    assert len(lengths) == 4 and lengths[0] < 12 and lengths[-1] > 30  # spread over the lengths
    for marked, own in zip(plan.requests, plain.requests, strict=True):
        assert marked.sequences == own.sequences
        if marked.refs:  # counted as sent: the reference's length, the closest to the input it replaced
            assert marked.client_tokens == plan.references[marked.refs[0][1]].client_tokens
            assert min(abs(own.client_tokens - n) for n in lengths) == abs(own.client_tokens - marked.client_tokens)
        else:
            assert marked == own


def test_a_large_rerank_dataset_carries_whole_reference_requests(tmp_path):
    records = [
        {
            "query": f"query {i} " + "q " * (i % 5),
            "documents": [f"document {i} {d} " + "d " * d for d in range(2 + i % 3)],
        }
        for i in range(2000)
    ]
    large = _write(tmp_path / "rerank.jsonl", records)
    plan = _plan(pb.RerankUser, "--dataset", f"file:{large}")
    plain = _plan(pb.RerankUser, "--dataset", f"file:{large}", "--no-consistency")
    carriers = _carriers(plan)
    assert abs(len(carriers) - 0.04 * 2000) <= 2, len(carriers)
    assert len(plan.references) == 8
    for index in carriers:
        ((position, ref_id),) = plan.requests[index].refs
        assert position == -1
        reference = plan.references[ref_id]
        assert plan.requests[index].body == reference.body and not reference.refs
        assert reference.sequences == plain.requests[index].sequences  # as many documents
        body = orjson.loads(reference.body)
        assert plan.reference_inputs[ref_id] == {"query": body["query"], "documents": body["documents"]}
    for marked, own in zip(plan.requests, plain.requests, strict=True):
        if not marked.refs:
            assert marked == own


def _replay(url: str, trace: Path, tmp_path: Path, *args: str) -> dict[str, Any]:
    result = run_locust(
        "locustfiles/embeddings.py",
        *("--no-preflight", "--dataset", f"trace:{trace}", "--stop-timeout", "3"),
        *args,
        host=url,
        users=8,
        spawn_rate=8,
        run_time="40s",
        json_result=tmp_path / "result.json",
        env=CONSISTENCY_ON,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Trace over: the {LINES} requests of" in result.stderr, result.stderr[-2000:]
    return json.loads((tmp_path / "result.json").read_text())


def test_a_trace_replay_finds_the_drift(mock_server_factory, tmp_path):
    server = mock_server_factory("--ttfb-ms", "30", "--drift-above", "1")
    trace = _write(tmp_path / "trace.jsonl", TRACE)
    document = _replay(server.url, trace, tmp_path, "--consistency-rate", "0.1")
    total = document["consistency"]["total"]
    # more than the first 8 requests could give: 120 requests spread over the trace carry a reference
    assert total["compared"] > 8, total
    assert total["identical_ratio"] < 1.0
    assert total["cosine_min"] == pytest.approx(DRIFTED_COSINE, abs=1e-6)


def test_a_trace_replay_sends_the_trace_s_own_tokens_and_the_honest_mock_is_identical(mock_server_factory, tmp_path):
    server = mock_server_factory("--ttfb-ms", "30")
    trace = _write(tmp_path / "trace.jsonl", TRACE)
    document = _replay(server.url, trace, tmp_path)
    total = document["consistency"]["total"]
    assert total["compared"] >= SPAN_MS / 1000, total  # one a second at least, with the defaults
    assert total["identical_ratio"] == 1.0 and total["cosine_min"] == 1.0
    # the server saw the trace's requests and tokens, and the references alone (taken before the replay)
    plan = _plan(pb.EmbeddingsUser, "--dataset", f"trace:{trace}")
    served = server.stats()
    assert served["requests"] == served["ok"] == LINES + len(plan.references)
    assert served["prompt_tokens"] == TRACE_TOKENS + sum(r.client_tokens for r in plan.references)
    assert served["sequences"] == sum(line["batch_size"] for line in TRACE) + len(plan.references)
