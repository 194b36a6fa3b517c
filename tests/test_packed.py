"""Packed and sparse answers (issue 31): --embedding-type on Cohere-style /v2/embed (vLLM's and Cohere's),
Voyage and Infinity, each type its server offers run clean, each bad answer one failure naming what was
wrong, each type a server does not offer stopped at start; TEI /embed_sparse's indices bounded."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
import requests

import poolbench_locust as pb
from poolbench_locust import lazyjson
from poolbench_locust.engine import packed
from poolbench_locust.engine.body import BadResponse
from tests.support.bad_then_good import assert_failed_then_ok
from tests.support.harness import Run, failure_text, start_error
from tests.support.hostile import response
from tests.support.locust_run import run_locust

COHERE_MODEL = ["--model", "embed-english-v3.0", "--input-type", "search_document"]
"""A Cohere embed v3 model: Cohere's API answers all six types to it (and needs an input_type)."""
VOYAGE_MODEL = ["--model", "voyage-3.5"]

# (User class, the mock's flavor, options, --embedding-type values its server offers)
OFFERED = [
    (pb.CohereEmbedUser, "cohere", COHERE_MODEL, ["float", "int8", "uint8", "binary", "ubinary", "base64"]),
    (pb.CohereEmbedUser, "vllm", [], ["float", "binary", "ubinary", "base64"]),
    (pb.VoyageEmbedUser, "voyage", VOYAGE_MODEL, ["float", "int8", "uint8", "binary", "ubinary"]),
]


@pytest.fixture(scope="module")
def mock(mock_server_factory):
    return mock_server_factory()


@pytest.mark.parametrize(("user", "flavor", "args", "types"), OFFERED, ids=lambda v: getattr(v, "__name__", None))
def test_every_type_a_server_offers_runs_clean_with_dimensions_and_without(mock, user, flavor, args, types):
    for kind in types:
        for shape in (["--dimensions", "256", "--batch-size", "3"], ["--batch-size", "16", "--dimensions", "1024"], []):
            run = Run(user, mock.url, *args, "--embedding-type", kind, "--check-vectors", *shape,
                      mock_headers={"x-mock-flavor": flavor})  # fmt: skip
            events = [run.one() for _ in range(2)]
            assert [failure_text(e) for e in events] == ["", ""], (kind, shape)
            assert events[0]["context"]["token_source"] == "server"


@pytest.mark.parametrize("dtype", ["int8", "uint8", "binary", "ubinary"])
def test_infinity_started_with_a_packed_dtype_runs_clean_and_cuts_dimensions_after_packing(mock_server_factory, dtype):
    """Infinity slices the packed bytes: --dimensions 256 of a binary server is asked as 32 bytes (256 bits),
    and every answer is checked at 256 / 8. Asked for 256 as it was before, a 384-dimension model's 48 bytes
    are refused (400 'not in a valid range')."""
    server = mock_server_factory("--flavor", "infinity", "--infinity-embedding-dtype", dtype)
    encodings = ["float", "base64"] if dtype in ("int8", "uint8") else ["float"]  # base64 of a bit-packed: a 500
    for encoding in encodings:
        for shape in (["--dimensions", "256", "--batch-size", "3"], ["--batch-size", "64"]):
            args = ["--embedding-type", dtype, "--encoding-format", encoding, "--check-vectors", *shape]
            run = Run(pb.InfinityEmbeddingsUser, server.url, *args)
            assert [failure_text(run.one()) for _ in range(2)] == ["", ""], (encoding, shape)
    body = orjson.loads(Run(pb.InfinityEmbeddingsUser, server.url, "--embedding-type", dtype, "--dimensions", "256")
                        .user.plan.requests[0].body)  # fmt: skip
    assert body["dimensions"] == (32 if dtype in ("binary", "ubinary") else 256)


def test_the_request_asks_for_the_type_in_each_servers_own_field(mock):
    def body(user: type, *args: str) -> dict[str, Any]:
        return orjson.loads(Run(user, mock.url, *args).user.plan.requests[0].body)

    cohere = body(pb.CohereEmbedUser, "--embedding-type", "binary", "--dimensions", "512")
    assert cohere["embedding_types"] == ["binary"] and cohere["output_dimension"] == 512
    assert body(pb.CohereEmbedUser)["embedding_types"] == ["float"]
    voyage = body(pb.VoyageEmbedUser, *VOYAGE_MODEL, "--embedding-type", "int8", "--dimensions", "512")
    assert voyage["output_dtype"] == "int8" and voyage["output_dimension"] == 512 and "encoding_format" not in voyage
    assert "output_dtype" not in body(pb.VoyageEmbedUser, *VOYAGE_MODEL)


