"""The JSON result of a run: one self-describing document (its schema: results/schema.py).

Built from what the run's reports are built from, so that it says what they say. Its own keys: the run,
its options, the pooling table (`table.rows`, every column it has, so columns added later appear by
themselves), Locust's own request and failure tables (Locust's CSV writer, fed into a list) and the blocks
`poolbench-compare` resamples. Every other room's figures (the history, the sweep's steps, the capacity
search, the server's metrics, the client load, the repeats) are the sections the rooms push
(json_sections.py), in their order. The run's total also goes in at the top level under the names
`vllm bench serve --save-result` uses, so tooling written for vLLM's results reads it.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import orjson
from locust.env import Environment
from locust.runners import MasterRunner
from locust.stats import PERCENTILES_TO_REPORT, StatsCSV

from poolbench_locust.json_sections import json_safe, json_sections
from poolbench_locust.metrics.collector import AGGREGATED, PoolingStats
from poolbench_locust.metrics.history import history_of
from poolbench_locust.metrics.table import rows
from poolbench_locust.options import settings_of
from poolbench_locust.results.series import TOTAL, Block, Key
from poolbench_locust.urls import shown_url

FORMAT = "poolbench-locust-result"
FORMAT_VERSION = 1
MAX_FAILURE_ROWS = 1000
SECRET_WORDS = frozenset(
    ("key", "apikey", "token", "secret", "password", "passwd", "auth", "login", "credential", "credentials", "cookie")
)
"""Options with one of these words in their name may hold a secret: left out, whatever their parser says."""


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _secret_dests() -> set[str]:
    from locust.argument_parser import get_parser  # a fresh parser holds every plugin's options and their flags

    try:
        parser = get_parser()
    except Exception:  # a plugin whose parser listener fails must not lose the result; names still filter
        return set()
    return {a.dest for a in parser._actions if getattr(a, "is_secret", False)}


def options_of(parsed: argparse.Namespace | None) -> tuple[dict[str, Any], list[str]]:
    """The run's options as JSON, and the names of those left out as secrets (their values never)."""
    if parsed is None:
        return {}, []
    secret = _secret_dests()
    kept: dict[str, Any] = {}
    left_out: list[str] = []
    for dest, value in sorted(vars(parsed).items()):
        if dest in secret or SECRET_WORDS.intersection(dest.lower().split("_")):
            left_out.append(dest)
            continue
        if isinstance(value, str) and "://" in value:
            # one URL, or several separated by commas (--server-metrics): each one's secrets hidden
            value = ",".join(shown_url(url) for url in value.split(","))
        kept[dest] = json_safe(value)
    return kept, left_out


class _Table:
    """Stands in for a csv writer: Locust's StatsCSV writes its rows here, as it writes PREFIX_stats.csv."""

    def __init__(self) -> None:
        self.rows: list[list[Any]] = []

    def writerow(self, row: Any) -> None:
        self.rows.append(list(row))

    def dicts(self) -> list[dict[str, Any]]:
        header, *data = self.rows
        return [dict(zip(header, row, strict=True)) for row in data]


def locust_tables(environment: Environment) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Locust's request rows (every name, then Aggregated) and failure rows, as its CSV files hold them."""
    writer = StatsCSV(environment, PERCENTILES_TO_REPORT)
    requests, failures = _Table(), _Table()
    writer.requests_csv(requests)
    writer.failures_csv(failures)
    return requests.dicts(), failures.dicts()


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _percent_key(title: str, prefix: str) -> str | None:
    """'E2E 99.9%' -> '99.9': the percentile a column holds, in vLLM's spelling of it."""
    match = re.fullmatch(re.escape(prefix) + r" (\d+(?:\.\d+)?)%", title)
    return match.group(1) if match else None


def vllm_fields(
    locust_row: Mapping[str, Any], pooling_row: Mapping[str, Any] | None, duration: float
) -> dict[str, Any]:
    """The figures vLLM's `vllm bench serve --save-result` has for a pooling run, by its names.

    vLLM counts latency over successful requests only; Locust and the pooling table count every
    request, so its e2el fields equal vLLM's where no request failed.
    """
    requests = int(locust_row.get("Request Count") or 0)
    failed = int(locust_row.get("Failure Count") or 0)
    completed = requests - failed
    tokens = int((pooling_row or {}).get("Input Tokens") or 0)
    sequences = int((pooling_row or {}).get("Sequences") or 0)
    per_s = (lambda n: n / duration) if duration > 0 else (lambda n: 0.0)
    out: dict[str, Any] = {
        "duration": duration,
        "completed": completed,
        "failed": failed,
        "num_prompts": requests,
        "total_input_tokens": tokens,
        "total_input_sequences": sequences,
        "request_throughput": per_s(completed),
        "input_sequence_throughput": per_s(sequences),
        "total_token_throughput": per_s(tokens),
        "mean_e2el_ms": _number(locust_row.get("Average Response Time")),
    }
    for title, value in (pooling_row or {}).items():
        lowered = title.lower()
        for prefix, metric in (("E2E", "e2el"), ("Queue", "client_queue_time")):
            if (p := _percent_key(title, prefix)) is not None and value is not None:
                out[f"p{p}_{metric}_ms"] = _number(value)
                if p == "50":
                    out[f"median_{metric}_ms"] = _number(value)
            elif lowered.startswith(prefix.lower() + " ") and value is not None:
                # columns other branches add (mean, standard deviation) keep vLLM's names too
                if "mean" in lowered or "avg" in lowered:
                    out[f"mean_{metric}_ms"] = _number(value)
                elif "std" in lowered:
                    out[f"std_{metric}_ms"] = _number(value)
    if "median_e2el_ms" not in out:
        out["median_e2el_ms"] = _number(locust_row.get("Median Response Time"))
    return out


