"""The KServe v2 / Triton Open Inference Protocol (WIRE.md, "KServe v2 / Triton"; Triton's
src/http_server.cc and docs/protocol/extension_binary_data.md).

The route names the model (`/v2/models/{model}/infer`); the model's input and output tensors' names come
from `GET /v2/models/{model}` once when the plan is made, unless --infer-input and --infer-output give
them. The texts go as one BYTES tensor of shape [n]; the embeddings come back as one FP32 tensor of shape
[n, dim], flattened in JSON, or with --encoding-format bytes as Triton's binary tensor extension: a JSON
head of `Inference-Header-Content-Length` bytes, then the raw little-endian tensor, streamed and dropped.
The protocol has no token count: tokens are the client's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import orjson

from poolbench_locust.endpoints.forms import SERVER_HEADERS, JsonForm, StreamedForm, header_number
from poolbench_locust.endpoints.spec import (
    NO_TOKENS,
    AnswerError,
    Endpoint,
    Inputs,
    ParsedAnswer,
    Raw,
    ServerAsk,
    Values,
    items_of,
)
from poolbench_locust.lazyjson import ARRAY
from poolbench_locust.options import OptionError, Settings

HEAD_LENGTH_HEADER = "inference-header-content-length"
MAX_HEAD_BYTES = 1024 * 1024
"""The JSON head of a binary answer at most: a few hundred bytes for one output."""
VECTOR_HEAD_BYTES = 1024 * 1024
"""Bytes of the tensor kept past the head for --check-vectors, before the dimension is known."""
MAX_ELEMENTS = 1 << 40
"""A tensor of more elements than this is not an answer to a load test's request."""
MAX_NAME = 256
MAX_TENSORS = 64
FP32 = "FP32"
ASK_TIMEOUT = 10.0
"""Seconds the model's metadata may take at most (or --request-timeout, if shorter)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Tensors:
    """The model's input that takes the texts and output that holds the embeddings."""

    input: str
    output: str
    input_tail: tuple[int, ...] = ()
    """The input's dimensions after the batch one, when the model declares some (Triton's [-1, 1])."""


def _body(tensors: Tensors, binary: bool) -> Callable[[Inputs, Settings], dict[str, Any]]:
    output: dict[str, Any] = {"name": tensors.output}
    if binary:
        output["parameters"] = {"binary_data": True}

    def body(inputs: Inputs, settings: Settings) -> dict[str, Any]:
        texts = list(inputs.texts)
        tensor = {"name": tensors.input, "shape": [len(texts), *tensors.input_tail], "datatype": "BYTES", "data": texts}
        return {"inputs": [tensor], "outputs": [output]}

    return body


def _shape(value: Any, name: str) -> list[int]:
    # a large answer is read by lazyjson: its shape, an array of numbers, comes as `Numbers`
    if not isinstance(value, ARRAY) or not 1 <= len(value) <= 8:
        raise AnswerError(f"output {name!r} has no shape list")
    shape: list[int] = list(value)
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= MAX_ELEMENTS:
            raise AnswerError(f"output {name!r} has a shape that is not whole numbers")
    if math.prod(shape) > MAX_ELEMENTS:
        raise AnswerError(f"output {name!r} has an implausible shape")
    return shape


def _output(doc: Any, name: str) -> Mapping[str, Any]:
    """The named output of the answer, its datatype checked."""
    for item in items_of(doc, "outputs"):
        if isinstance(item, Mapping) and item.get("name") == name:
            datatype = item.get("datatype")
            if datatype != FP32:
                raise AnswerError(f"output {name!r} is {str(datatype)[:20]!r}, expected FP32")
            return item
    raise AnswerError(f"answer has no output {name!r}")


def _dims(shape: list[int], name: str, settings: Settings) -> int:
    dim = math.prod(shape[1:])
    if settings.validate and settings.dimensions and dim != settings.dimensions:
        raise AnswerError(f"output {name!r} has {dim} dimensions, expected {settings.dimensions}")
    return dim