def test_the_mock_packs_as_vllm_and_refuses_what_vllm_refuses(mock):
    """vLLM's _pack_binary_embeddings: bit 1 for a value >= 0, the first dimension in the high bit, binary =
    ubinary - 128; int8 and uint8 are Cohere's API's only; a dimension not a multiple of 8 cannot pack."""

    def embed(flavor: str, *types: str, dims: int = 64) -> Any:
        body = {"texts": ["a b"], "embedding_types": list(types), "output_dimension": dims}
        return requests.post(f"{mock.url}/v2/embed", json=body, headers={"x-mock-flavor": flavor}, timeout=5)

    answer = embed("vllm", "float", "binary", "ubinary").json()["embeddings"]
    floats = answer["float"][0]
    expected = [sum(1 << (7 - k) for k in range(8) if floats[start + k] >= 0) for start in range(0, 64, 8)]
    assert answer["ubinary"][0] == expected and answer["binary"][0] == [b - 128 for b in expected]
    assert embed("vllm", "int8").status_code == 400
    assert embed("vllm", "binary", dims=100).status_code == 400
    int8 = embed("cohere", "int8", "uint8").json()["embeddings"]
    assert all(type(v) is int and -128 <= v <= 127 for v in int8["int8"][0])
    assert int8["uint8"][0] == [v + 128 for v in int8["int8"][0]]


# ---- bad answers: each one failed request, its message naming what was wrong ----------------------------