def _failures(table: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    table = sorted(table, key=lambda r: -int(r.get("Occurrences") or 0))
    kept = [{k: json_safe(v) for k, v in row.items()} for row in table[:MAX_FAILURE_ROWS]]
    return kept, max(len(table) - MAX_FAILURE_ROWS, 0)


def _user_classes(environment: Environment) -> list[dict[str, Any]]:
    out = []
    for cls in environment.user_classes:
        endpoint = getattr(cls, "endpoint", None)
        out.append(
            {
                "name": cls.__name__,
                "module": cls.__module__,
                "route": getattr(endpoint, "route", None),
                "server": getattr(endpoint, "server", None),
                "weight": getattr(cls, "weight", None),
                "fixed_count": getattr(cls, "fixed_count", None),
            }
        )
    safe: list[dict[str, Any]] = json_safe(out)
    return safe


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat()


def build(
    environment: Environment,
    stats: PoolingStats,
    series: Mapping[Key, list[Block]],
    *,
    ended_at: float | None = None,
    exit_code: int | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    """The whole document, for the master or the only process, once the run's figures are final."""
    runner = environment.runner
    started = stats.start_time
    ended = ended_at if ended_at is not None else time.time()
    duration = max(stats.total.last - started, 0.0) if stats.total.last is not None else 0.0
    pooling = {row["Name"]: row for row in rows(stats)}
    locust_rows, failure_rows = locust_tables(environment)
    failures, omitted = _failures(failure_rows)
    options, left_out = options_of(environment.parsed_options)
    history = history_of(environment)

    def request(locust_row: dict[str, Any]) -> dict[str, Any]:
        is_total = locust_row["Name"] == AGGREGATED and locust_row["Type"] in ("", None)
        key: Key = TOTAL if is_total else (locust_row["Type"], locust_row["Name"])
        row = pooling.get(AGGREGATED if is_total else locust_row["Name"])
        return {
            "name": locust_row["Name"],
            "method": locust_row["Type"] or None,
            "locust": json_safe(locust_row),
            "pooling": json_safe(row),
            "vllm": json_safe(vllm_fields(locust_row, row, duration)),
            "series": list(series.get(key, [])),
        }

    entries = [request(r) for r in locust_rows]
    total = entries.pop()
    settings = settings_of(environment)
    peak_users = max((s["user_count"] for s in history.samples), default=runner.user_count if runner else 0)
    document: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "versions": {
            "poolbench_locust": _version("poolbench-locust"),
            "locust": _version("locust"),
            "python": platform.python_version(),
        },
        "run": {
            "start_time": _iso(started),
            "end_time": _iso(ended),
            "start_timestamp": started,
            "end_timestamp": ended,
            "duration_s": duration,
            "host": shown_url(environment.host) if environment.host else None,
            "runner": "master" if isinstance(runner, MasterRunner) else "local",
            "workers": (workers or runner.worker_count) if isinstance(runner, MasterRunner) else 1,
            "peak_user_count": peak_users,
            "user_classes": _user_classes(environment),
            "exit_code": exit_code,
        },
        "options": options,
        "options_left_out": left_out,
        "requests": entries,
        "total": total,
        "failures": failures,
        "failures_left_out": omitted,
    }
    for section in json_sections():  # every room's keys, in their order
        document.update(json_safe(section.fields(environment)))
    document |= {
        # vLLM's names for the run's total, at the top level where its tooling looks
        "date": datetime.fromtimestamp(started).strftime("%Y%m%d-%H%M%S"),
        "backend": "poolbench-locust",
        "endpoint_type": "poolbench-locust",
        "label": None,
        "model_id": settings.model or None,
        "tokenizer_id": settings.tokenizer,
        "request_rate": settings.request_rate or "inf",
        "burstiness": settings.burstiness,
        "max_concurrency": settings.max_concurrency,
        **total["vllm"],
    }
    return document


def write(path: str, document: dict[str, Any]) -> None:
    """Write atomically: a reader (a CI step) never sees half a document."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    data = orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".json-result-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as open() would make it; mkstemp makes it private
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
