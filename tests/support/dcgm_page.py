"""A dcgm-exporter page whose GPUs draw a known power (`python -m tests.support.hostile
tests.support.dcgm_page:two_gpus`): its energy counters grow at exactly that power, read from the clock at
each GET, so a run's energy is the power times the time between its first and last scrape.

The shape is dcgm-exporter's (etc/default-counters.csv; labels gpu, UUID, pci_bus_id, device, modelName,
Hostname, DCGM_FI_DRIVER_VERSION); from the third scrape on, the series also carry the pod labels the
exporter adds once a pod holds the GPU: the same GPU, not a new series."""

from __future__ import annotations

import os
import socket
import time

from tests.support.hostile import read_request, response

GPUS = {"0": (200.0, 90.0, 30_000.0), "1": (50.0, 10.0, 2_000.0)}
"""Per GPU index: watts, utilisation %, memory used MiB."""
WATTS = sum(watts for watts, _, _ in GPUS.values())
BOOT_MJ = 4_351_786_183.0
"""The counter's value at the page's start: energy since the GPU's boot, in mJ."""
_START = time.monotonic()
SAMPLE_S = float(os.environ.get("DCGM_PAGE_SAMPLE_S", "0"))
"""With a period, the page's figures move only every SAMPLE_S seconds, as dcgm-exporter's do at its
--collect-interval; 0: at every GET."""
_served = {"metrics": 0}


def labels(gpu: str, pod: bool = False) -> str:
    text = (
        f'gpu="{gpu}",UUID="GPU-34319582-d595-d1c7-d1d2-17{gpu}bcfa61660",pci_bus_id="00000000:3{gpu}:00.0",'
        f'device="nvidia{gpu}",modelName="NVIDIA A100-SXM4-80GB",Hostname="node-a",DCGM_FI_DRIVER_VERSION="580.105.08"'
    )
    return text + (',container="vllm",namespace="bench",pod="vllm-0"' if pod else "")


def page(seconds: float, pod: bool = False) -> str:
    """The page `seconds` after the start: each GPU's counter has grown by its watts times that."""
    fields = (
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", lambda w, u, m: f"{u:g}"),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda w, u, m: f"{w:f}"),
        (
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "counter",
            "Total energy consumption since boot (in mJ).",
            lambda w, u, m: f"{BOOT_MJ + w * seconds * 1000:.0f}",
        ),
        ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", lambda w, u, m: f"{m:g}"),
        ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", lambda w, u, m: "1410"),
    )
    lines = []
    for name, kind, help_text, value in fields:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        lines += [f"{name}{{{labels(gpu, pod)}}} {value(*figures)}" for gpu, figures in GPUS.items()]
    return "\n".join(lines) + "\n"


def two_gpus(sock: socket.socket, _conn: int) -> None:
    """GET /metrics: the page now; anything else: 404."""
    while (request := read_request(sock)) is not None:
        if not request[0].startswith(b"GET /metrics"):
            sock.sendall(response(404, b"Not Found", content_type="text/plain"))
            continue
        _served["metrics"] += 1
        seconds = time.monotonic() - _START
        if SAMPLE_S > 0:
            seconds -= seconds % SAMPLE_S
        text = page(seconds, pod=_served["metrics"] > 2)
        sock.sendall(response(200, text.encode(), content_type="text/plain; version=0.0.4; charset=utf-8"))
