"""Goodput: the requests per second (and their input tokens per second) that met every service-level
objective of `--slo`, as vLLM's benchmark and AIPerf report it.

Only the request that sends it knows whether it met every objective at once, so each request is
judged as its event arrives (PoolingStats.on_request) and the collector counts it; percentiles of
each timing alone could not say. A failed request never counts, however fast. The objectives (`Slo`,
which judges a request) are the value of the --slo option: poolbench_locust/options/values.py.
"""

from __future__ import annotations

from poolbench_locust.options import Slo
from poolbench_locust.options.parsers import slo as parse_slo

__all__ = ["Slo", "parse_slo"]
