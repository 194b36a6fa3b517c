"""Everything poolbench-locust registers with Locust: importing this module is the plugin."""

from poolbench_locust import access, hooks, options, stop_timeout  # noqa: F401
from poolbench_locust.metrics import checks, reporting  # noqa: F401
from poolbench_locust.workload import arrival, sweep  # noqa: F401
