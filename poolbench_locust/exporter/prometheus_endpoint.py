"""--prometheus-port: the exporter's HTTP server and its place in a Locust run (its options, read once at
launch: options/registry.py's Prometheus group).

The process that owns the totals serves GET /metrics: the master in distributed mode and with
--processes (workers ship their figures to it), the one process otherwise. The server is bound when
Locust starts, so a busy port stops the run before any user spawns, and it stays up until Locust
quits: after the workers' final reports are merged, and --prometheus-linger seconds longer, so that
the last scrape sees the figures the Pooling CSV holds.
"""

from __future__ import annotations

import logging
from typing import Any

import gevent
from gevent.pywsgi import WSGIServer
from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner
from prometheus_client import CollectorRegistry, make_wsgi_app

from poolbench_locust.consistency.state import consistency_of
from poolbench_locust.exporter.consistency_series import ConsistencyCollector
from poolbench_locust.exporter.series import Gauges, PoolingCollector
from poolbench_locust.lifecycle import exit_early
from poolbench_locust.metrics.collector import stats_of
from poolbench_locust.options import OptionError, Settings, settings_of
from poolbench_locust.sweep.sweep_shape import SweepShape
from poolbench_locust.urls import shown_url

logger = logging.getLogger("poolbench_locust")


class Exporter:
    """One environment's endpoint: its registry (not prometheus_client's global one, which would
    serve the process's own metrics too, and every environment of a test process at once) and the
    number of the run its counters belong to."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self.run = 0
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = PoolingCollector(
            lambda: stats_of(environment),
            lambda: self.run,
            Gauges(users=self._users, target_rate=self._target_rate, cpu=self._cpu, info=self._info),
            pause=gevent.sleep,
        )
        self.registry.register(self.collector)
        self.registry.register(ConsistencyCollector(lambda: consistency_of(environment), lambda: self.run))
        self.server: WSGIServer | None = None

    def next_run(self, **_: Any) -> None:
        self.run += 1

    def listen(self, host: str, port: int) -> None:
        """Bind now (OSError if the port is taken), serve from the hub."""
        server = WSGIServer((host, port), make_wsgi_app(self.registry), log=None, error_log=logger)
        server.init_socket()
        server.start()
        self.server = server

    def close(self) -> None:
        if self.server is not None:
            self.server.stop(timeout=1)
            self.server = None

    def _users(self) -> int | None:
        runner = self.environment.runner
        return runner.user_count if runner is not None else None

    def _target_rate(self) -> float | None:
        shape = self.environment.shape_class
        if isinstance(shape, SweepShape):
            return shape.targets[shape.step] if shape.by_rate and 0 <= shape.step < len(shape.targets) else None
        try:
            return settings_of(self.environment).request_rate
        except OptionError:
            return None  # a bad value typed into the web UI's form: that run is stopped at its start

    def _cpu(self) -> dict[str, float]:
        runner = self.environment.runner
        if runner is None:
            return {}
        if not isinstance(runner, MasterRunner):
            return {"local": runner.current_cpu_usage}
        cpu = {"master": runner.current_cpu_usage}
        for worker in list(runner.clients.values()):
            try:  # what a worker's heartbeat said: a number, or nothing
                cpu[worker.id] = float(worker.cpu_usage)
            except (TypeError, ValueError):
                continue
        return cpu

    def _info(self) -> dict[str, str]:
        env = self.environment
        try:
            settings = settings_of(env)
        except OptionError:  # a bad value typed into the web UI's form: that run is stopped at its start
            settings = Settings()
        return {
            "host": shown_url(env.host or ""),
            "model": settings.model,
            "encoding": settings.encoding_format,
            "user_classes": ",".join(sorted(u.__name__ for u in env.user_classes)),
        }


def on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner):
        return  # its figures reach the master, which serves them
    try:
        settings = settings_of(environment)
    except OptionError as e:
        exit_early(environment, str(e))
        return
    if (port := settings.prometheus_port) is None:
        return
    # as Locust's --web-host: both mean every interface
    host = "" if settings.prometheus_host == "*" else settings.prometheus_host
    exporter = Exporter(environment)
    try:
        exporter.listen(host or "", port)
    except OSError as e:
        message = f"--prometheus-port {port}: cannot listen on {host or '*'}:{port}: {e.strerror or e}"
        exit_early(environment, message)
        return
    # The process's endpoint outlives each run: only its listeners hold it (RunState.prometheus was never read).
    logger.info("Prometheus endpoint at http://%s:%d/metrics", host or "0.0.0.0", port)
    events = environment.events
    events.test_start.add_listener(exporter.next_run)

    @events.test_start.add_listener
    def bound_at_launch(**_: Any) -> None:
        try:
            asked = settings_of(environment).prometheus_port
        except OptionError:
            asked = None
        if asked != port:  # the web UI's form shows the option, but the endpoint was bound at launch
            logger.warning("--prometheus-port: the endpoint stays on port %d, bound when Locust started", port)

    events.reset_stats.add_listener(exporter.next_run)
    linger_s = settings.prometheus_linger

    @events.quit.add_listener
    def stay_up_for_a_last_scrape(**_: Any) -> None:
        # quit comes last: the workers' final reports are merged and the Pooling CSV is written.
        if linger_s:
            logger.info("Prometheus endpoint: up %g s more for a last scrape (--prometheus-linger)", linger_s)
            gevent.sleep(linger_s)
        exporter.close()


def setup(events: Events) -> None:
    events.init.add_listener(on_init)