def _json_answer(tensors: Tensors, settings: Settings) -> Callable[[Any], ParsedAnswer]:
    name = tensors.output

    def read(doc: Any) -> ParsedAnswer:
        output = _output(doc, name)
        shape = _shape(output.get("shape"), name)
        data = output.get("data")
        if not isinstance(data, ARRAY):
            raise AnswerError(f"output {name!r} has no 'data' list")
        if len(data) != math.prod(shape):
            raise AnswerError(
                f"output {name!r} holds {len(data)} numbers where its shape {shape} says {math.prod(shape)}"
            )
        dim = _dims(shape, name, settings)
        first = data[:dim] if settings.check_vectors and dim and shape[0] else None  # built only for the check
        answer = ParsedAnswer(shape[0], None, (first,) if first is not None else ())
        answer.values = lambda position, _body: _json_row(data, dim, shape[0], position)
        return answer

    return read


def _json_row(data: Any, dim: int, rows: int, position: int) -> Values:
    """Row `position` of a JSON tensor [rows, dim], flattened (checked: its length is rows x dim)."""
    if not dim or not 0 <= position < rows:
        raise AnswerError(f"the tensor holds no row {position}")
    return Values("vectors", list(data[position * dim : (position + 1) * dim]))


def _head_length(headers: Any) -> int:
    length = header_number(headers, HEAD_LENGTH_HEADER, MAX_HEAD_BYTES, "Inference-Header-Content-Length")
    if length is None:
        raise AnswerError("no Inference-Header-Content-Length header in the binary answer")
    return length


class BinaryTensors(StreamedForm):
    """Triton's binary tensor extension: a JSON head of `Inference-Header-Content-Length` bytes, then the raw
    little-endian tensors, streamed and dropped but for the first vector (--check-vectors)."""

    untyped_ok = True
    """Triton types them application/octet-stream; KServe 0.21's Python ModelServer sends them with no
    Content-Type at all (its REST layer returns the bytes as a bare Response)."""

    def __init__(self, tensors: Tensors, settings: Settings) -> None:
        self._name = tensors.output
        self._settings = settings
        vector = (
            (settings.dimensions * 4 if settings.dimensions else VECTOR_HEAD_BYTES) if settings.check_vectors else 0
        )
        self._vector = vector

    def head(self, headers: Any, hidden: int | None) -> tuple[int, Any]:
        length = _head_length(headers)
        return length + self._vector, length

    def read(self, headers: Any, note: Any, body: bytes, size: int, expected: int) -> ParsedAnswer:
        length, name, settings = note, self._name, self._settings
        if size < length:
            raise AnswerError(f"binary answer of {size} bytes is shorter than its JSON head ({length} bytes)")
        try:
            doc = orjson.loads(body[:length])
        except orjson.JSONDecodeError:
            raise AnswerError("the JSON head of the binary answer is not valid JSON") from None
        output = _output(doc, name)
        shape = _shape(output.get("shape"), name)
        declared = 0
        for item in items_of(doc, "outputs"):
            parameters = item.get("parameters") if isinstance(item, Mapping) else None
            value = parameters.get("binary_data_size") if isinstance(parameters, Mapping) else None
            if item is output and value is None:
                raise AnswerError(f"output {name!r} has no parameters.binary_data_size")
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_ELEMENTS * 8:
                    raise AnswerError("binary_data_size is not a whole number of bytes")
                declared += value
                if item is output and value != math.prod(shape) * 4:
                    raise AnswerError(
                        f"output {name!r} binary_data_size is {value} bytes where its shape {shape} of FP32 "
                        f"is {math.prod(shape) * 4}"
                    )
        if size - length != declared:
            raise AnswerError(
                f"{size - length} bytes of tensors followed the JSON head, binary_data_size says {declared}"
            )
        dim = _dims(shape, name, settings)
        rows = shape[0]
        answer = ParsedAnswer(rows, values=lambda position, kept: _binary_row(kept, length, dim, rows, position))
        if settings.check_vectors and dim and shape[0]:  # our tensor is the first binary one that follows
            answer.raw, answer.raw_dtype, answer.raw_endianness = body[length : length + dim * 4], "float32", "little"
        return SERVER_HEADERS.read(headers, answer)


def _binary_row(body: bytes | None, length: int, dim: int, rows: int, position: int) -> Values:
    """Row `position` of our FP32 tensor, the first binary one after the JSON head (little-endian)."""
    if body is None:
        raise ValueError("the binary body was not kept")
    if not dim or not 0 <= position < rows or len(body) < length + (position + 1) * dim * 4:
        raise AnswerError(f"the tensor holds no row {position}")
    start = length + position * dim * 4
    return Values("vectors", Raw(body[start : start + dim * 4], "float32", "little"))


