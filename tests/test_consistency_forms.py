"""Every answer form compared with its reference (docs/consistency.md, "What is compared"): against the bundled
mock, a short run of each group of forms shows every name compared and 100 % identical on the honest mock,
and drifting (or flipping) with --drift-above/--flip-above; and each form's values reader against hand-made
answers, hostile ones included (wrong lengths, non-finite values, garbage: not compared, no crash)."""

from __future__ import annotations

import json
import logging
import struct
from pathlib import Path
from typing import Any

import orjson
import pytest

from poolbench_locust.consistency.comparing import compare_values, on_request
from poolbench_locust.consistency.state import Consistency
from poolbench_locust.endpoints import infinity, kserve, nim, sglang, tei, vllm, vllm_bytes
from poolbench_locust.endpoints.spec import Raw, Values
from poolbench_locust.engine.answer_values import Wanted, answer_values
from poolbench_locust.options import Settings
from tests.support.locust_run import CONSISTENCY_ON, run_locust

LOAD = ("--input-len", "8", "--batch-size", "2", "--documents", "4", "--stop-timeout", "3", "--consistency-rate", "1")
INFER = ("--model", "m", "--infer-input", "TEXT", "--infer-output", "EMBEDDING")

COHERE = ("--model", "embed-english-v3.0", "--input-type", "search_document", "--embedding-type")
VLLM_JSON = ",".join(f"locustfiles/{name}.py" for name in ("embeddings", "rerank", "score", "classify"))
VLLM_BINARY = "locustfiles/embeddings.py,locustfiles/pooling.py"
TEI_CLASSES = ("TEIEmbedUser", "TEIRerankUser", "TEIPredictUser", "TEISparseEmbedUser", "TEIEmbedAllUser")
INFINITY_CLASSES = ("InfinityEmbeddingsUser", "InfinityRerankUser", "InfinityClassifyUser")

# (id, mock flavor, locustfile(s), User classes, options): each group one run honest, one under the load faults.
GROUPS = [
    ("vllm-json", "vllm", VLLM_JSON, ("EmbeddingsUser", "RerankUser", "ScoreUser", "ClassifyUser"), ()),
    ("vllm-bytes", "vllm", VLLM_BINARY, ("EmbeddingsUser", "PoolingUser"), ("--encoding-format", "bytes")),
    ("vllm-bytes-only", "vllm", VLLM_BINARY, ("EmbeddingsUser",), ("--encoding-format", "bytes_only")),
    ("pooling-classify", "vllm", VLLM_BINARY, ("PoolingUser",), ("--pooling-task", "classify")),
    (
        "token-embed-bytes",
        "vllm",
        VLLM_BINARY,
        ("PoolingUser",),
        ("--pooling-task", "token_embed", "--encoding-format", "bytes"),
    ),
    ("chat", "vllm", "locustfiles/embeddings_chat.py", ("EmbeddingsChatUser",), ()),
    ("tei", "tei", "locustfiles/tei.py", (*TEI_CLASSES, "TEISimilarityUser"), ()),
    ("sglang", "sglang", "locustfiles/sglang.py", ("SGLangRerankUser", "SGLangScoreUser"), ()),
    ("infinity", "infinity", "locustfiles/infinity.py", INFINITY_CLASSES, ()),
    ("nim", "nim", "locustfiles/nim.py", ("NIMRankingUser",), ()),
    ("kserve-json", "kserve", "locustfiles/kserve.py", ("KServeInferUser",), INFER),
    ("kserve-binary", "kserve", "locustfiles/kserve.py", ("KServeInferUser",), (*INFER, "--encoding-format", "bytes")),
    ("cohere-int8", "cohere", "locustfiles/cohere_embed.py", ("CohereEmbedUser",), (*COHERE, "int8")),
    ("cohere-binary", "cohere", "locustfiles/cohere_embed.py", ("CohereEmbedUser",), (*COHERE, "binary")),
    ("images", "vllm", "locustfiles/cohere_embed.py", ("CohereEmbedUser",), ("--images", "1", "--image-size", "8x8")),
]
CASES = [g[1:] for g in GROUPS]
IDS = [g[0] for g in GROUPS]


