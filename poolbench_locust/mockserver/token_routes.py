"""vLLM's pooling tasks on the mock: /pooling's `task` (embed, classify, token_embed, token_classify) and a
token_embed model's /v1/embeddings, whose answers hold one row per input token (WIRE.md).

The model's task is the mock's `task` (--task, `x-mock-task`); without one, /pooling answers whichever task
it is asked. Rows are the mock's word count of each input (as its usage), or one per chunk of
`late_chunking_params.chunk_size` of them; token_classify rows hold one logit per label.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from poolbench_locust.mockserver import vectors
from poolbench_locust.mockserver.calls import AnswerDraft, BadRequest, Call
from poolbench_locust.mockserver.calls import dim as _dim
from poolbench_locust.mockserver.calls import kept as _kept
from poolbench_locust.mockserver.calls import kind as _kind
from poolbench_locust.mockserver.calls import model as _model
from poolbench_locust.wire import BINARY_ENCODINGS, DTYPE_SIZES, EMBED_AND_TOKEN_CLASSIFY_REFUSED, POOLING_TASKS

LABELS = 2
"""Classes of the mock's classifier: /classify's LABEL_0 and LABEL_1."""
REMOVED_TASKS: Mapping[str, str] = {
    "score": "`score` task was removed; use `classify` instead.",
    "encode": "`encode` task was removed; use `token_embed` or `token_classify` instead.",
}
"""vLLM 0.34's words for a task it no longer takes (vllm/tasks.py)."""
MAX_ROWS_BYTES = 1 << 30
"""Bytes of rows one answer may hold: a typo in a batch size must not take the machine's memory."""


def pooling_task(call: Call) -> str:
    """The task a /pooling request runs: its `task`, else the model's; vLLM's 400 for one it cannot."""
    asked = call.body.get("task")
    model_task = call.controls.task
    if asked is None:
        asked = model_task or "embed"
    if not isinstance(asked, str):
        raise BadRequest("task: Input should be a string")
    if asked in REMOVED_TASKS:
        raise BadRequest(REMOVED_TASKS[asked])
    if asked == "embed&token_classify":  # BGE-M3's combined task: only through its IO processor plugin
        raise BadRequest(EMBED_AND_TOKEN_CLASSIFY_REFUSED)
    if asked not in POOLING_TASKS or (model_task is not None and asked != model_task):
        supported = (model_task,) if model_task is not None else POOLING_TASKS
        raise BadRequest(f"Unsupported task: {asked!r} Supported tasks: {supported}")
    return asked


def late_chunk(call: Call, task: str) -> int | None:
    """`late_chunking_params.chunk_size`: one row per chunk of that many tokens, a token_embed model's only."""
    params = call.body.get("late_chunking_params")
    if params is None:
        return None
    if task != "token_embed":
        raise BadRequest("late_chunking_params is only supported for the token_embed task")
    size = params.get("chunk_size") if isinstance(params, Mapping) else None
    if type(size) is not int or size < 1:
        raise BadRequest("late_chunking_params.chunk_size must be a positive integer")
    if call.body.get("truncate_prompt_tokens") is not None:
        raise BadRequest("Late chunking does not support input padding, truncation or renderer text normalization")
    return size


def token_embed_model(call: Call) -> bool:
    """Whether /v1/embeddings is a token_embed model's: another router, one row per token."""
    return call.controls.task == "token_embed"


def check_token_embeddings_request(call: Call) -> None:
    """What a token_embed model's /v1/embeddings refuses (WIRE.md): an encoding other than float, dimensions."""
    if (call.body.get("encoding_format") or "float") != "float":
        raise BadRequest("encoding_format must be 'float' for token embedding (token_embed) models")
    if call.body.get("dimensions") is not None:
        raise BadRequest("dimensions is not supported for token embedding (token_embed) models")


def answer(
    call: Call,
    counts: Sequence[int],
    task: str,
    item: str,
    key: str,
    how: tuple[str, str, str],
    chunk: int | None = None,
) -> AnswerDraft:
    """The answer of a task to inputs of `counts` tokens each (after any cut): token_embed and token_classify
    a matrix per input, classify a vector of label probabilities; in the encoding `how` (format, dtype, endianness)."""
    encoding, dtype, endianness = how
    tokens = sum(counts)
    if task == "classify":
        rows: list[int] | None = None
        width = LABELS
    else:
        rows = [-(-n // chunk) if chunk else n for n in counts]
        width = LABELS if task == "token_classify" else _dim(call)
    kind = _kind(call)
    indices = _kept(call, list(range(len(counts))))
    per_item = [1 if rows is None else rows[i] for i in indices]
    if sum(per_item) * width * DTYPE_SIZES[dtype] > MAX_ROWS_BYTES:
        raise BadRequest(f"{sum(per_item)} rows x {width} is more than the mock's {MAX_ROWS_BYTES} byte limit")
    head = {"id": f"pool-{time.time_ns():x}", "created": int(time.time()), "model": _model(call)}
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    if encoding in BINARY_ENCODINGS:
        row = vectors.raw(width, dtype, endianness, kind)
        raw = b"".join(row * n for n in per_item)
        metadata = None
        if encoding == "bytes":
            data, start = [], 0
            for i, n in zip(indices, per_item, strict=True):
                shape = [width] if rows is None else [n, width]
                data.append({"index": i, "embed_dtype": dtype, "endianness": endianness, "start": start})
                start += n * len(row)
                data[-1] |= {"end": start, "shape": shape}
            metadata = {**head, "data": data, "usage": usage}
        return AnswerDraft(raw=raw, metadata=metadata, tokens=tokens, sequences=len(counts))
    if encoding == "float":
        one = orjson.Fragment(vectors.json_floats(width, kind))
        values: list[Any] = [one if rows is None else [one] * n for n in per_item]
    else:  # base64 of each input's whole array
        row = vectors.raw(width, dtype, endianness, kind)
        values = [base64.b64encode(row * n).decode() for n in per_item]
    data = [{"index": i, "object": item, key: value} for i, value in zip(indices, values, strict=True)]
    return AnswerDraft({**head, "object": "list", "data": data, "usage": usage}, tokens=tokens, sequences=len(counts))
