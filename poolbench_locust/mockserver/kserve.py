"""The KServe v2 / Triton Open Inference Protocol, as Triton's src/http_server.cc answers it (WIRE.md, "KServe
v2 / Triton"): the model's metadata, and inference on one BYTES input of texts giving one FP32 output of
shape [n, dim], in JSON or, when the output asks `binary_data`, in the binary tensor extension
(docs/protocol/extension_binary_data.md): `Inference-Header-Content-Length` bytes of JSON, then the raw
little-endian tensor, as application/octet-stream, gzipped with --gzip like a JSON answer (Triton 2.x
compresses either when the client accepts gzip). Errors are `{"error": str}`. Any model name is served.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

import orjson

from poolbench_locust.mockserver import vectors
from poolbench_locust.mockserver.calls import AnswerDraft, Call, kept, per_input
from poolbench_locust.mockserver.reply import Reply
from poolbench_locust.wire import count_prompts

INPUT = "TEXT"
OUTPUT = "EMBEDDING"
HEAD_LENGTH_HEADER = "inference-header-content-length"
MAX_ANSWER = 1 << 30
"""Bytes of tensor one answer may hold: a typo in a batch size must not take the machine's memory."""

MODEL_PATH = re.compile(r"/v2/models/(?P<model>[^/]+)")
INFER_PATH = re.compile(r"/v2/models/(?P<model>[^/]+)/infer")


def _error(status: int, message: str) -> Reply:
    return Reply(status, orjson.dumps({"error": message}))


def _model(call: Call) -> str:
    return unquote(call.params.get("model", ""))


def metadata(call: Call) -> Reply:
    doc = {
        "name": _model(call),
        "versions": ["1"],
        "platform": "python",
        "inputs": [{"name": INPUT, "datatype": "BYTES", "shape": [-1]}],
        "outputs": [{"name": OUTPUT, "datatype": "FP32", "shape": [-1, call.controls.dim]}],
    }
    return Reply(200, orjson.dumps(doc))


def _texts(call: Call, model: str) -> list[str] | Reply:
    inputs = call.body.get("inputs")
    if not isinstance(inputs, list) or not all(isinstance(i, Mapping) for i in inputs):
        return _error(400, "Unable to parse 'inputs': expected an array of objects")
    for tensor in inputs:
        if tensor.get("name") != INPUT:
            return _error(400, f"unexpected inference input '{str(tensor.get('name'))[:64]}' for model '{model}'")
    if len(inputs) != 1:
        return _error(400, f"expected 1 inputs but got {len(inputs)} inputs for model '{model}'")
    tensor = inputs[0]
    if tensor.get("datatype") != "BYTES":
        datatype = str(tensor.get("datatype"))[:16]
        return _error(400, f"inference input '{INPUT}' data-type is '{datatype}', but model '{model}' expects 'BYTES'")
    shape, data = tensor.get("shape"), tensor.get("data")
    if not isinstance(shape, list) or len(shape) != 1 or type(shape[0]) is not int:
        return _error(400, f"unexpected shape for input '{INPUT}' for model '{model}'. Expected [-1], got {shape}")
    if not isinstance(data, list) or not all(isinstance(t, str) for t in data):
        return _error(400, f"Unable to parse 'data': input '{INPUT}' expects strings")
    if len(data) != shape[0]:
        return _error(
            400, f"unexpected number of string elements {len(data)} for inference input '{INPUT}', expecting {shape[0]}"
        )
    return data


def _binary(call: Call, model: str) -> bool | Reply:
    """Whether the output is asked as binary data; an error Reply for an output the model does not have."""
    outputs = call.body.get("outputs", [])
    if not isinstance(outputs, list) or not all(isinstance(o, Mapping) for o in outputs):
        return _error(400, "Unable to parse 'outputs': expected an array of objects")
    parameters = call.body.get("parameters")
    binary = isinstance(parameters, Mapping) and parameters.get("binary_data_output") is True
    for output in outputs:
        if output.get("name") != OUTPUT:
            return _error(400, f"unexpected inference output '{str(output.get('name'))[:64]}' for model '{model}'")
        asked = output.get("parameters")
        if isinstance(asked, Mapping) and "binary_data" in asked:
            binary = asked["binary_data"] is True
    return binary


def infer(call: Call) -> AnswerDraft | Reply:
    model = _model(call)
    texts = _texts(call, model)
    if isinstance(texts, Reply):
        return texts
    binary = _binary(call, model)
    if isinstance(binary, Reply):
        return binary
    answered = kept(call, texts)
    dim, rows = call.controls.dim, len(answered)
    if len(texts) * dim * 4 > MAX_ANSWER:
        return _error(400, f"{len(texts)} x {dim} x FP32 is more than the mock's {MAX_ANSWER} byte limit")
    tokens = count_prompts(texts)
    output: dict[str, Any] = {"name": OUTPUT, "datatype": "FP32", "shape": [rows, dim]}
    head = {"model_name": model, "model_version": "1", "outputs": [output]}
    if binary:
        output["parameters"] = {"binary_data_size": rows * dim * 4}
        json_head = orjson.dumps(head)
        tensor = b"".join(per_input(call, answered, lambda k: vectors.raw(dim, "float32", "little", k)))
        headers = {HEAD_LENGTH_HEADER: str(len(json_head))}
        return AnswerDraft(raw=json_head + tensor, gzip_raw=True, headers=headers, tokens=tokens, sequences=len(texts))
    row_of = per_input(call, answered, lambda k: vectors.json_floats(dim, k)[1:-1])
    output["data"] = orjson.Fragment(b"[" + b",".join(row_of) + b"]")
    return AnswerDraft(head, tokens=tokens, sequences=len(texts))
