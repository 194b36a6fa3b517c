"""`python -m poolbench_locust.mockserver` (the `poolbench-mock` command): serve until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import signal
from collections.abc import Callable

import gevent
from gevent.event import Event

from poolbench_locust.mockserver.config import (
    FLAVORS,
    INFINITY_DTYPES,
    INFINITY_USAGE,
    MAX_CHUNKS,
    MAX_MODEL_LEN,
    WRITES,
    MockConfig,
)
from poolbench_locust.mockserver.faults import FAULTS
from poolbench_locust.mockserver.server import MockServer
from poolbench_locust.wire import POOLING_TASKS


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _int_from(low: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= `low`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {text}")
        return value

    return parse


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0..65535, got {text}")
    return value


def _fault(text: str) -> tuple[str, float]:
    name, sep, rate_text = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected NAME=RATE, got {text!r}")
    if name not in FAULTS:
        raise argparse.ArgumentTypeError(f"unknown fault {name!r}; faults: {', '.join(FAULTS)}")
    try:
        rate = float(rate_text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"rate of {name} is not a number: {rate_text!r}") from None
    if not 0.0 <= rate <= 1.0:
        raise argparse.ArgumentTypeError(f"rate of {name} must be in [0, 1], got {rate_text}")
    return name, rate


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="poolbench-mock", description="Mock pooling server (vLLM, Infinity, TEI).")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=_port, default=8000, help="0 picks a free port")
    p.add_argument("--ttfb-ms", type=_non_negative, default=0.0, help="delay before the response headers")
    p.add_argument("--body-ms", type=_non_negative, default=0.0, help="time the body takes to trickle out")
    p.add_argument("--dim", type=_int_from(1), default=384, help="embedding dimension")
    p.add_argument("--model", default="mock-model", help="model name answered when a request names none")
    p.add_argument("--flavor", choices=FLAVORS, default="vllm", help="answer forms of /rerank and /classify")
    p.add_argument(
        "--fault",
        type=_fault,
        action="append",
        default=[],
        metavar="NAME=RATE",
        help=f"inject a fault at a rate in [0, 1] (repeatable): {', '.join(FAULTS)}",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the fault draws")
    p.add_argument(
        "--task",
        choices=POOLING_TASKS,
        default=None,
        help="the model's pooling task: /pooling refuses another; token_embed: /v1/embeddings answers token rows",
    )
    p.add_argument(
        "--max-model-len",
        type=_int_from(1),
        default=MAX_MODEL_LEN,
        metavar="N",
        help="the model's context length (vLLM's): a longer prompt is a 400 unless truncated; /v1/models says it",
    )
    p.add_argument("--gzip", action="store_true", help="gzip JSON answers when the client accepts gzip")
    p.add_argument(
        "--writes",
        choices=WRITES,
        default="sized",
        help="how an answer is cut into writes: sized (parts up to 64 KiB joined, larger ones on their own), one "
        "(the whole answer in one write), chunk (as a streaming response: the headers, each chunk, the terminating "
        "chunk, each one write), split (every part its own write: each chunk's size line, data and CRLF too)",
    )
    p.add_argument(
        "--chunks",
        type=_int_from(1),
        default=1,
        metavar="N",
        help=f"frame a chunked body (a binary answer) in N chunks (at most {MAX_CHUNKS})",
    )
    p.add_argument(
        "--infinity-usage",
        choices=INFINITY_USAGE,
        default="chars",
        help="what Infinity-form usage counts (real Infinity counts characters)",
    )
    p.add_argument(
        "--infinity-embedding-dtype",
        choices=INFINITY_DTYPES,
        default="float32",
        help="the --embedding-dtype the mock's Infinity runs with: its embeddings' type (binary, ubinary: packed)",
    )
    for flag, wrong in (
        ("--drift-above", "answer drifted vectors (cosine 0.909 with the right ones)"),
        ("--flip-above", "swap a ranking's top two scores"),
    ):
        p.add_argument(flag, type=_int_from(0), metavar="N", help=f"while more than N requests are in flight, {wrong}")
    p.add_argument(
        "--cache-drift",
        action="store_true",
        help="answer an input seen before with a drifted vector (a result cache bug)",
    )
    return p


def config_from(args: argparse.Namespace, p: argparse.ArgumentParser) -> MockConfig:
    rates = dict(args.fault)
    if args.chunks > MAX_CHUNKS:
        p.error(f"argument --chunks: must be <= {MAX_CHUNKS}, got {args.chunks}")
    if sum(rates.values()) > 1.0 + 1e-9:
        p.error("argument --fault: the rates add up to more than 1")
    return MockConfig(
        ttfb_ms=args.ttfb_ms,
        body_ms=args.body_ms,
        dim=args.dim,
        model=args.model,
        flavor=args.flavor,
        faults=rates,
        seed=args.seed,
        gzip=args.gzip,
        infinity_usage=args.infinity_usage,
        task=args.task,
        infinity_dtype=args.infinity_embedding_dtype,
        drift_above=args.drift_above,
        cache_drift=args.cache_drift,
        flip_above=args.flip_above,
        max_model_len=args.max_model_len,
        writes=args.writes,
        chunks=args.chunks,
    )


def main(argv: list[str] | None = None) -> None:
    p = parser()
    args = p.parse_args(argv)
    server = MockServer(config_from(args, p), host=args.host, port=args.port)
    stopping = Event()
    handlers = [gevent.signal_handler(sig, stopping.set) for sig in (signal.SIGTERM, signal.SIGINT)]
    try:
        server.start()
    except OSError as e:
        p.exit(1, f"poolbench-mock: cannot listen on {args.host}:{args.port}: {e.strerror or e}\n")
    print(f"poolbench-mock listening on {server.url}", flush=True)
    stopping.wait()
    server.stop()
    for handler in handlers:
        handler.cancel()


if __name__ == "__main__":
    main()