@pytest.fixture(autouse=True)
def _consistency_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite turns the check off (tests/conftest.py); here it is on, as by default."""
    monkeypatch.setenv("LOCUST_NO_CONSISTENCY", "false")


def _figures(url: str, tmp_path: Path, locustfile: str, classes: tuple[str, ...], args: tuple[str, ...], users: int):
    written = tmp_path / "result.json"
    result = run_locust(
        locustfile,
        *LOAD,
        *args,
        *classes,
        host=url,
        users=users,
        spawn_rate=users,
        run_time="2s",
        json_result=written,
        env=CONSISTENCY_ON,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "not compared" not in result.stderr and "could not be compared" not in result.stderr, result.stderr[-3000:]
    figures = json.loads(written.read_text())["consistency"]
    assert figures is not None, result.stderr[-3000:]
    names = set(figures) - {"total"}
    assert len(names) == len(classes), (names, result.stderr[-3000:])
    return figures, names


@pytest.mark.parametrize(("flavor", "locustfile", "classes", "args"), CASES, ids=IDS)
def test_every_form_is_compared_identical_on_the_honest_mock(
    mock_server_factory, tmp_path, flavor, locustfile, classes, args
):
    server = mock_server_factory("--flavor", flavor)
    figures, names = _figures(server.url, tmp_path, locustfile, classes, args, users=len(classes))
    for name in names:
        assert figures[name]["compared"] > 0 and figures[name]["identical_ratio"] == 1.0, (name, figures[name])


# Timing: the mock drifts only while more than one request is in flight, a concurrency that a starved client
# (a busy machine) may not reach in a 2 s run (seen: the images form's 8 answers compared all identical).
@pytest.mark.timing
@pytest.mark.parametrize(("flavor", "locustfile", "classes", "args"), CASES, ids=IDS)
def test_every_form_shows_its_drift_under_load(mock_server_factory, tmp_path, flavor, locustfile, classes, args):
    # The references, taken alone (one in flight), are honest; under load every answer drifts or flips.
    faults = ("--drift-above", "1", "--flip-above", "1", "--ttfb-ms", "20")
    server = mock_server_factory("--flavor", flavor, *faults)
    figures, names = _figures(server.url, tmp_path, locustfile, classes, args, users=4 * len(classes))
    for name in names:
        found = figures[name]
        assert found["compared"] > 0 and found["identical_ratio"] < 1.0, (name, found)
        moved = [
            found.get("cosine_min", 1.0) < 1.0,
            found.get("hamming_max", 0) > 0,
            found.get("top1_changed_ratio", 0) > 0,
            found.get("labels_changed_ratio", 0) > 0,
        ]
        assert any(moved), (name, found)


# Each reader's values, against hand-made answers.

S = Settings()


def _values(answer: Any, position: int, body: bytes | None = None, **wanted: Any) -> Values:
    settings = wanted.pop("settings", S)
    return answer_values(answer, ((position, 0),), Wanted(settings, **wanted), body)[0][1]


def test_rankings_of_every_server_give_scores_in_the_documents_order():
    assert _values(tei.TEI_RERANK.read([{"index": 1, "score": 0.9}, {"index": 0, "score": 0.2}]), -1) == Values(
        "scores", [0.2, 0.9]
    )
    assert _values(tei.TEI_SIMILARITY.read([0.5, 0.25]), -1) == Values("scores", [0.5, 0.25])
    sg = sglang.SGLANG_RERANK.read([{"index": 1, "score": 3}, {"index": 0, "score": 1}])
    assert _values(sg, -1) == Values("scores", [1.0, 3.0])
    assert _values(sglang.SGLANG_SCORE.read({"scores": [[0.1, 0.9], [0.7, 0.3]]}), -1) == Values("scores", [0.1, 0.7])
    logits = [{"index": 2, "logit": 5}, {"index": 0, "logit": 1}, {"index": 1, "logit": -1}]
    ranked = nim.NIM_RANKING.read({"rankings": logits})
    assert _values(ranked, -1) == Values("scores", [1.0, -1.0, 5.0])
    infinity_ranked = infinity.INFINITY_RERANK.read({"results": [{"index": 0, "relevance_score": 0.5}]})
    assert _values(infinity_ranked, -1) == Values("scores", [0.5])


def test_classifications_give_their_labels():
    predicted = tei.TEI_PREDICT.read([[{"score": 0.8, "label": "a"}, {"score": 0.2, "label": "b"}]])
    assert _values(predicted, 0) == Values("labels", {"a": 0.8, "b": 0.2})
    one = tei.TEI_PREDICT.read([{"score": 0.8, "label": "a"}, {"score": 0.2, "label": "b"}])
    assert _values(one, 0) == Values("labels", {"a": 0.8, "b": 0.2})
    inf = infinity.INFINITY_CLASSIFY.read({"data": [[{"score": 1, "label": "x"}]]})
    assert _values(inf, 0) == Values("labels", {"x": 1.0})
    classified = vllm.CLASSIFY.read({"data": [{"index": 0, "label": "LABEL_1", "probs": [0.25, 0.75]}]})
    assert _values(classified, 0) == Values("labels", [0.25, 0.75])
    pooled = vllm.POOLING.read({"data": [{"data": [0.4, 0.6]}]})
    assert _values(pooled, 0, settings=Settings(pooling_task="classify")) == Values("labels", [0.4, 0.6])


def test_sparse_packed_and_token_rows():
    sparse = tei.TEI_EMBED_SPARSE.read([[{"index": 7, "value": 0.5}, {"index": 3, "value": 1}]])
    assert _values(sparse, 0) == Values("sparse", {7: 0.5, 3: 1.0})
    vectors = vllm.EMBEDDINGS.read({"data": [{"embedding": [1, -2, 3]}]})
    assert _values(vectors, 0, settings=Settings(embedding_type="int8")) == Values("vectors", [1, -2, 3])
    assert _values(vectors, 0, settings=Settings(embedding_type="ubinary")) == Values("packed_bits", [1, -2, 3])
    rows = tei.TEI_EMBED_ALL.read([[[1.0, 0.0], [0.0, 1.0]]])
    assert _values(rows, 0, token_level=True) == Values("rows", [[1.0, 0.0], [0.0, 1.0]])


def test_binary_bodies_give_their_vectors_when_kept():
    floats = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
    item = {"embed_dtype": "float32", "endianness": "little"}
    meta = {"data": [{**item, "index": i, "start": 8 * i, "end": 8 * i + 8} for i in range(2)]}
    headers = {"metadata": orjson.dumps(meta).decode()}
    form = vllm_bytes.BytesForm(S, False)
    answer = form.read(headers, form.head(headers, None)[1], b"", len(floats), 2)
    assert _values(answer, 1, floats) == Values("vectors", (3.0, 4.0))
    raw_form = vllm_bytes.RawForm(Settings(endianness="little"), False)
    raw = raw_form.read({}, None, b"", len(floats), 2)
    assert _values(raw, 1, floats) == Values("vectors", (3.0, 4.0))
    with pytest.raises(ValueError, match="not kept"):
        _values(raw, 0, None)
    output = {"name": "E", "datatype": "FP32", "shape": [2, 2], "parameters": {"binary_data_size": 16}}
    head = orjson.dumps({"outputs": [output]})
    binary = kserve.BinaryTensors(kserve.Tensors("T", "E"), S)
    tensor = binary.read({}, len(head), head, len(head) + 16, 2)
    assert _values(tensor, 1, head + floats) == Values("vectors", (3.0, 4.0))
    json_tensor = kserve._json_answer(kserve.Tensors("T", "E"), S)(
        {"outputs": [{"name": "E", "datatype": "FP32", "shape": [2, 2], "data": [1, 2, 3, 4]}]}
    )
    assert _values(json_tensor, 1) == Values("vectors", [3, 4])


@pytest.mark.parametrize(
    ("answer", "position", "body"),
    [
        (tei.TEI_RERANK.read([{"index": 0, "score": 1}, {"index": 0, "score": 2}]), -1, None),  # repeated index
        (tei.TEI_RERANK.read([{"index": 0, "score": 1}]), 0, None),  # a ranking has no items
        (tei.TEI_PREDICT.read([[{"score": 0.5, "label": "a"}, {"score": 0.5, "label": "a"}]]), 0, None),  # label twice
        (tei.TEI_PREDICT.read([[{"score": 0.5, "label": "a"}]]), 3, None),  # no such item
        (tei.TEI_EMBED_SPARSE.read([[{"index": 1, "value": 1}, {"index": 1, "value": 2}]]), 0, None),
        (vllm.CLASSIFY.read({"data": [{"probs": "garbage"}]}), 0, None),
        (vllm.CLASSIFY.read({"data": [{"probs": [float("nan")]}]}), 0, None),
        (vllm.EMBEDDINGS.read({"data": [{"embedding": {"not": "a vector"}}]}), 0, None),
        (vllm_bytes.RawForm(S, False).read({}, None, b"", 8, 2), 1, b"\x00" * 7),  # a body shorter than it said
    ],
)
def test_hostile_answers_give_no_values(answer, position, body):
    with pytest.raises(ValueError):
        _values(answer, position, body)


def test_a_hostile_metadata_header_gives_no_values():
    meta = {"data": [{"embed_dtype": "float99", "endianness": "little", "start": 0, "end": 8}]}
    form = vllm_bytes.BytesForm(Settings(no_validate=True), False)
    headers = {"metadata": orjson.dumps(meta).decode()}
    answer = form.read(headers, form.head(headers, None)[1], b"", 8, 1)
    with pytest.raises(ValueError, match="embed_dtype"):
        _values(answer, 0, b"\x00" * 8)
    outside = {"data": [{"embed_dtype": "float32", "start": 0, "end": 800}]}
    headers = {"metadata": orjson.dumps(outside).decode()}
    answer = form.read(headers, form.head(headers, None)[1], b"", 8, 1)
    with pytest.raises(ValueError, match="outside the body"):
        _values(answer, 0, b"\x00" * 8)
    raw = Raw(b"\x00" * 7, "float32", "little")  # not whole values
    with pytest.raises(ValueError):
        answer_values(type("A", (), {"values": lambda self, p, b: Values("vectors", raw)})(), ((0, 0),), Wanted(S))


@pytest.mark.parametrize(
    ("kind", "ref", "got"),
    [
        ("vectors", [1.0, 2.0], [1.0, float("inf")]),
        ("labels", {"a": 1.0}, [1.0]),  # a mapping against a list
        ("sparse", {1: 1.0}, [1.0]),
        ("rows", [[1.0]], [None]),
        ("packed_bits", [1, 2], [1, 300]),
        ("nothing", [1.0], [1.0]),
    ],
)
def test_values_the_measures_refuse_are_not_compared(kind, ref, got, caplog):
    with pytest.raises(ValueError):
        compare_values(kind, ref, got)
    state = Consistency(references={"n": {0: ref}}, kinds={"n": kind})
    listener = on_request(None, state, False)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, "poolbench_locust"):
        listener(name="n", context={"answers": ((0, Values(kind, got)),)})  # type: ignore[arg-type]
        listener(name="n", context={"answers": ((0, Values("scores", [1.0])),)})  # another kind than its reference
    assert state.skipped == 2 and not state.tallies
    assert caplog.text.count("could not be compared") == 1


def test_each_kind_takes_its_measure():
    assert compare_values("packed_bits", [0, 255], [1, 255]).hamming == 1
    assert compare_values("sparse", {1: 1.0}, {1: 1.0, 2: 0.0}).identical
    assert compare_values("rows", [[1.0, 0.0]], [[0.0, 1.0]]).cosine == 0.0
    assert compare_values("labels", {"a": 0.9, "b": 0.1}, {"a": 0.1, "b": 0.9}).label_changed
    assert compare_values("scores", [1.0, 2.0], [2.0, 1.0]).top1_changed


def test_only_a_token_level_bytes_only_body_is_not_compared():
    token_level = vllm_bytes.RawForm(S, True)
    assert "rows begin" in str(token_level.not_compared)
    assert vllm_bytes.RawForm(S, False).not_compared is None
    assert vllm_bytes.forms(vllm.EMBEDDINGS, S, False).not_compared is None