def _named(value: Any) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= MAX_NAME else None


def _tensors(doc: Any, key: str) -> list[Mapping[str, Any]]:
    found = doc.get(key) if isinstance(doc, Mapping) else None
    if not isinstance(found, list):
        raise ValueError(f"the model's metadata has no {key!r} list")
    return [t for t in found[:MAX_TENSORS] if isinstance(t, Mapping) and _named(t.get("name"))]


def _listed(tensors: list[Mapping[str, Any]]) -> str:
    shown = ", ".join(f"{t['name'][:40]} ({str(t.get('datatype'))[:10]})" for t in tensors[:8])
    return shown or "none"


def _pick(tensors: list[Mapping[str, Any]], datatype: str, flag: str, what: str, model: str) -> Mapping[str, Any]:
    fitting = [t for t in tensors if t.get("datatype") == datatype]
    if len(fitting) == 1:
        return fitting[0]
    if not fitting:
        raise OptionError(
            flag, f"model {model!r} has no {datatype} {what} (its {what}s: {_listed(tensors)}); name one with {flag}"
        )
    raise OptionError(
        flag, f"model {model!r} has {len(fitting)} {datatype} {what}s ({_listed(fitting)}): choose one with {flag}"
    )


def _tail(tensor: Mapping[str, Any] | None) -> tuple[int, ...]:
    """Dimensions after the batch one, when they are all 1 ([-1, 1]: one text per row); else none."""
    shape = tensor.get("shape") if tensor is not None else None
    if isinstance(shape, list) and 1 < len(shape) <= 8 and all(type(d) is int and d == 1 for d in shape[1:]):
        return tuple(shape[1:])
    return ()


def _settle(endpoint: Endpoint, settings: Settings, ask: ServerAsk | None) -> Endpoint:
    """The endpoint bound to the model's tensors: the options', else those its metadata describes."""
    input_name, output_name = settings.infer_input or "", settings.infer_output or ""
    tail: tuple[int, ...] = ()
    if ask is not None and not (input_name and output_name):
        model = settings.model.strip()
        try:
            doc = ask(f"/v2/models/{quote(model, safe='')}", min(settings.request_timeout, ASK_TIMEOUT))
            inputs, outputs = _tensors(doc, "inputs"), _tensors(doc, "outputs")
        except (OSError, ValueError) as e:
            raise OptionError(
                "--model", f"cannot learn the model's tensors: {e}; or name them with --infer-input and --infer-output"
            ) from None
        chosen = [t for t in inputs if t["name"] == input_name] if input_name else []
        given = chosen[0] if chosen else None
        if not input_name:
            given = _pick(inputs, "BYTES", "--infer-input", "input", model)
            input_name = given["name"]
        tail = _tail(given)
        if not output_name:
            output_name = _pick(outputs, FP32, "--infer-output", "output", model)["name"]
    tensors = Tensors(input_name, output_name, tail)
    binary = settings.encoding_format == "bytes"
    return dataclasses.replace(
        endpoint,
        body=_body(tensors, binary),
        answer=_json_answer(tensors, settings),
        forms=lambda bound, settings, _: BinaryTensors(tensors, settings) if binary else JsonForm(bound, settings),
        settle=None,
    )


def _unsettled(_: Any) -> ParsedAnswer:
    raise RuntimeError("KServe's endpoint was not bound to the model's tensors")  # a bug: every plan settles it


KSERVE_INFER = Endpoint(
    route="/v2/models/{model}/infer",
    shape="texts",
    server="kserve",
    body=_body(Tensors("", ""), False),
    answer=_unsettled,
    encodings=frozenset({"float", "bytes"}),
    tokens=NO_TOKENS,  # the protocol has no token count: the client's, labelled as such
    vectors=True,
    settle=_settle,
    cannot_send={
        "--embed-dtype": "KServe's tensors here are FP32: leave --embed-dtype at float32",
        "--endianness": "the binary tensor extension is little-endian: leave --endianness at native",
        "--count-tokens-with-server": "KServe has no vLLM /tokenize route; count with --tokenizer instead",
    },
)
