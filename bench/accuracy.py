"""Accuracy: the time each client reports for a request, against the request's true time.

    python bench/accuracy.py [--seconds 6] [--reference-requests 15]

The bundled mock server (its own process) holds each answer's headers back for a controlled time
and trickles its body out over another (`--ttfb-ms`, `--body-ms`). It times every request itself,
from the request's last byte read to the answer's last byte handed to the kernel (/mock/timings),
and the clients send one request at a time, so the i-th time a client reports pairs with the
i-th time the server took: the error of a request is the difference, request by request, and the
mock's own jitter (a millisecond or two of timer lateness) cancels out. No client can report less
than the server's time plus loopback and its own system calls: a raw-socket reader in this
process (one sendall, blocking recv into a buffer, chunked framing parsed, nothing else) shows
that floor. The first request of each run (which also opens the connection) is left out, for
every client alike.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter

if __package__ in (None, ""):  # run as `python bench/accuracy.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    EMBEDDINGS,
    FAST,
    FAST_STREAM,
    POOLBENCH,
    ROOT,
    Mock,
    Payload,
    machine_line,
    percentile,
    run_client,
    table,
    vllm_clients,
    write_result,
)

RECV = 1 << 20
TARGET_MS, TARGET_FRACTION = 1.0, 0.01
HEADERS = (
    "case",
    "client",
    "n",
    "failed",
    "server",
    "reported",
    "error median",
    "|error| p99",
    "error %",
    "target",
)


@dataclass(frozen=True)
class Case:
    key: str
    payload: Payload
    ttfb_ms: float
    body_ms: float


CASES = (
    Case("float", Payload("float", batch=1, dims=384), 50, 100),  # about 4 kB of JSON
    Case("base64", Payload("base64", batch=1, dims=768), 50, 100),  # about 4 kB of JSON
    # 690 kB of JSON: orjson takes 3 ms to parse it, which must not count as the server's time.
    Case("float-large", Payload("float", batch=64, dims=1024), 50, 200),
    Case("bytes", Payload("bytes", batch=64, dims=65536), 50, 200),  # 16 MiB
    Case("bytes_only", Payload("bytes_only", batch=64, dims=65536), 50, 200),
)


def _recv(sock: socket.socket, pending: bytearray) -> None:
    data = sock.recv(RECV)
    if not data:
        raise ConnectionError("the server closed the connection mid-answer")
    pending += data


def reference(host: str, port: int, body: bytes, count: int) -> list[tuple[float, float, int]]:
    """(ms to the last byte, ms to the headers, body bytes) of `count` requests, one after another."""
    head = f"POST {EMBEDDINGS} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
    request = (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    out = []
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(count):
            pending = bytearray()
            start = perf_counter()
            sock.sendall(request)
            while (end := pending.find(b"\r\n\r\n")) < 0:
                _recv(sock, pending)
            headers = perf_counter()
            lines = bytes(pending[:end]).decode("latin-1").lower().split("\r\n")
            del pending[: end + 4]
            fields = dict(line.split(": ", 1) for line in lines[1:])
            if "content-length" in fields:
                size = int(fields["content-length"])
                while len(pending) < size:
                    _recv(sock, pending)
            else:
                size = _chunked(sock, pending)
            out.append(((perf_counter() - start) * 1000, (headers - start) * 1000, size))
    return out


def _chunked(sock: socket.socket, pending: bytearray) -> int:
    size = 0
    while True:
        while (eol := pending.find(b"\r\n")) < 0:
            _recv(sock, pending)
        chunk = int(bytes(pending[:eol]).split(b";")[0], 16)
        del pending[: eol + 2]
        while len(pending) < chunk + 2:
            _recv(sock, pending)
        del pending[: chunk + 2]
        if chunk == 0:
            return size
        size += chunk


def _paired(reported: list[list], server_ms: list[float | None], label: str) -> list[tuple[float, float | None, bool]]:
    """(reported ms, server ms or None, ok) per request, the first left out; a request the client
    sent as the run stopped and did not report can only be the last."""
    if not 0 <= len(server_ms) - len(reported) <= 1:
        raise RuntimeError(f"{label}: {len(reported)} requests reported, {len(server_ms)} served: cannot pair them")
    return [(r[0], s, r[2]) for r, s in zip(reported[1:], server_ms[1:], strict=False)]


def _errors(pairs: list[tuple[float, float | None, bool]], controlled: float) -> dict:
    good = [r for r, _, ok in pairs if ok]
    both = [(r, s) for r, s, ok in pairs if ok and s is not None]
    errors = [r - s for r, s in both]
    median = statistics.median(errors) if errors else float("nan")
    server = statistics.median(s for _, s in both) if both else float("nan")
    return {
        "requests": len(good),
        "failures": len(pairs) - len(good),
        "unfinished_on_server": sum(s is None for _, s, ok in pairs if ok),
        "server_ms_median": round(server, 3),
        "server_over_controlled_ms": round(server - controlled, 3),
        "reported_ms_median": round(statistics.median(good), 3) if good else None,
        "error_ms_median": round(median, 3),
        "error_ms_p99": round(percentile([abs(e) for e in errors], 0.99), 3) if errors else None,
        "error_percent_median": round(100 * median / server, 2),
        "target_met": abs(median) < TARGET_MS and abs(median) < TARGET_FRACTION * server,
    }


def measure(seconds: float, reference_requests: int, only: set[str]) -> dict:
    clients, vllm_note = vllm_clients(headers_too=True)
    clients = [POOLBENCH, FAST_STREAM, FAST, *clients]
    cases = []
    for case in CASES:
        if case.key not in only:
            continue
        p = case.payload
        controlled = case.ttfb_ms + case.body_ms
        result: dict = {"case": case.key, "encoding": p.encoding, "batch": p.batch, "dims": p.dims}
        result |= {"ttfb_ms": case.ttfb_ms, "body_ms": case.body_ms, "clients": {}}
        with Mock("--ttfb-ms", f"{case.ttfb_ms:g}", "--body-ms", f"{case.body_ms:g}") as mock:
            mock.reset()
            ref = reference(mock.host, mock.port, p.body(), reference_requests + 1)
            result["body_bytes"] = ref[0][2]
            raw = [[total, None, True] for total, _, _ in ref]
            result["reference"] = _errors(_paired(raw, mock.server_ms(), "raw-socket reader"), controlled)
            for client in clients:
                mock.reset()
                samples = run_client(client, mock.url, p, seconds, record=True).samples
                result["clients"][client.label] = _errors(_paired(samples, mock.server_ms(), client.label), controlled)
        cases.append(result)
    return {
        "seconds_per_client": seconds,
        "reference_requests": reference_requests,
        "vllm": vllm_note,
        "cases": cases,
    }


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n / 1000:.1f} kB"


def report(r: dict) -> str:
    def row(c: dict, label: str, m: dict) -> list:
        p99 = f"{m['error_ms_p99']:.2f}" if m["error_ms_p99"] is not None else "-"
        reported = f"{m['reported_ms_median']:.2f}" if m["reported_ms_median"] is not None else "-"
        cells = [
            c["case"],
            label,
            m["requests"],
            m["failures"],
            f"{m['server_ms_median']:.2f}",
            reported,
            f"{m['error_ms_median']:+.3f}",
            p99,
            f"{m['error_percent_median']:+.2f}%",
            "yes" if m["target_met"] else "NO",
        ]
        if m["unfinished_on_server"]:  # the client hung up before the body ended: no server time to compare
            cells[4:8] = ["unfinished", cells[5], "-", "-"]
            cells[8] = "-"
        return cells

    rows, cases = [], r["cases"]
    for c in cases:
        rows.append(row(c, "raw-socket reader (the floor)", c["reference"]))
        rows += [row(c, label, m) for label, m in c["clients"].items()]
    shapes = ", ".join(f"{c['case']} {_size(c['body_bytes'])} {c['ttfb_ms']:g}+{c['body_ms']:g} ms" for c in cases)
    return "\n".join(
        [
            f"Reported time minus the server's time of the same request, ms (one request at a time, "
            f"{r['seconds_per_client']:g} s per client)",
            f"cases: {shapes} (headers after ttfb, body trickled over the rest)",
            table(
                HEADERS,
                rows,
            ),
            f"target: |median error| < {TARGET_MS:g} ms and < {100 * TARGET_FRACTION:g}% of the server's time",
            "aiohttp, clock at headers: our loop that stops the clock where vLLM's benchmark did before its fix",
            "unfinished: the client closed the connection before the server had sent the whole body",
            f"vLLM: {r['vllm']}",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6, help="run time of each client per case")
    parser.add_argument("--reference-requests", type=int, default=15)
    parser.add_argument("--only", default=",".join(c.key for c in CASES), help="cases to run")
    args = parser.parse_args()
    r = measure(args.seconds, args.reference_requests, set(args.only.split(",")))
    print(report(r))
    print(machine_line())
    print(f"written: {write_result('accuracy', r).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
