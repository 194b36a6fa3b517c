"""Everything poolbench-locust registers with Locust, in one place: importing this module is the plugin.

Each room has one `setup(events)`, taking `pages` too when it adds to Locust's report or web UI
(locust_pages) and `results` when it adds keys to the JSON result (json_sections), as Locust's runners
call stats.setup_distributed_stats_event_listeners. They are called here in the order their listeners
must run: Locust fires an event's listeners in the order they were added (quitting in reverse).
"""

from locust import events as locust_events
from locust.event import Events

from poolbench_locust import (
    answer_validator,
    embedded_mock,
    locust_pages,
    options,
    preflight,
    start_checks,
    stop_timeout,
)
from poolbench_locust.ab import ab_checks, ab_report, ab_workers
from poolbench_locust.capacity import capacity_shape, capacity_tab
from poolbench_locust.charts import chart_tabs
from poolbench_locust.consistency import consistency_report
from poolbench_locust.cost import cost_report
from poolbench_locust.engine import failure_messages
from poolbench_locust.exporter import prometheus_endpoint
from poolbench_locust.final_reports import master_quit
from poolbench_locust.json_sections import ResultEvents, result_events
from poolbench_locust.locust_pages import PageEvents, page_events
from poolbench_locust.metrics import clientload, inputs_summary, locust_state, pooling_reports, tokengap
from poolbench_locust.repeats import repeat_runs
from poolbench_locust.request_limit import max_requests
from poolbench_locust.results import json_result
from poolbench_locust.serverlimits import limits_check
from poolbench_locust.servermetrics import server_metrics
from poolbench_locust.sweep import sweep_shape
from poolbench_locust.webform import layout, validation
from poolbench_locust.workload import arrival, replay, warmup


def setup(events: Events, pages: PageEvents, results: ResultEvents) -> None:
    # Every option of the registry (options/registry.py) on Locust's parser, in one call.
    events.init_command_line_parser.add_listener(options.add_arguments)
    # The open-loop schedule and warm-up first: test_start resets them before anything else starts.
    arrival.setup(events)
    warmup.setup(events)
    # The checks that stop a bad run at start: the options and the host, then the mock when there is
    # no host, then one request per User class (the web form's secrets are put back before any of
    # them reads the form: webform/validation.py).
    start_checks.setup(events)
    # Which validator checks JSON answers (the C pass or simdjson), said once at start, kept in the JSON result.
    answer_validator.setup(events, results)
    embedded_mock.setup(events)
    limits_check.setup(events)  # the server's own limits, before preflight sends it anything
    preflight.setup(events)
    ab_checks.setup(events)  # --ab-host: not --host, listening, and each User class's preflight request to it
    # The reference answers of the consistency check, taken at test_start after the preflight's request,
    # one at a time before the users start; then every answer that carries a reference is compared.
    consistency_report.setup(events, pages, results)
    stop_timeout.setup(events)
    master_quit.setup(events)  # a distributed run's master waits (bounded) for its workers' final reports
    # --max-requests: ends the run at a count of Locust's stats, as -t ends it (the start checks refuse a bad N first).
    max_requests.setup(events)
    # A trace's share of each worker, sent at test_start (before Locust's spawn messages) once the
    # checks have passed it.
    replay.setup(events)
    failure_messages.setup(events)  # the bounded failure rows start again with the stats
    # The one writer of the --html file, before every room that adds to it: Locust fires quitting
    # in reverse, so its listener, added first, runs last, after the last scrape and the sweep's last step.
    locust_pages.setup(events)
    sweep_shape.setup(events, results)
    # --repeat's resets between repeats, after the start checks (a refused run starts no repeats).
    repeat_runs.setup(events, results)
    # The figures and where they are shown (the order of their report sections and web UI tabs is
    # locust_pages' *_SECTION and *_TAB; of their keys in the JSON result, json_sections' *_JSON).
    chart_tabs.setup(events, pages)
    pooling_reports.setup(events, pages, results)
    # Locust's own chart history and per-second counts, bounded as the plugin's history is.
    locust_state.setup(events)
    clientload.setup(events, pages, results)
    inputs_summary.setup(events, results)  # after the client load's table: the inputs it was sent with
    # --find-capacity: after the client load, so its probe table and answer print after that table.
    capacity_shape.setup(events)
    tokengap.setup(events)
    json_result.setup(events, results)
    server_metrics.setup(events, pages, results)
    # After the start checks (a bad run stops before the port is bound) and after the figures' rooms.
    # Its quit listener sleeps --prometheus-linger: quit comes after quitting, so the --html file and
    # the CSV files are written before it.
    prometheus_endpoint.setup(events)
    # The web UI's form: layout first, it maps the names the page mangles back before validation reads them.
    layout.setup(events)
    validation.setup(events)
    # The Capacity tab, the report's section, the form's --find-capacity and the JSON result's capacity:
    # after the form's checks, so that a form they refuse installs no search.
    capacity_tab.setup(events, pages, results)
    # --gpu-hour-cost: the price at the measured throughput and the capacity found, after the search's answer.
    cost_report.setup(events, results)
    # --ab-host: B's figures against A's, after the price lines in the console.
    ab_report.setup(events, pages, results)
    ab_workers.setup(events)  # a distributed run's comparison: each worker's requests shipped to the master


setup(locust_events, page_events, result_events)
