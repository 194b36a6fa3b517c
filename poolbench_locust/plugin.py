"""Everything poolbench-locust registers with Locust: importing this module is the plugin."""

from locust import events

from poolbench_locust import access, hooks, options, preflight, stop_timeout  # noqa: F401
from poolbench_locust.charts import wiring  # noqa: F401
from poolbench_locust.engine import limits  # noqa: F401
from poolbench_locust.exporter import wiring as prometheus_exporter
from poolbench_locust.metrics import checks, goodput, reporting, tokengap  # noqa: F401
from poolbench_locust.results import writer  # noqa: F401
from poolbench_locust.servermetrics import wiring as server_metrics  # noqa: F401  (after metrics: its tabs follow)
from poolbench_locust.webform import layout, validation  # noqa: F401  (layout first: it unmangles the names)
from poolbench_locust.workload import arrival, sweep, warmup  # noqa: F401

prometheus_exporter.setup(events)
