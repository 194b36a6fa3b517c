"""Accuracy: the time each client reports for a request, against the request's true time.

    python bench/accuracy.py [--seconds 6] [--reference-requests 15]

The bundled mock server (its own process) holds each answer's headers back for a controlled time
and trickles its body out over another (`--ttfb-ms`, `--body-ms`: its last byte leaves no earlier
than both after the request arrived). The true time of a request, from sending it to its last
byte, is what a raw-socket reader in this process sees (one sendall, blocking recv into a buffer,
chunked framing parsed, nothing else), and that reader is checked against the controlled delays.
Each client then runs in its own process, one request at a time, and reports its times: the error
of a request is its reported time minus the reader's median true time, taken on the same server
just before that client's run. The first request of each run (which also opens the connection) is
left out, for every client alike.
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


@dataclass(frozen=True)
class Case:
    payload: Payload
    ttfb_ms: float
    body_ms: float


CASES = (
    Case(Payload("float", batch=1, dims=384), 50, 100),  # about 4 KB of JSON
    Case(Payload("base64", batch=1, dims=768), 50, 100),  # about 4 KB of JSON
    Case(Payload("bytes", batch=64, dims=65536), 50, 200),  # 16 MiB
    Case(Payload("bytes_only", batch=64, dims=65536), 50, 200),
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


def measure(seconds: float, reference_requests: int) -> dict:
    clients, vllm_note = vllm_clients(headers_too=True)
    clients = [POOLBENCH, FAST_STREAM, FAST, *clients]
    cases = []
    for case in CASES:
        p = case.payload
        controlled = case.ttfb_ms + case.body_ms
        refs: list[tuple[float, float, int]] = []
        result: dict = {"encoding": p.encoding, "batch": p.batch, "dims": p.dims}
        result |= {"ttfb_ms": case.ttfb_ms, "body_ms": case.body_ms, "clients": {}}
        with Mock("--ttfb-ms", f"{case.ttfb_ms:g}", "--body-ms", f"{case.body_ms:g}") as mock:
            for client in clients:
                # The true time of this client's requests: the reference reader's, just before them.
                ref = reference(mock.host, mock.port, p.body(), reference_requests + 1)[1:]
                refs += ref
                true_ms = statistics.median(r[0] for r in ref)
                true_ttfb = statistics.median(r[1] for r in ref)
                samples = run_client(client, mock.url, p, seconds, record=True).samples[1:]
                times = [s[0] for s in samples if s[2]]
                errors = [t - true_ms for t in times]
                median_error = statistics.median(errors) if errors else float("nan")
                ttfbs = [s[1] for s in samples if s[2] and s[1] is not None]
                result["clients"][client.label] = {
                    "requests": len(times),
                    "failures": len(samples) - len(times),
                    "true_ms": round(true_ms, 3),
                    "reported_ms_median": round(statistics.median(times), 3) if times else None,
                    "error_ms_median": round(median_error, 3),
                    "error_ms_p99": round(percentile([abs(e) for e in errors], 0.99), 3) if errors else None,
                    "error_percent_median": round(100 * median_error / true_ms, 2),
                    "ttfb_error_ms_median": round(statistics.median(ttfbs) - true_ttfb, 3) if ttfbs else None,
                    "target_met": abs(median_error) < TARGET_MS and abs(median_error) < TARGET_FRACTION * true_ms,
                }
        totals = [r[0] for r in refs]
        result["body_bytes"] = refs[0][2]
        result["reference"] = {
            "requests": len(refs),
            "true_ms_median": round(statistics.median(totals), 3),
            "over_controlled_ms_median": round(statistics.median(totals) - controlled, 3),
            "over_controlled_ms_p99": round(percentile(totals, 0.99) - controlled, 3),
            "ttfb_ms_median": round(statistics.median(r[1] for r in refs), 3),
        }
        cases.append(result)
    return {
        "seconds_per_client": seconds,
        "reference_requests_per_client": reference_requests,
        "vllm": vllm_note,
        "cases": cases,
    }


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n / 1000:.1f} kB"


def report(r: dict) -> str:
    ref_rows = [
        [
            c["encoding"],
            _size(c["body_bytes"]),
            f"{c['ttfb_ms']:g} + {c['body_ms']:g}",
            c["reference"]["requests"],
            f"{c['reference']['true_ms_median']:.2f}",
            f"{c['reference']['over_controlled_ms_median']:+.2f}",
            f"{c['reference']['over_controlled_ms_p99']:+.2f}",
            f"{c['reference']['ttfb_ms_median']:.2f}",
        ]
        for c in r["cases"]
    ]
    rows = [
        [
            c["encoding"],
            label,
            m["requests"],
            f"{m['true_ms']:.2f}",
            f"{m['reported_ms_median']:.2f}" if m["reported_ms_median"] is not None else "-",
            f"{m['error_ms_median']:+.2f}",
            f"{m['error_ms_p99']:.2f}" if m["error_ms_p99"] is not None else "-",
            f"{m['error_percent_median']:+.2f}%",
            "yes" if m["target_met"] else "NO",
        ]
        for c in r["cases"]
        for label, m in c["clients"].items()
    ]
    return "\n".join(
        [
            "Reference reader (raw socket) against the controlled delays, ms",
            table(
                ["encoding", "body", "ttfb + body", "n", "true (median)", "over, median", "over, p99", "ttfb"], ref_rows
            ),
            "",
            f"Reported time minus true time, ms (one request at a time, {r['seconds_per_client']:g} s per client)",
            table(
                ["encoding", "client", "n", "true", "reported", "error median", "|error| p99", "error %", "target"],
                rows,
            ),
            f"target: |median error| < {TARGET_MS:g} ms and < {100 * TARGET_FRACTION:g}% of the true time; "
            "true: the reference reader's median just before each client's run",
            "aiohttp, clock at headers: our loop that stops the clock where vLLM's benchmark did before its fix",
            f"vLLM: {r['vllm']}",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6, help="run time of each client per encoding")
    parser.add_argument("--reference-requests", type=int, default=15)
    args = parser.parse_args()
    r = measure(args.seconds, args.reference_requests)
    print(report(r))
    print(machine_line())
    print(f"written: {write_result('accuracy', r).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
