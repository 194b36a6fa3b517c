"""KServeInferUser: the KServe v2 / Triton Open Inference Protocol (Triton's src/http_server.cc and
docs/protocol/extension_binary_data.md).

--model names the model in the path (URL-quoted); the input and output tensors' names come from
GET /v2/models/{model} when the plan is made, unless --infer-input and --infer-output give them. The
answer is one FP32 tensor of shape [n, dim], in JSON or in the binary tensor extension; each way it can
be wrong is one failed request with its message. The protocol has no token count: the client's is used.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import orjson
import pytest
import requests

import poolbench_locust as pb
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.options import OptionError
from tests.support.bad_then_good import assert_failed_then_ok, bad_then_good
from tests.support.harness import Run, failure_text, options
from tests.support.hostile import HostileServer, response, serve_requests
from tests.support.locust_run import LOAD, run_locust

T = 5
NAMED = ("--model", "embedder", "--infer-input", "TEXT", "--infer-output", "EMBEDDING")
"""Tensors named by the options: no metadata is asked of a hostile server (whose first answer is the bad one)."""
DIM = 4


@pytest.fixture(scope="module")
def kserve_mock(mock_server_factory):
    return mock_server_factory("--flavor", "kserve", "--dim", "8")


def infer_body(texts: list[str], binary: bool = False) -> dict[str, Any]:
    output: dict[str, Any] = {"name": "EMBEDDING", **({"parameters": {"binary_data": True}} if binary else {})}
    return {
        "inputs": [{"name": "TEXT", "shape": [len(texts)], "datatype": "BYTES", "data": texts}],
        "outputs": [output],
    }


def test_the_mock_answers_the_inference_protocol_as_triton_does(kserve_mock):
    meta = requests.get(f"{kserve_mock.url}/v2/models/my%2Fmodel", timeout=T).json()
    assert meta["name"] == "my/model"
    assert meta["inputs"] == [{"name": "TEXT", "datatype": "BYTES", "shape": [-1]}]
    assert meta["outputs"] == [{"name": "EMBEDDING", "datatype": "FP32", "shape": [-1, 8]}]
    doc = requests.post(f"{kserve_mock.url}/v2/models/m/infer", json=infer_body(["a b", "c"]), timeout=T).json()
    (output,) = doc["outputs"]
    assert doc["model_name"] == "m" and output["shape"] == [2, 8] and len(output["data"]) == 16
    binary = requests.post(f"{kserve_mock.url}/v2/models/m/infer", json=infer_body(["a b", "c"], True), timeout=T)
    assert binary.headers["content-type"] == "application/octet-stream"
    length = int(binary.headers["inference-header-content-length"])
    head = orjson.loads(binary.content[:length])
    assert head["outputs"][0]["parameters"]["binary_data_size"] == 2 * 8 * 4 == len(binary.content) - length
    tensor = struct.unpack("<16f", binary.content[length:])
    assert all(math.isfinite(v) and v != 0 for v in tensor)


def test_the_mock_refuses_what_triton_refuses(kserve_mock):
    def post(body: dict[str, Any]) -> tuple[int, str]:
        answer = requests.post(f"{kserve_mock.url}/v2/models/m/infer", json=body, timeout=T)
        return answer.status_code, answer.json()["error"]

    wrong_input = infer_body(["a"])
    wrong_input["inputs"][0]["name"] = "input_ids"
    assert post(wrong_input) == (400, "unexpected inference input 'input_ids' for model 'm'")
    wrong_output = infer_body(["a"])
    wrong_output["outputs"] = [{"name": "token_embeddings"}]
    assert post(wrong_output) == (400, "unexpected inference output 'token_embeddings' for model 'm'")
    wrong_type = infer_body(["a"])
    wrong_type["inputs"][0]["datatype"] = "FP32"
    assert post(wrong_type)[0] == 400
    assert requests.get(f"{kserve_mock.url}/v2/models/m/infer", timeout=T).status_code == 405


@pytest.mark.parametrize("encoding", ["float", "bytes"])
def test_kserve_runs_against_the_bundled_mock_with_no_failure(tmp_path, encoding):
    run = run_locust(
        "locustfiles/kserve.py",
        "--model",
        "mock-model",
        "--encoding-format",
        encoding,
        "--check-vectors",
        *LOAD,
        users=2,
        requests=20,
        csv=tmp_path / "run",
    )
    assert run.returncode == 0, run.stderr[-2000:]
    row = run.csv("pooling")["/v2/models/mock-model/infer"]
    assert int(row["Request Count"]) > 0 and row["Failure Count"] == "0", row
    assert row["Token Source"] == "client-estimate", "the protocol has no token count: the client's, labelled"
    assert int(row["Sequences"]) == 3 * int(row["Request Count"])


def test_a_gzipped_binary_tensor_is_read_as_tritons_is(mock_server_factory, tmp_path):
    """Triton gzips its binary tensors (head and tensor) when the client accepts gzip, as it does JSON: the mock
    with --gzip does too, and the run reads the head, the tensor and its first vector out of the stream."""
    mock = mock_server_factory("--flavor", "kserve", "--dim", "8", "--gzip")
    plain = requests.post(f"{mock.url}/v2/models/m/infer", json=infer_body(["a b", "c"], True), timeout=T,
                          headers={"Accept-Encoding": "identity"})  # fmt: skip
    zipped = requests.post(f"{mock.url}/v2/models/m/infer", json=infer_body(["a b", "c"], True), timeout=T)
    assert "content-encoding" not in plain.headers and zipped.headers["content-encoding"] == "gzip"
    assert zipped.content == plain.content  # requests inflated it
    run = run_locust("locustfiles/kserve.py", "--model", "m", "--encoding-format", "bytes", "--check-vectors", *LOAD,
                     users=1, requests=10, host=mock.url, csv=tmp_path / "run")  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    row = run.csv("pooling")["/v2/models/m/infer"]
    assert int(row["Request Count"]) == 10 and row["Failure Count"] == "0", row
    assert int(row["Vectors"]) == 30


def test_kserve_without_a_model_stops_at_start_naming_model(tmp_path):
    run = run_locust("locustfiles/kserve.py", *LOAD, users=1, run_time="3s")
    assert run.returncode == 1
    assert "--model: KServeInferUser (/v2/models/{model}/infer) names the model in its path" in run.stdout + run.stderr


def test_the_tensors_come_from_the_models_metadata_and_the_model_is_quoted_in_the_path(kserve_mock):
    plan = plan_for(pb.KServeInferUser, options("--model", "team/bge m3", *LOAD), kserve_mock.url)
    assert plan.path == "/v2/models/team%2Fbge%20m3/infer"
    body = orjson.loads(plan.requests[0].body)
    assert body["inputs"][0]["name"] == "TEXT" and body["inputs"][0]["datatype"] == "BYTES"
    assert body["inputs"][0]["shape"] == [3] == [len(body["inputs"][0]["data"])]
    assert body["outputs"] == [{"name": "EMBEDDING"}]
    binary = plan_for(pb.KServeInferUser, options("--model", "m", "--encoding-format", "bytes"), kserve_mock.url)
    assert orjson.loads(binary.requests[0].body)["outputs"] == [
        {"name": "EMBEDDING", "parameters": {"binary_data": True}}
    ]


def metadata_server(doc: Any, status: int = 200) -> HostileServer:
    return HostileServer(serve_requests(lambda _head, _body, _n: response(status, orjson.dumps(doc))))


TEXT_IN = {"name": "text", "datatype": "BYTES", "shape": [-1, 1]}


@pytest.mark.parametrize(
    ("inputs", "outputs", "status", "expected"),
    [
        (
            [TEXT_IN],
            [{"name": "a", "datatype": "FP32"}, {"name": "b", "datatype": "FP32"}],
            200,
            "--infer-output: KServeInferUser (",
        ),
        ([{"name": "input_ids", "datatype": "INT64"}], [{"name": "e", "datatype": "FP32"}], 200, "--infer-input:"),
        (None, None, 404, "--model: KServeInferUser (/v2/models/{model}/infer): cannot learn the model's tensors"),
    ],
    ids=["two-outputs", "no-text-input", "unknown-model"],
)
def test_metadata_that_does_not_say_which_tensors_stops_the_plan_naming_the_option(inputs, outputs, status, expected):
    doc = (
        {"error": "Request for unknown model: 'm' is not found"}
        if status != 200
        else {"inputs": inputs, "outputs": outputs}
    )
    server = metadata_server(doc, status)
    try:
        with pytest.raises(OptionError) as e:
            plan_for(pb.KServeInferUser, options("--model", "m"), server.url)
    finally:
        server.close()
    assert str(e.value).startswith(expected), str(e.value)


def test_a_models_input_of_shape_minus_one_one_gets_one_text_per_row():
    server = metadata_server({"inputs": [TEXT_IN], "outputs": [{"name": "emb", "datatype": "FP32"}]})
    try:
        plan = plan_for(pb.KServeInferUser, options("--model", "m", "--batch-size", "2"), server.url)
    finally:
        server.close()
    body = orjson.loads(plan.requests[0].body)
    assert body["inputs"][0]["name"] == "text" and body["inputs"][0]["shape"] == [2, 1]
    assert body["outputs"] == [{"name": "emb"}]


def test_named_tensors_ask_the_server_nothing_before_the_run():
    server = metadata_server({"error": "no metadata here"}, 404)
    try:
        plan_for(pb.KServeInferUser, options(*NAMED), server.url)
        assert server.requests == [], "--infer-input and --infer-output need no metadata"
    finally:
        server.close()


def json_answer(shape: list[int] | None = None, data: Any = None, **output: Any) -> bytes:
    shape = [2, DIM] if shape is None else shape
    data = [0.25] * math.prod(shape) if data is None else data
    tensor = {"name": "EMBEDDING", "datatype": "FP32", "shape": shape, "data": data, **output}
    return response(200, orjson.dumps({"model_name": "embedder", "model_version": "1", "outputs": [tensor]}))


def test_a_good_json_answer_counts_the_clients_tokens():
    _, ok, _ = bad_then_good(pb.KServeInferUser, json_answer(), json_answer(), *NAMED, "--check-vectors")
    assert ok["exception"] is None and ok["context"]["token_source"] == "client-estimate"
    assert ok["context"]["input_tokens"] == 8, "two inputs of four words"


@pytest.mark.parametrize(
    ("bad", "expected", "args"),
    [
        (json_answer(shape=[3, DIM]), "expected 2 embeddings, got 3", ()),
        (json_answer(data=[0.25] * 7), "output 'EMBEDDING' holds 7 numbers where its shape [2, 4] says 8", ()),
        (json_answer(name="other"), "answer has no output 'EMBEDDING'", ()),
        (json_answer(datatype="FP16"), "output 'EMBEDDING' is 'FP16', expected FP32", ()),
        (json_answer(shape=[2, "4"], data=[0.25] * 8), "output 'EMBEDDING' has a shape that is not whole numbers", ()),
        (
            json_answer(shape=[2, 2**41], data=[0.25] * 8),
            "output 'EMBEDDING' has a shape that is not whole numbers",
            (),
        ),
        (json_answer(shape=[2, 8]), "output 'EMBEDDING' has 8 dimensions, expected 4", ("--dimensions", "4")),
        (json_answer(data=[0.0] * 8), "zero", ("--check-vectors",)),
    ],
    ids=["count", "data-length", "missing-output", "datatype", "shape-type", "shape-huge", "dimensions", "zeros"],
)
def test_a_bad_json_answer_is_one_failed_request_with_its_message(bad, expected, args):
    assert_failed_then_ok(pb.KServeInferUser, bad, json_answer(), expected, *NAMED, *args)


def binary_answer(
    rows: int = 2,
    size: int | None = None,
    tensor: bytes | None = None,
    head_length: str | None = None,
    content_type: str | None = "application/octet-stream",
    **output: Any,
) -> bytes:
    size = rows * DIM * 4 if size is None else size
    head = orjson.dumps(
        {
            "model_name": "embedder",
            "outputs": [
                {
                    "name": "EMBEDDING",
                    "datatype": "FP32",
                    "shape": [rows, DIM],
                    "parameters": {"binary_data_size": size},
                    **output,
                }
            ],
        }
    )
    tensor = struct.pack(f"<{rows * DIM}f", *([0.5] * (rows * DIM))) if tensor is None else tensor
    length = str(len(head)) if head_length is None else head_length
    headers = [("Inference-Header-Content-Length", length)] if head_length != "" else []
    return response(200, head + tensor, headers=headers, content_type=content_type)


BYTES = ("--encoding-format", "bytes")


def test_a_good_binary_answer_is_read_to_its_end_and_its_tensor_dropped():
    _, ok, _ = bad_then_good(pb.KServeInferUser, binary_answer(), binary_answer(), *NAMED, *BYTES, "--check-vectors")
    assert ok["exception"] is None and ok["context"]["token_source"] == "client-estimate"
    assert ok["response_length"] == len(binary_answer()) - binary_answer().index(b"\r\n\r\n") - 4


def test_an_untyped_binary_answer_is_read_as_kserves_python_server_sends_it():
    """KServe 0.21's ModelServer sends its binary tensors with no Content-Type: read as the binary form; an
    answer of another type, or an untyped answer where JSON was asked, is still one failed request."""
    untyped = binary_answer(content_type=None)
    _, ok, _ = bad_then_good(pb.KServeInferUser, untyped, untyped, *NAMED, *BYTES, "--check-vectors")
    assert ok["exception"] is None
    wrong = binary_answer(content_type="text/plain")
    expected = "wrong content type: expected application/octet-stream, got text/plain"
    assert_failed_then_ok(pb.KServeInferUser, wrong, untyped, expected, *NAMED, *BYTES)
    untyped_json = response(200, json_answer().split(b"\r\n\r\n", 1)[1], content_type=None)
    expected = "wrong content type: expected application/json, got none"
    assert_failed_then_ok(pb.KServeInferUser, untyped_json, json_answer(), expected, *NAMED)


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        (binary_answer(size=2 * DIM * 4 + 4), "binary_data_size is 36 bytes where its shape [2, 4] of FP32 is 32"),
        (
            binary_answer(tensor=b"\0" * (2 * DIM * 4 - 4)),
            "28 bytes of tensors followed the JSON head, binary_data_size says 32",
        ),
        (binary_answer(rows=3), "expected 2 embeddings, got 3"),
        (binary_answer(head_length=""), "no Inference-Header-Content-Length header in the binary answer"),
        (binary_answer(head_length="x1"), "Inference-Header-Content-Length header is not a whole number: 'x1'"),
        (binary_answer(head_length=str(2**30)), "Inference-Header-Content-Length header is implausible"),
        (binary_answer(head_length="10"), "the JSON head of the binary answer is not valid JSON"),
        (binary_answer(parameters={}), "output 'EMBEDDING' has no parameters.binary_data_size"),
        (binary_answer(tensor=struct.pack("<8f", *([float("nan")] * 8))), "NaN"),
    ],
    ids=["size-vs-shape", "size-vs-body", "count", "no-header", "bad-header", "huge-header", "head", "no-size", "nan"],
)
def test_a_bad_binary_answer_is_one_failed_request_with_its_message(bad, expected):
    assert_failed_then_ok(pb.KServeInferUser, bad, binary_answer(), expected, *NAMED, *BYTES, "--check-vectors")


def test_a_large_json_answer_read_lazily_is_checked_the_same(kserve_mock):
    """Past 32 KiB a float answer is read by lazyjson, where every array of numbers (the shape too) is lazy."""
    args = ("--model", "m", "--batch-size", "32", "--check-vectors", "--dimensions", "384")
    run = Run(pb.KServeInferUser, kserve_mock.url, *args, mock_headers={"x-mock-dim": "384"})
    event = run.one()
    assert event["exception"] is None, failure_text(event)
    assert event["response_length"] > 32 * 1024 and event["context"]["sequences"] == 32


def test_the_pattern_route_is_counted_and_faulted_as_a_pooling_route(mock_server_factory):
    mock = mock_server_factory("--flavor", "kserve", "--dim", "8")
    url = f"{mock.url}/v2/models/m/infer"
    assert requests.post(url, json=infer_body(["a b", "c"]), timeout=T).status_code == 200
    faulted = requests.post(url, json=infer_body(["a"]), headers={"x-mock-fault": "status-503"}, timeout=T)
    assert faulted.status_code == 503
    assert requests.get(f"{mock.url}/v2/models/m", timeout=T).status_code == 200, "metadata: a service route"
    stats = mock.stats()
    assert stats["routes"]["/v2/models/m/infer"] == {
        "requests": 2,
        "ok": 1,
        "prompt_tokens": 3,
        "sequences": 2,
        "bytes_sent": stats["routes"]["/v2/models/m/infer"]["bytes_sent"],
        "bytes_received": stats["routes"]["/v2/models/m/infer"]["bytes_received"],
    }
    assert stats["faults"] == {"status-503": 1} and "/v2/models/m" not in stats["routes"]
