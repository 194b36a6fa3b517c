"""The server's configuration, and the per-request controls that override it (`x-mock-*` headers)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from poolbench_locust.mockserver.faults import FAULTS
from poolbench_locust.wire import POOLING_TASKS

Flavor = Literal["vllm", "infinity", "tei", "sglang", "ollama", "nim", "kserve", "cohere", "voyage", "llamacpp"]
FLAVORS: tuple[str, ...] = get_args(Flavor)
"""Each server family's answer forms (endpoints/spec.py's `Server`): where two servers share a route, the
flavor says whose answer the mock gives."""
INFINITY_USAGE: tuple[str, ...] = ("chars", "tokens")
INFINITY_DTYPES: tuple[str, ...] = ("float32", "int8", "uint8", "binary", "ubinary")
"""Infinity's --embedding-dtype: the mock's Infinity answers in the one its config names."""
DEFAULT_STALL_MS = 30000.0
MAX_MODEL_LEN = 8192
"""The model's context length the mock's vLLM serves by default (--max-model-len)."""
WRITES: tuple[str, ...] = ("sized", "one", "chunk", "split")
"""How an answer is cut into writes (http11.send_reply): the client's reads follow the server's writes."""
MAX_CHUNKS = 65536


class ControlError(ValueError):
    """A config value or an `x-mock-*` header the mock cannot honour."""


@dataclass(frozen=True)
class MockConfig:
    ttfb_ms: float = 0.0
    body_ms: float = 0.0
    dim: int = 384
    model: str = "mock-model"
    flavor: Flavor = "vllm"
    faults: Mapping[str, float] = field(default_factory=dict)
    """Fault name -> probability per pooling request; at most one fault is drawn per request."""
    seed: int = 0
    gzip: bool = False
    infinity_usage: Literal["chars", "tokens"] = "chars"
    task: str | None = None
    """The model's pooling task (vLLM's): /pooling refuses another, and a token_embed model's /v1/embeddings
    answers one row per token. None: a model that answers whichever task /pooling names (embed by default)."""
    infinity_dtype: str = "float32"
    drift_above: int | None = None
    """More requests than this in flight: vectors drift (faults.py). None: never."""
    cache_drift: bool = False
    """An input answered before gets a drifted vector (faults.py)."""
    flip_above: int | None = None
    """More requests than this in flight: a ranking's top two scores trade places (faults.py). None: never."""
    max_model_len: int = MAX_MODEL_LEN
    """The model's context length, as vLLM's: a longer prompt is refused (400) unless truncated; /v1/models
    and /tokenize say it."""
    writes: str = "sized"
    """How an answer is cut into writes (one of WRITES; http11.send_reply says each)."""
    chunks: int = 1
    """The chunks a chunked body (a binary answer) is framed in, as a streaming response writes them."""

    def __post_init__(self) -> None:
        if self.ttfb_ms < 0 or self.body_ms < 0:
            raise ControlError("ttfb_ms and body_ms must be >= 0")
        if self.dim < 1:
            raise ControlError("dim must be >= 1")
        if self.max_model_len < 1:
            raise ControlError("max_model_len must be >= 1")
        if self.writes not in WRITES:
            raise ControlError(f"writes must be one of {', '.join(WRITES)}")
        if not 1 <= self.chunks <= MAX_CHUNKS:
            raise ControlError(f"chunks must be in 1..{MAX_CHUNKS}")
        if self.flavor not in FLAVORS:
            raise ControlError(f"flavor must be one of {', '.join(FLAVORS)}")
        if self.task is not None and self.task not in POOLING_TASKS:
            raise ControlError(f"task must be one of {', '.join(POOLING_TASKS)}")
        if self.infinity_usage not in INFINITY_USAGE:
            raise ControlError(f"infinity_usage must be one of {', '.join(INFINITY_USAGE)}")
        if self.infinity_dtype not in INFINITY_DTYPES:
            raise ControlError(f"infinity_dtype must be one of {', '.join(INFINITY_DTYPES)}")
        for name, rate in self.faults.items():
            if name not in FAULTS:
                raise ControlError(f"unknown fault {name!r}")
            if not 0.0 <= rate <= 1.0:
                raise ControlError(f"fault {name} rate {rate} is not in [0, 1]")
        for name, threshold in (("drift_above", self.drift_above), ("flip_above", self.flip_above)):
            if threshold is not None and threshold < 0:
                raise ControlError(f"{name} must be >= 0")
        # One uniform draw picks at most one fault, so the rates must fit in [0, 1] together.
        if sum(self.faults.values()) > 1.0 + 1e-9:
            raise ControlError("fault rates add up to more than 1")


@dataclass(frozen=True, slots=True)
class Controls:
    """What one request asked of the mock: the config, overridden by its `x-mock-*` headers."""

    ttfb_ms: float
    body_ms: float
    dim: int
    fault: str | None
    flavor: str
    stall_ms: float
    gzip: bool
    task: str | None = None

    @classmethod
    def of(cls, headers: Mapping[str, str], config: MockConfig) -> Controls:
        fault = headers.get("x-mock-fault") or None
        if fault is not None and fault not in FAULTS:
            raise ControlError(f"x-mock-fault: unknown fault {fault!r}")
        flavor = headers.get("x-mock-flavor", config.flavor)
        if flavor not in FLAVORS:
            raise ControlError(f"x-mock-flavor must be one of {', '.join(FLAVORS)}, got {flavor!r}")
        task = headers.get("x-mock-task", config.task)
        if task is not None and task not in POOLING_TASKS:
            raise ControlError(f"x-mock-task must be one of {', '.join(POOLING_TASKS)}, got {task!r}")
        dim = int(_number(headers, "x-mock-dim", config.dim, int))
        if not 1 <= dim <= 1 << 20:
            raise ControlError("x-mock-dim must be in 1..1048576")
        return cls(
            ttfb_ms=_number(headers, "x-mock-ttfb-ms", config.ttfb_ms, float),
            body_ms=_number(headers, "x-mock-body-ms", config.body_ms, float),
            dim=dim,
            fault=fault,
            flavor=flavor,
            stall_ms=_number(headers, "x-mock-stall-ms", DEFAULT_STALL_MS, float),
            gzip=headers.get("x-mock-gzip", "1" if config.gzip else "0").lower() in ("1", "true", "yes"),
            task=task,
        )


def _number(headers: Mapping[str, str], name: str, default: float, kind: type[int] | type[float]) -> float:
    raw = headers.get(name)
    if raw is None:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise ControlError(f"{name} must be a number, got {raw!r}") from None
    if value < 0:
        raise ControlError(f"{name} must be >= 0")
    return value
