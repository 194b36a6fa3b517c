"""poolbench-locust's User class as the benchmarks run it: BENCH_USER_CLASS (default EmbeddingsUser) with its
options from the command line, BENCH_USER_RATE (requests/s per user) as a constant_throughput wait, none sends
back to back."""

import os
import sys
from pathlib import Path

from locust import constant, constant_throughput

import poolbench_locust as pb  # the checkout measured: a --baseline run puts its tree first on sys.path

# This checkout's bench.common whichever tree poolbench_locust comes from: its probe pins the receive buffer
# (pin_receive_buffer), and a baseline's older bench.common would leave the baseline unpinned.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import probe

RATE = os.environ.get("BENCH_USER_RATE")
probe()


class Poolbench(getattr(pb, os.environ.get("BENCH_USER_CLASS") or "EmbeddingsUser")):
    wait_time = constant_throughput(float(RATE)) if RATE else constant(0)
