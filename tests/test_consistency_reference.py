"""Reference answers from elsewhere (docs/consistency.md): --consistency-save writes a run's references, and
--consistency-reference compares a run's answers with a file's instead of the server's alone; a bad file stops
the run at start. And in a distributed run, the master reports where the workers' own references disagree."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from devsupport.ports import free_port
from poolbench_locust.consistency import reference_agreement, reference_file
from poolbench_locust.consistency.measures import compare_vectors
from poolbench_locust.options import OptionError
from tests.support.locust_run import CONSISTENCY_ON, run_locust, valid_result
from tests.support.process_servers import served

LOAD = ("--input-len", "8", "--batch-size", "2", "--documents", "4", "--stop-timeout", "3")
HEADER = '{"format": "poolbench-references", "version": 1}\n'


@pytest.fixture(autouse=True)
def _consistency_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite turns the check off (tests/conftest.py); here it is on, as by default."""
    monkeypatch.setenv("LOCUST_NO_CONSISTENCY", "false")


def _run(url: str, tmp_path: Path, locustfile: str, *args: str, users: int = 2, run_time: str = "5s") -> Any:
    # 5 s, not 3: on a busy machine (the floor's xdist run) a 3 s run once compared no answer at all
    result = run_locust(
        locustfile,
        *LOAD,
        *args,
        host=url,
        users=users,
        run_time=run_time,
        csv=tmp_path / "run",
        json_result=tmp_path / "result.json",
        env=CONSISTENCY_ON,
        timeout=90,
    )
    return result


def _document(result: Any) -> dict[str, Any]:
    return valid_result(result.json_path)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("locustfile", "kind"), [("locustfiles/embeddings.py", "vectors"), ("locustfiles/rerank.py", "scores")]
)
def test_saved_references_read_back_are_identical(mock_server_factory, tmp_path, locustfile, kind):
    server = mock_server_factory("--ttfb-ms", "5")
    saved = tmp_path / "refs.jsonl"
    first = _run(server.url, tmp_path, locustfile, "--consistency-save", str(saved))
    assert first.returncode == 0, first.stderr[-3000:]
    header, *references = _lines(saved)
    assert header == {"format": "poolbench-references", "version": 1}
    assert len(references) == 8
    for line in references:
        assert set(line) == {"name", "kind", "input", "values"} and line["kind"] == kind
        assert all(isinstance(v, float) for v in line["values"])
    if kind == "scores":
        assert all(len(line["values"]) == len(line["input"]["documents"]) == 4 for line in references)
    else:
        assert all(isinstance(line["input"], str) for line in references)

    before = server.stats()["requests"]
    again = _run(server.url, tmp_path, locustfile, "--consistency-reference", str(saved))
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"8 reference answers read from {saved}" in again.stderr
    total = _document(again)["consistency"]["total"]
    assert total["compared"] > 0 and total["identical_ratio"] == 1.0
    # From the file instead of the server alone: the server saw only the counted requests.
    assert server.stats()["requests"] - before == int(again.csv()["Aggregated"]["Request Count"])


def test_a_file_s_drifted_vector_shows_as_drift(mock_server_factory, tmp_path):
    server = mock_server_factory("--ttfb-ms", "5")
    saved = tmp_path / "refs.jsonl"
    assert _run(server.url, tmp_path, "locustfiles/embeddings.py", "--consistency-save", str(saved)).returncode == 0
    header, *references = _lines(saved)
    honest = references[0]["values"]
    drifted = [v + (0.25 if i % 2 else 0.0) for i, v in enumerate(honest)]
    references = [{**references[0], "values": drifted}]  # one reference alone: every comparison is with it
    saved.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in (header, *references)))
    result = _run(server.url, tmp_path, "locustfiles/embeddings.py", "--consistency-reference", str(saved))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "7 of its 8 reference inputs are not in" in result.stderr
    total = _document(result)["consistency"]["total"]
    assert total["compared"] > 0 and total["identical_ratio"] == 0.0
    cosine = compare_vectors(drifted, honest).cosine
    assert cosine is not None and cosine < 0.999
    assert total["cosine_min"] == pytest.approx(cosine, abs=1e-12)


