"""Everything poolbench-locust registers with Locust: importing this module is the plugin."""

from poolbench_locust import hooks, options  # noqa: F401
from poolbench_locust.metrics import checks, goodput, reporting  # noqa: F401
from poolbench_locust.workload import arrival, sweep  # noqa: F401
