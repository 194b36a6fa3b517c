"""Everything poolbench-locust registers with Locust: importing this module is the plugin."""

from poolbench_locust import hooks, options, webform  # noqa: F401
from poolbench_locust.metrics import checks, reporting, tokengap  # noqa: F401
from poolbench_locust.results import writer  # noqa: F401
from poolbench_locust.workload import arrival, sweep, warmup  # noqa: F401