VECTOR = '{"kind": "vectors", "input": "a text", "values": [0.5, 0.25]}\n'


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("", "empty"),
        (VECTOR, "line 1: not the header line"),
        ('{"format": "poolbench-references", "version": 2}\n', "line 1: version 2"),
        (HEADER, "line 1: the file holds no reference"),
        (HEADER + "\n" + VECTOR + "{not json\n", "line 4: not JSON"),
        (HEADER + '{"kind": "vectors", "values": [1.0]}\n', 'line 2: it lacks "input"'),
        (HEADER + '{"kind": "vectors", "input": "t"}\n', 'line 2: it lacks "values"'),
        (HEADER + '{"kind": "tokens", "input": "t", "values": [1]}\n', 'line 2: "kind" must be'),
        (HEADER + '{"kind": "vectors", "input": 5, "values": [1]}\n', "line 2: a vectors reference's input"),
        (HEADER + '{"kind": "vectors", "input": "t", "values": [1, "x"]}\n', 'line 2: "values"[1]'),
        (HEADER + '{"kind": "vectors", "input": "t", "values": [1, true]}\n', 'line 2: "values"[1]'),
        (HEADER + '{"kind": "vectors", "input": "t", "values": [NaN]}\n', "line 2: not JSON"),
        (HEADER + '{"kind": "vectors", "input": "t", "values": [1e999]}\n', "line 2: not JSON"),
        (HEADER + '{"kind": "vectors", "input": "t", "values": []}\n', 'line 2: "values" must be'),
        (HEADER + '{"kind": "vectors", "input": "t", "values": [1], "name": ""}\n', 'line 2: "name"'),
        (HEADER + VECTOR + VECTOR, "line 3: repeats line 2's input"),
        (
            HEADER + '{"kind": "scores", "input": {"query": "q", "documents": ["a", "b"]}, "values": [1]}\n',
            "line 2: 1 scores for 2 documents",
        ),
        (HEADER + '{"kind": "scores", "input": {"query": "q", "documents": []}, "values": [1]}\n', "line 2: a scores"),
    ],
)
def test_a_bad_file_is_refused_naming_its_first_bad_line(tmp_path, content, said):
    path = tmp_path / "refs.jsonl"
    path.write_text(content)
    with pytest.raises(OptionError) as refused:
        reference_file.read(str(path))
    assert str(refused.value).startswith(f"--consistency-reference: {path}")
    assert said in str(refused.value)


def test_the_file_s_bounds_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(reference_file, "MAX_LINE_BYTES", 100)
    long_line = tmp_path / "long.jsonl"
    long_line.write_text(HEADER + '{"kind": "vectors", "input": "t", "values": [' + "0.5, " * 40 + "1]}\n")
    with pytest.raises(OptionError, match="line 2: longer than the 100 bytes"):
        reference_file.read(str(long_line))
    monkeypatch.setattr(reference_file, "MAX_REFERENCES", 2)
    many = tmp_path / "many.jsonl"
    many.write_text(HEADER + "".join(VECTOR.replace("a text", f"text {i}") for i in range(3)))
    with pytest.raises(OptionError, match="line 4: more than the 2 references"):
        reference_file.read(str(many))
    monkeypatch.setattr(reference_file, "MAX_FILE_BYTES", 10)
    with pytest.raises(OptionError, match="more than the 10 read"):
        reference_file.read(str(many))
    with pytest.raises(OptionError, match=f"{tmp_path}: cannot be read"):
        reference_file.read(str(tmp_path))  # a directory


def test_a_file_s_vectors_of_one_name_share_their_dimension(tmp_path):
    path = tmp_path / "refs.jsonl"
    path.write_text(HEADER + VECTOR + VECTOR.replace("a text", "b").replace("[0.5, 0.25]", "[1, 2, 3]"))
    file = reference_file.read(str(path))
    with pytest.raises(OptionError, match="line 3: its vector has 3 values where line 2's"):
        file.matched("/v1/embeddings", "vectors", ["a text", "b"])
    assert list(file.matched("/v1/embeddings", "vectors", ["b", "not in the file"])) == [0]
    named = tmp_path / "named.jsonl"
    named.write_text(HEADER + VECTOR.replace("{", '{"name": "/other", ', 1))
    assert reference_file.read(str(named)).matched("/v1/embeddings", "vectors", ["a text"]) == {}


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "cannot be read"),
        (HEADER + VECTOR + "{oops\n", "line 3: not JSON"),
        (HEADER + VECTOR, "line 2: none of its 1 references is one of the run's reference inputs"),
    ],
    ids=["missing", "not-json", "never-sent"],
)
def test_a_bad_file_stops_the_run_at_start(mock_server_factory, tmp_path, content, said):
    server = mock_server_factory()
    path = tmp_path / "refs.jsonl"
    if content is not None:
        path.write_text(content)
    result = _run(server.url, tmp_path, "locustfiles/embeddings.py", "--consistency-reference", str(path))
    assert result.returncode == 1
    assert f"--consistency-reference: {path}" in result.stderr and said in result.stderr, result.stderr[-3000:]
    assert server.stats()["requests"] == 0


