"""The load: where inputs come from, how their tokens are counted, and when requests are sent."""

from poolbench_locust.workload.pool import PreparedRequest, request_pool

__all__ = ["PreparedRequest", "request_pool"]
