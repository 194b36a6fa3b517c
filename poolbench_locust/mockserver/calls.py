"""One call of a mock route, and what its handler answers: shared by every family's module (vllm.py,
tei.py, infinity.py, ...) and the route table (routes.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from poolbench_locust.mockserver import vectors
from poolbench_locust.mockserver.config import Controls, MockConfig
from poolbench_locust.mockserver.faults import Answered
from poolbench_locust.mockserver.reply import Reply

MAX_DIM = 1 << 20
T = TypeVar("T")


class BadRequest(Exception):
    """The request is not one the real server would accept: answered 400 with vLLM's error JSON."""


@dataclass(slots=True)
class Call:
    body: Any
    controls: Controls
    config: MockConfig
    fault: str | None = None
    params: Mapping[str, str] = field(default_factory=dict)
    """The parts of the path a pattern route names (KServe's model in /v2/models/{model}/infer)."""
    drift: bool = False
    """--drift-above acts: every vector of the answer is the drifted one."""
    flip: bool = False
    """--flip-above acts: a ranking's top two scores trade places."""
    answered: Answered | None = None
    """--cache-drift's memory of the inputs answered (None: the flag is off)."""
    drifted: int = 0
    """Vectors of the answer drifted by --drift-above (what /mock/stats' `drift` counts)."""
    cache_drifted: int = 0
    """Vectors of the answer drifted by --cache-drift: inputs answered before."""
    flipped: int = 0
    """Rankings of the answer whose top two --flip-above swapped."""


@dataclass(slots=True)
class AnswerDraft:
    """What a handler answers, before `render` serialises it and applies the content faults into a `Reply`."""

    doc: Any = None
    raw: bytes | None = None
    """The body of a bytes/bytes_only answer (then `doc` is unused)."""
    gzip_raw: bool = False
    """`raw` is gzipped like a JSON answer (--gzip, a client that accepts it): Triton compresses its binary
    tensors as it does its JSON; vLLM's bytes answers never are."""
    metadata: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    tokens: int = 0
    sequences: int = 0
    prompts: tuple[tuple[Any, int], ...] = ()
    """Each prompt the engine ran (a text, a query-document pair) and its tokens, where the route says them:
    what vLLM's prefix cache is looked up with (metrics.PrefixCache)."""


Handler = Callable[[Call], "AnswerDraft | Reply"]


def required(call: Call, name: str) -> Any:
    if name not in call.body:
        raise BadRequest(f"Field required: {name!r}")
    return call.body[name]


def model(call: Call) -> str:
    value = call.body.get("model") or call.config.model
    if not isinstance(value, str):
        raise BadRequest("'model' must be a string")
    return value


def dim(call: Call, name: str = "dimensions") -> int:
    value = call.body.get(name)
    if value is None:
        return call.controls.dim
    if type(value) is not int or not 1 <= value <= MAX_DIM:
        raise BadRequest(f"{name!r} must be an integer in 1..{MAX_DIM}")
    return value


def kind(call: Call) -> vectors.Kind:
    """The kind of every vector of the answer, before --cache-drift: a fault's, drifted, or the honest one."""
    if call.fault == "zero-vectors":
        return "zero"
    if call.fault == "nan-vectors":
        return "nan"
    return "drift" if call.drift else "values"


def kinds(call: Call, inputs: Sequence[Any]) -> list[vectors.Kind]:
    """Each input's vector kind: the call's, or under --cache-drift the drifted one for an input answered before
    (every input is remembered as answered, whichever kind it gets)."""
    whole = kind(call)
    if whole == "drift":
        call.drifted += len(inputs)
    if call.answered is None:
        return [whole] * len(inputs)
    each: list[vectors.Kind] = ["drift" if call.answered.again(p) and whole == "values" else whole for p in inputs]
    if whole == "values":
        call.cache_drifted += each.count("drift")
    return each


def drifting(call: Call, inputs: Sequence[Any]) -> list[bool]:
    """Whether each input's answer drifts (--drift-above under load, --cache-drift on a repeat), for the
    answers that hold no vector: a classification's probabilities swapped, a sparse vector turned (`kinds`)."""
    return [k == "drift" for k in kinds(call, inputs)]


def each_of(each: list[vectors.Kind], make: Callable[[vectors.Kind], T]) -> list[T]:
    """`make(kind)` for each kind, made once per kind: an answer's vectors stay a few shared objects."""
    made = {k: make(k) for k in set(each)}
    return [made[k] for k in each]


def per_input(call: Call, inputs: Sequence[Any], make: Callable[[vectors.Kind], T]) -> list[T]:
    """`make(kind)` for each input answered, of its kind (`kinds`)."""
    return each_of(kinds(call, inputs), make)


def kept(call: Call, items: list[Any]) -> list[Any]:
    """The items answered: one fewer under the fewer-embeddings fault."""
    return items[:-1] if call.fault == "fewer-embeddings" else items
