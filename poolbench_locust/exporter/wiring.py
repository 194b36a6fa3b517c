"""--prometheus-port: the exporter's options, its HTTP server, and its place in a Locust run.

The process that owns the totals serves GET /metrics: the master in distributed mode and with
--processes (workers ship their figures to it), the one process otherwise. The server is bound when
Locust starts, so a busy port stops the run before any user spawns, and it stays up until Locust
quits: after the workers' final reports are merged, and --prometheus-linger seconds longer, so that
the last scrape sees the figures the Pooling CSV holds.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any
from urllib.parse import urlsplit

import gevent
from gevent.pywsgi import WSGIServer
from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner
from prometheus_client import CollectorRegistry, make_wsgi_app

from poolbench_locust.exporter.series import Gauges, PoolingCollector
from poolbench_locust.metrics.reporting import stats_of
from poolbench_locust.options import OPTIONS as RUN_OPTIONS
from poolbench_locust.options import Option, OptionError, non_negative, parsed, register, whole
from poolbench_locust.workload.sweep import SweepShape

logger = logging.getLogger("poolbench_locust")


def _port(text: str) -> int:
    value = whole(1)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a port number in 1..65535, got {value}")
    return value


OPTIONS = (
    Option("--prometheus-port", _port, None, "Serve the client's own figures for Prometheus at :PORT/metrics."),
    Option(
        "--prometheus-host",
        str,
        "",
        "Interface the Prometheus endpoint binds (empty or *: all, like Locust's --web-host).",
    ),
    Option(
        "--prometheus-linger",
        non_negative,
        0.0,
        "Seconds the Prometheus endpoint stays up after the run's final figures, for a last scrape.",
    ),
)
PORT = OPTIONS[0]
REQUEST_RATE = next(o for o in RUN_OPTIONS if o.flag == "--request-rate")


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
            return parsed(self.environment.parsed_options, REQUEST_RATE)
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
        options = env.parsed_options
        return {
            "host": _shown_host(env.host or ""),
            "model": str(getattr(options, "model", "") or ""),
            "encoding": str(getattr(options, "encoding_format", "") or ""),
            "user_classes": ",".join(sorted(u.__name__ for u in env.user_classes)),
        }


def _shown_host(url: str) -> str:
    """scheme://host:port of the target: never a user:password@, a path or a query."""
    parts = urlsplit(url)
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{parts.hostname}{port}" if parts.hostname else ""


def _on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner):
        return  # its figures reach the master, which serves them
    options = environment.parsed_options
    try:
        port, host, linger = (parsed(options, opt) for opt in OPTIONS)
    except OptionError as e:
        _stop_at_start(runner, str(e))
        return
    if port is None:
        return
    host = "" if host == "*" else host  # as Locust's --web-host: both mean every interface
    exporter = Exporter(environment)
    try:
        exporter.listen(host or "", port)
    except OSError as e:
        _stop_at_start(runner, f"--prometheus-port {port}: cannot listen on {host or '*'}:{port}: {e.strerror or e}")
        return
    logger.info("Prometheus endpoint at http://%s:%d/metrics", host or "0.0.0.0", port)
    events = environment.events
    events.test_start.add_listener(exporter.next_run)

    @events.test_start.add_listener
    def bound_at_launch(**_: Any) -> None:
        try:
            asked = parsed(environment.parsed_options, PORT)
        except OptionError:
            asked = None
        if asked != port:  # the web UI's form shows the option, but the endpoint was bound at launch
            logger.warning("--prometheus-port: the endpoint stays on port %d, bound when Locust started", port)

    events.reset_stats.add_listener(exporter.next_run)
    linger_s = float(linger or 0)

    @events.quit.add_listener
    def stay_up_for_a_last_scrape(**_: Any) -> None:
        # quit comes last: the workers' final reports are merged and the Pooling CSV is written.
        if linger_s:
            logger.info("Prometheus endpoint: up %g s more for a last scrape (--prometheus-linger)", linger_s)
            gevent.sleep(linger_s)
        exporter.close()


def _stop_at_start(runner: Any, message: str) -> None:
    logger.error("%s", message)
    if isinstance(runner, MasterRunner):
        runner.quit()  # connected workers quit with it
    sys.exit(1)


_registered: set[int] = set()


def setup(events: Events) -> None:
    """Register the exporter's options and listeners with Locust's `events` (once per Events)."""
    if id(events) in _registered:
        return
    _registered.add(id(events))
    events.init_command_line_parser.add_listener(
        lambda parser, **_: register(parser, "poolbench-locust Prometheus exporter", OPTIONS)
    )
    events.init.add_listener(_on_init)