def test_a_file_of_another_dimension_than_dimensions_stops_the_run_at_start(mock_server_factory, tmp_path):
    server = mock_server_factory("--ttfb-ms", "5")
    saved = tmp_path / "refs.jsonl"
    assert _run(server.url, tmp_path, "locustfiles/embeddings.py", "--consistency-save", str(saved)).returncode == 0
    dimension = len(_lines(saved)[1]["values"])
    sent = server.stats()["requests"]
    asked = ("--dimensions", str(dimension // 2))
    result = _run(server.url, tmp_path, "locustfiles/embeddings.py", "--consistency-reference", str(saved), *asked)
    assert result.returncode == 1
    said = f"line 2: its vector has {dimension} values; --dimensions asks {dimension // 2}"
    assert f"--consistency-reference: {saved} {said}" in result.stderr, result.stderr[-3000:]
    assert server.stats()["requests"] == sent


def test_a_file_of_another_dimension_stops_the_run_at_its_first_answer(mock_server_factory, tmp_path):
    server = mock_server_factory("--ttfb-ms", "5")
    saved = tmp_path / "refs.jsonl"
    assert _run(server.url, tmp_path, "locustfiles/embeddings.py", "--consistency-save", str(saved)).returncode == 0
    header, *references = _lines(saved)
    shorter = [{**line, "values": line["values"][:-1]} for line in references]
    saved.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in (header, *shorter)))
    dimension = len(references[0]["values"])
    result = _run(server.url, tmp_path, "locustfiles/embeddings.py", "--consistency-reference", str(saved))
    assert result.returncode == 1
    said = f"--consistency-reference: {saved} line 2: /v1/embeddings's reference vectors have {dimension - 1} values"
    assert said in result.stderr and f"the server answers {dimension} values" in result.stderr, result.stderr[-3000:]
    assert result.stderr.count(said) == 1
    assert _document(result)["consistency"] is None  # the wrong file's vectors were never compared


def _distributed(url: str, tmp_path: Path, *args: str) -> dict[str, Any]:
    port = str(free_port())  # not Locust's default 5557, where another run's workers may be calling
    dist = ("--processes", "2", "--master-bind-port", port, "--master-port", port)
    result = _run(url, tmp_path, "locustfiles/embeddings.py", *dist, *args, users=4, run_time="5s")
    assert result.returncode == 0, result.stderr[-3000:]
    return {"stderr": result.stderr, **_document(result)}


def test_workers_whose_server_answers_by_connection_disagree(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCUST_SERVER_METRICS", "off")  # no GET /metrics: the server answers embeddings only
    with served("by_connection") as url:
        document = _distributed(url, tmp_path)
    agreement = document["consistency"]["references_disagree"]
    assert agreement["workers"] == 2
    assert agreement["compared"] == agreement["disagree"] == 8
    one = agreement["names"]["/v1/embeddings"]
    assert one["disagree"] == 8 and one["cosine_min"] < 1.0 and len(one["workers"]) == 1
    assert "Reference answers of /v1/embeddings DISAGREE between workers: 8 of 8" in document["stderr"]


def test_workers_of_the_honest_mock_agree(mock_server_factory, tmp_path):
    server = mock_server_factory("--ttfb-ms", "5")
    document = _distributed(server.url, tmp_path)
    agreement = document["consistency"]["references_disagree"]
    assert agreement == {
        "workers": 2,
        "compared": 8,
        "disagree": 0,
        "names": {"/v1/embeddings": {"compared": 8, "disagree": 0}},
    }
    assert "Reference answers of /v1/embeddings: the 2 workers' agree (8 compared" in document["stderr"]


def test_the_master_refuses_garbled_references(caplog):
    good = [["/e", "vectors", "0123456789abcdef", [1.0, 0.0]]]
    assert reference_agreement.entries_of(good) == {("/e", "0123456789abcdef"): ("vectors", (1.0, 0.0))}
    for garbled, why in [
        ({"not": "a list"}, "not a list"),
        ([["/e", "vectors", "0123456789abcdef"]], "not [name, kind"),
        ([["", "vectors", "0123456789abcdef", [1.0]]], "name"),
        ([["/e", "labels", "0123456789abcdef", [1.0]]], "kind"),
        ([["/e", "vectors", "0123456789ABCDEF", [1.0]]], "hash"),
        ([["/e", "vectors", "0123456789abcdef", []]], "values"),
        ([["/e", "vectors", "0123456789abcdef", [float("nan")]]], "finite"),
        ([["/e", "vectors", "0123456789abcdef", [True]]], "finite"),
        ([["/e", "vectors", "0123456789abcdef", [1.0] * (reference_agreement.MAX_VALUES + 1)]], "values"),
        (good * 2, "twice"),
        (good * (reference_agreement.MAX_ENTRIES + 1), "at most"),
    ]:
        with pytest.raises(ValueError, match=re.escape(why)):
            reference_agreement.entries_of(garbled)
    agreement = reference_agreement.Agreement()
    agreement.add(0, reference_agreement.entries_of(good))
    agreement.add(3, reference_agreement.entries_of([["/e", "vectors", "0123456789abcdef", [0.6, 0.8]]]))
    figures = agreement.figures()
    assert figures is not None and figures["disagree"] == 1
    assert figures["names"]["/e"] == {
        "compared": 1,
        "disagree": 1,
        "cosine_min": pytest.approx(0.6),
        "abs_diff_max": pytest.approx(0.8),
        "workers": [3],
    }
