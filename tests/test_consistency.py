"""Answers that stay right under load (docs/consistency.md): reference answers taken alone before the users
start, every answer that carries a reference input compared with it, against the bundled mock's honest,
drifting and flipping answers; and the values a reference's answer gives (engine/answer_values.py)."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path
from typing import Any

import orjson
import pytest

import poolbench_locust as pb
from devsupport.ports import free_port
from poolbench_locust.consistency.consistency_report import Consistency
from poolbench_locust.consistency.measures import compare_vectors
from poolbench_locust.consistency.state import merge_shipped
from poolbench_locust.consistency.tally import Tally
from poolbench_locust.endpoints.spec import AnswerError, data_answer, results_answer
from poolbench_locust.engine.answer_values import Values, Wanted, answer_values, vector_values
from poolbench_locust.engine.plan import Plan, plan_for
from poolbench_locust.lazyjson import loads
from poolbench_locust.options import Settings
from tests.support.harness import options
from tests.support.locust_run import CONSISTENCY_ON, run_locust, valid_result

DRIFTED_COSINE = 1891 / 2080
"""The mock's drifted vector against the honest one (docs/mock-server.md)."""
LOAD = ("--input-len", "8", "--batch-size", "2", "--documents", "4", "--stop-timeout", "3")


@pytest.fixture(autouse=True)
def _consistency_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite turns the check off (tests/conftest.py); here it is on, as by default."""
    monkeypatch.setenv("LOCUST_NO_CONSISTENCY", "false")


def _run(
    url: str, tmp_path: Path, locustfile: str, users: int, *args: str, run_time: str = "3s"
) -> tuple[Any, dict[str, Any]]:
    result = run_locust(
        locustfile,
        *LOAD,
        *args,
        host=url,
        users=users,
        spawn_rate=users,
        run_time=run_time,
        csv=tmp_path / "run",
        json_result=tmp_path / "result.json",
        env=CONSISTENCY_ON,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result, valid_result(tmp_path / "result.json")


def test_the_honest_mock_answers_the_same_under_load(mock_server_factory, tmp_path):
    server = mock_server_factory("--ttfb-ms", "20")
    html = tmp_path / "report.html"
    result, document = _run(server.url, tmp_path, "locustfiles/embeddings.py", 8, "--html", str(html))
    total = document["consistency"]["total"]
    assert total["compared"] > 0
    assert total["identical_ratio"] == 1.0
    assert total["cosine_min"] == 1.0
    assert "Answer consistency" in result.stderr
    assert (tmp_path / "run_consistency.csv").read_text().startswith("Name,compared,identical_ratio")
    assert 'id="poolbench-consistency"' in html.read_text()


def test_drifting_answers_show_their_cosine(mock_server_factory, tmp_path):
    server = mock_server_factory("--ttfb-ms", "20", "--drift-above", "2")
    _, document = _run(server.url, tmp_path, "locustfiles/embeddings.py", 8)
    total = document["consistency"]["total"]
    assert total["compared"] > 0
    assert total["identical_ratio"] < 1.0
    assert total["cosine_min"] == pytest.approx(DRIFTED_COSINE, abs=1e-6)


def test_workers_ship_their_comparisons_to_the_master(mock_server_factory, tmp_path):
    server = mock_server_factory("--ttfb-ms", "20", "--drift-above", "2")
    port = str(free_port())  # not Locust's default 5557, where another run's workers may be calling
    dist = ("--processes", "2", "--master-bind-port", port, "--master-port", port)
    _, document = _run(server.url, tmp_path, "locustfiles/embeddings.py", 8, *dist, run_time="5s")
    assert document["run"]["runner"] == "master"
    # The workers' reference requests, which the server counts, are on the client's side of the reconciliation.
    checks = {row["Check"]: row for row in document["server_metrics"]["reconciliation"]}
    assert checks["Requests"]["Flagged"] == "" and checks["Prompt Tokens"]["Flagged"] == "", checks
    total = document["consistency"]["total"]
    assert total["compared"] > 0
    assert total["cosine_min"] == pytest.approx(DRIFTED_COSINE, abs=1e-6)


def test_one_user_never_drifts(mock_server_factory, tmp_path):
    server = mock_server_factory("--ttfb-ms", "5", "--drift-above", "2")
    _, document = _run(server.url, tmp_path, "locustfiles/embeddings.py", 1, "--encoding-format", "base64")
    total = document["consistency"]["total"]
    assert total["compared"] > 0
    assert total["identical_ratio"] == 1.0


def test_flipped_rerank_answers_change_their_best_document(mock_server_factory, tmp_path):
    server = mock_server_factory("--ttfb-ms", "20", "--flip-above", "2")
    _, document = _run(server.url, tmp_path, "locustfiles/rerank.py", 8)
    total = document["consistency"]["total"]
    assert total["compared"] > 0
    assert total["top1_changed_ratio"] > 0
    assert total["kendall_tau_min"] < 1.0


def test_no_consistency_compares_nothing(mock_server_factory, tmp_path):
    server = mock_server_factory("--ttfb-ms", "20", "--drift-above", "2")
    result, document = _run(server.url, tmp_path, "locustfiles/embeddings.py", 8, "--no-consistency")
    assert document["consistency"] is None
    assert "Answer consistency" not in result.stderr
    assert not (tmp_path / "run_consistency.csv").exists()


def test_a_vector_s_values_whatever_its_json_form():
    settings = Settings()
    assert vector_values([0.5, -1, 2.0], settings) == [0.5, -1, 2.0]
    numbers = loads(b'{"data": [{"embedding": [0.25, 0.5, -0.75]}]}')["data"][0]["embedding"]
    assert list(vector_values(numbers, settings)) == [0.25, 0.5, -0.75]
    encoded = base64.b64encode(struct.pack("<3f", 0.25, 0.5, -0.75)).decode()
    assert list(vector_values(encoded, Settings(endianness="little"))) == [0.25, 0.5, -0.75]
    with pytest.raises(ValueError, match="base64"):
        vector_values("not base64!", settings)
    with pytest.raises(ValueError):
        vector_values({"a": 1}, settings)


def test_a_rerank_s_scores_come_back_in_the_documents_order():
    answer = results_answer(
        {
            "results": [
                {"index": 2, "relevance_score": 0.9},
                {"index": 0, "relevance_score": 0.5},
                {"index": 1, "relevance_score": 0.1},
            ]
        }
    )
    assert answer_values(answer, ((-1, 7),), Wanted(Settings())) == ((7, Values("scores", [0.5, 0.1, 0.9])),)
    score = data_answer(None)({"data": [{"index": 1, "score": 0.2}, {"index": 0, "score": 0.3}]})
    assert score.scores is not None and score.scores() == [0.3, 0.2]
    repeated = results_answer({"results": [{"index": 0, "relevance_score": 1}, {"index": 0, "relevance_score": 2}]})
    with pytest.raises(AnswerError, match="repeated"):
        repeated.scores()  # type: ignore[misc]
    with pytest.raises(ValueError, match="repeated"):
        answer_values(repeated, ((-1, 0),), Wanted(Settings()))


def test_an_embedding_answer_gives_each_referenced_item():
    answer = data_answer("embedding")({"data": [{"embedding": [1.0, 0.0]}, {"embedding": [0.0, 1.0]}]})
    assert answer_values(answer, ((1, 3),), Wanted(Settings())) == ((3, Values("vectors", [0.0, 1.0])),)
    with pytest.raises(ValueError, match="no vector 2"):
        answer_values(answer, ((2, 0),), Wanted(Settings()))


def _plan(user_class: type, *args: str) -> Plan:
    """A plan built anew (a User class of its own: no cached plan)."""
    return plan_for(type(user_class.__name__, (user_class,), {}), options(*args))


def test_the_plan_marks_the_pool_s_reference_inputs():
    plan = _plan(pb.EmbeddingsUser, "--batch-size", "3", "--input-len", "8", "--consistency-inputs", "5")
    assert len(plan.references) == 5
    carriers = [r for r in plan.requests if r.refs]
    assert [r.refs for r in carriers[:5]] == [((0, i),) for i in range(5)]
    for carrier in carriers:
        ((position, ref_id),) = carrier.refs
        assert position == 0
        reference = plan.references[ref_id]
        assert reference.expected_items == 1 and not reference.refs
        assert orjson.loads(reference.body)["input"] == [orjson.loads(carrier.body)["input"][0]]
    rerank = _plan(pb.RerankUser, "--documents", "3", "--input-len", "8", "--consistency-inputs", "2")
    assert [r.refs for r in rerank.requests if r.refs][:2] == [((-1, 0),), ((-1, 1),)]
    assert rerank.references[0].body == next(r.body for r in rerank.requests if r.refs)


@pytest.mark.parametrize(
    ("user_class", "args"),
    [
        (pb.EmbeddingsUser, ("--no-consistency",)),
        (pb.EmbeddingsUser, ("--consistency-inputs", "0")),
    ],
)
def test_answers_not_compared_carry_no_reference(user_class, args):
    plan = _plan(user_class, "--input-len", "8", *args)
    assert plan.references == [] and not any(r.refs for r in plan.requests)


def test_a_master_merges_good_tallies_and_refuses_a_garbled_one(caplog):
    state = Consistency()
    good = Tally()
    good.add(compare_vectors([1.0, 0.0], [1.0, 0.0]))
    good.add(compare_vectors([1.0, 0.0], [0.6, 0.8]))
    garbled = {**good.to_wire(), "identical": 5}
    merge_shipped({"/v1/embeddings": good.to_wire(), "/rerank": garbled}, state.merge, "w1", "tallies")
    merge_shipped(["not", "a", "mapping"], state.merge, "w2", "tallies")
    figures = state.figures()
    assert figures is not None and set(figures) == {"/v1/embeddings", "total"}
    assert figures["total"]["compared"] == 2 and figures["total"]["cosine_min"] == pytest.approx(0.6)
    assert "refused" in caplog.text and "no mapping" in caplog.text


def _short_run(url: str, tmp_path: Path, locustfile: str, *args: str) -> tuple[Any, dict[str, Any]]:
    """One user for a second, whatever its exit code: (the run, its JSON result)."""
    written, how = tmp_path / "r.json", {"users": 1, "run_time": "1s", "csv": tmp_path / "run"}
    result = run_locust(locustfile, *LOAD, *args, host=url, json_result=written, **how)
    return result, json.loads(written.read_text())


@pytest.mark.parametrize(("fault", "taken_before_stop"), [("status-500", 8), ("reset-before-headers", 1)])
def test_failed_references_are_not_compared(mock_server_factory, tmp_path, fault, taken_before_stop):
    """A reference that fails is not compared; after one with no answer at all the class's others are not asked."""
    server = mock_server_factory("--fault", f"{fault}=1")
    result, document = _short_run(server.url, tmp_path, "locustfiles/embeddings.py")
    assert "consistency: EmbeddingsUser: 8 of 8 reference answers not taken" in result.stderr, result.stderr[-3000:]
    assert document["consistency"] is None
    counted = int(result.csv()["Aggregated"]["Request Count"])
    assert server.stats()["requests"] == counted + taken_before_stop


def test_references_that_take_the_run_s_time_are_said(mock_server_factory, tmp_path):
    # 8 references alone at 300 ms each: 2.4 s of -t gone before the users start, said once.
    slow = mock_server_factory("--ttfb-ms", "300")
    result, _ = _run(slow.url, tmp_path, "locustfiles/embeddings.py", 1, run_time="4s")
    said = [line for line in result.stderr.splitlines() if "the reference answers took" in line]
    assert len(said) == 1, result.stderr[-3000:]
    seconds = float(said[0].split("took ")[1].split(" s")[0])
    assert 2.4 <= seconds < 10 and "--consistency-inputs 8" in said[0]
