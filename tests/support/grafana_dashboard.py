"""The bundled Grafana dashboard, checked against a Prometheus that scraped a run: every panel has data."""

from __future__ import annotations

import json
import math

from tests.support.locust_run import ROOT
from tests.support.prometheus_server import Prometheus

DASHBOARD = ROOT / "k8s" / "components" / "prometheus-operator" / "grafana-dashboard.json"
LINGER_S = 10
"""Seconds a --prometheus-port run keeps serving after it ends, so Prometheus scrapes it once more."""


def dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in board["panels"] for t in p["targets"]]


def assert_the_dashboard_has_data(prom: Prometheus, at: float, client_job: str, server_job: str) -> None:
    """Each job is the one its variable finds, and every expression of the dashboard has data, all finite."""
    board = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    for name, job in (("client_job", client_job), ("server_job", server_job)):
        metric = variables[name]["definition"].removeprefix("label_values(").split(",")[0]
        assert {r["metric"]["job"] for r in prom.query(metric, at)} == {job}
    for expr in dashboard_exprs():
        concrete = (
            expr.replace("$client_job", client_job).replace("$server_job", server_job).replace("$__rate_interval", "1m")
        )
        result = prom.query(concrete, at)
        assert result, f"no data for the dashboard's {expr}"
        assert all(math.isfinite(float(r["value"][1])) for r in result), (expr, result)