FAULTS = [
    # (User class, the mock's flavor, options, fault, message)
    (pb.CohereEmbedUser, "cohere", [*COHERE_MODEL, "--embedding-type", "int8"], "packed-out-of-range",
     "embedding 2 value 0 is 128, outside int8's -128..127"),
    (pb.CohereEmbedUser, "vllm", ["--embedding-type", "ubinary"], "packed-out-of-range",
     "embedding 2 value 0 is 256, outside ubinary's 0..255"),
    (pb.CohereEmbedUser, "vllm", ["--embedding-type", "binary", "--dimensions", "256"], "packed-short",
     "embedding 2 has 31 binary values, expected 32 (--dimensions 256 / 8)"),
    (pb.CohereEmbedUser, "vllm", ["--embedding-type", "binary"], "packed-short",
     "embedding 2 has 47 binary values, embedding 0 has 48 binary values"),
    (pb.CohereEmbedUser, "vllm", ["--embedding-type", "base64", "--dimensions", "256"], "packed-short",
     "embedding 2 is 1364 base64 characters, expected 1368 (256 float32 values)"),
    (pb.VoyageEmbedUser, "voyage", [*VOYAGE_MODEL, "--embedding-type", "uint8", "--batch-size", "64"],
     "packed-out-of-range", "embedding 63 value 0 is 256, outside uint8's 0..255"),  # 90 kB: lazyjson's int buffer
    (pb.CohereEmbedUser, "cohere", [*COHERE_MODEL, "--embedding-type", "int8", "--batch-size", "32"],
     "packed-out-of-range", "embedding 31 value 0 is 128, outside int8's -128..127"),  # 62 kB: lazyjson's
    (pb.VoyageEmbedUser, "voyage", [*VOYAGE_MODEL, "--embedding-type", "int8", "--dimensions", "512"],
     "packed-short", "embedding 2 has 511 int8 values, expected 512"),
    (pb.CohereEmbedUser, "vllm", ["--embedding-type", "binary", "--check-vectors"], "zero-vectors",
     "embedding 0 is 127 in every value: a zero or NaN vector, packed"),
    (pb.TEISparseEmbedUser, "tei", [], "sparse-bad-index", "entry 5 index is not a whole number >= 0"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("user", "flavor", "args", "fault", "message"), FAULTS, ids=lambda v: v if isinstance(v, str) else None
)
def test_a_spoiled_packed_answer_is_one_failed_request_naming_what_was_wrong(mock, user, flavor, args, fault, message):
    batch = [] if "--batch-size" in args else ["--batch-size", "3"]
    run = Run(
        user, mock.url, "--input-len", "6", *batch, *args, mock_headers={"x-mock-flavor": flavor, "x-mock-fault": fault}
    )
    event = run.one()  # Run.one asserts exactly one event for the one request
    assert message in failure_text(event), failure_text(event)
    assert "input_tokens" not in event["context"], "a failed request adds no tokens"


@pytest.mark.parametrize(
    ("kind", "edges", "outside"),
    [("int8", [-128, 127], [128, -129, 2**40]), ("uint8", [0, 255], [256, -1]), ("binary", [-128, 127], [128])],
)
@pytest.mark.parametrize("reader", ["lazyjson", "orjson"])
def test_the_range_check_holds_at_each_edge_in_both_readers(kind, edges, outside, reader):
    """A large answer's integers are range-checked from lazyjson's int64 copy, a small one's by bytes():
    both take the type's edge values and refuse one past them, wherever in the vector it is."""
    form = packed.FORMS[kind]
    loads = lazyjson.loads if reader == "lazyjson" else orjson.loads

    def verdict(values: list[int]) -> str:
        body = orjson.dumps({"v": [values]})
        try:
            packed.check(loads(body)["v"], form, None, body)
        except BadResponse as e:
            return str(e)
        return ""

    assert verdict([*edges, 0, *edges] * 40) == ""
    for value in outside:
        for at in (0, 7, 161):
            vector = [edges[0]] * 200
            vector[at] = value
            assert verdict(vector) == f"embedding 0 value {at} is {value}, outside {kind}'s {form.low}..{form.high}"


def _answer(vectors: Any) -> bytes:
    """Voyage's answer holding `vectors` (json's writer: orjson's refuses an integer past 64 bits)."""
    data = [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(vectors)]
    doc = {"object": "list", "data": data, "model": "m", "usage": {"total_tokens": 8}}
    return response(200, json.dumps(doc).encode())


GOOD = [[-14.0, 7.0, 127.0, -128.0], [1, 2, 3, 4]]  # Infinity writes whole numbers as floats
HOSTILE = [
    ([GOOD[0], [1, 2, 3, 4.5]], "embedding 1 value 3 is not a whole number: 4.5"),
    ([GOOD[0], [1, 2, True, 4]], "embedding 1 value 2 is not a whole number: True"),
    ([GOOD[0], [1, 2, None, 4]], "embedding 1 value 2 is not a whole number: null"),
    ([GOOD[0], [1, 2, "3", 4]], "embedding 1 value 2 is not a whole number: '3'"),
    ([GOOD[0], [1, 2, -129, 4]], "embedding 1 value 2 is -129, outside int8's -128..127"),
    ([GOOD[0], [1, 2, 2**70, 4]], "embedding 1 value 2 is 1180591620717411303424, outside int8's"),
    ([GOOD[0], "AAAA"], "embedding 1 is not a list of int8 values"),
]


@pytest.mark.parametrize(("bad", "message"), HOSTILE, ids=[m[:40] for _, m in HOSTILE])
def test_a_hostile_int8_answer_is_one_failure(bad, message):
    assert_failed_then_ok(
        pb.VoyageEmbedUser, _answer(bad), _answer(GOOD), message, *VOYAGE_MODEL, "--embedding-type", "int8"
    )


def test_a_sparse_index_past_any_vocabulary_is_one_failure():
    good = [[{"index": 7, "value": 0.5}], [{"index": 2011, "value": 1.25}]]
    bad = [good[0], [{"index": 1 << 24, "value": 1.25}]]
    headers = [("x-compute-type", "cpu"), ("x-compute-tokens", "8"), ("x-compute-time", "1")]
    message = "sparse embedding 1 entry 0 index is not a vocabulary id (>= 16777216)"
    assert_failed_then_ok(
        pb.TEISparseEmbedUser,
        response(200, orjson.dumps(bad), headers=headers),
        response(200, orjson.dumps(good), headers=headers),
        message,
    )


# ---- a run as users run it: the types and the faults, counted once each ---------------------------------


def test_a_run_counts_each_spoiled_answer_once_and_the_rest_clean(mock_server_factory, tmp_path):
    server = mock_server_factory(
        "--flavor", "cohere", "--fault", "packed-short=0.2", "--fault", "packed-out-of-range=0.2"
    )
    done = run_locust(
        "locustfiles/cohere_embed.py",
        *(*COHERE_MODEL, "--embedding-type", "int8", "--dimensions", "256", "--batch-size", "4", "--input-len", "6"),
        host=server.url, users=4, requests=40, csv=tmp_path / "run",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]  # failed requests: Locust's own exit code
    row = done.csv()["/v2/embed"]
    faults = server.stats()["faults"]
    assert int(row["Request Count"]) > 20
    assert int(row["Failure Count"]) == faults["packed-short"] + faults["packed-out-of-range"] > 0
    text = (tmp_path / "run_failures.csv").read_text()
    assert "embedding 3 has 255 int8 values, expected 256" in text
    assert "embedding 3 value 0 is 128, outside int8's -128..127" in text


@pytest.mark.parametrize(
    ("locustfile", "user", "route", "args"),
    [
        (
            "locustfiles/infinity.py",
            "InfinityEmbeddingsUser",
            "/embeddings",
            ["--embedding-type", "binary", "--dimensions", "128"],
        ),
        ("locustfiles/voyage.py", "VoyageEmbedUser", "/v1/embeddings", [*VOYAGE_MODEL, "--embedding-type", "ubinary"]),
    ],
    ids=["infinity-binary", "voyage-ubinary"],
)
def test_a_run_against_the_bundled_mock_answers_in_the_type_asked(tmp_path, locustfile, user, route, args):
    """No --host: the bundled mock answers as the class's server, Infinity started with the --embedding-type."""
    done = run_locust(locustfile, "--batch-size", "3", "--check-vectors", *args, user, users=2, requests=20,
                      csv=tmp_path / "run")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    row = done.csv("pooling")[route]
    assert int(row["Request Count"]) > 5 and int(row["Failure Count"]) == 0


# ---- bad input: stopped at start, one line naming the option ----------------------------------------


@pytest.mark.parametrize(
    ("user", "args", "line"),
    [
        (pb.CohereEmbedUser, ["--embedding-type", "int8"],
         "--embedding-type: CohereEmbedUser (/v2/embed) cannot answer --embedding-type int8: its server answers "
         "base64, binary, float, ubinary for --model (none)"),
        (pb.VoyageEmbedUser, [*VOYAGE_MODEL, "--embedding-type", "base64"],
         "--embedding-type: VoyageEmbedUser (/v1/embeddings) cannot answer --embedding-type base64: its server answers "
         "binary, float, int8, ubinary, uint8"),
        (pb.InfinityEmbeddingsUser, ["--embedding-type", "base64"], "--embedding-type: InfinityEmbeddingsUser"),
        (pb.EmbeddingsUser, ["--embedding-type", "int8"],
         "--embedding-type: EmbeddingsUser (/v1/embeddings) cannot answer --embedding-type int8: its server answers "
         "no packed types"),
        (pb.RerankUser, ["--embedding-type", "float"], "--embedding-type: RerankUser (/rerank) cannot answer"),
        (pb.CohereEmbedUser, ["--embedding-type", "binary", "--dimensions", "100"],
         "--dimensions: CohereEmbedUser (/v2/embed): binary packs 8 dimensions a byte: give a multiple of 8, not 100"),
        (pb.InfinityEmbeddingsUser, ["--embedding-type", "ubinary", "--encoding-format", "base64"],
         "--encoding-format: InfinityEmbeddingsUser (/embeddings): a ubinary server answers JSON lists only"),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else None,
)  # fmt: skip
def test_a_type_the_server_does_not_offer_stops_the_run_naming_the_option(user, args, line):
    error = start_error(user, *args)
    assert error is not None and error.startswith(line) and "\n" not in error, error


def test_the_types_each_server_offers_start():
    assert start_error(pb.CohereEmbedUser, *COHERE_MODEL, "--embedding-type", "uint8") is None
    assert start_error(pb.EmbeddingsUser, "--embedding-type", "float") is None  # every embedder's own answer
    assert start_error(pb.InfinityEmbeddingsUser, "--embedding-type", "int8", "--encoding-format", "base64") is None


def test_a_run_given_a_type_its_server_does_not_offer_stops_at_start():
    done = run_locust(
        "locustfiles/cohere_embed.py", "--embedding-type", "uint8", run_time="5s", host="http://127.0.0.1:9"
    )
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "--embedding-type: CohereEmbedUser (/v2/embed) cannot answer" in errors[0], errors
    assert "Traceback" not in done.stderr
