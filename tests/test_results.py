"""The JSON result (--json-result) and poolbench-compare: what CI and people comparing runs rely on."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.resources import files
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
from locust.stats import RequestStats

import poolbench_locust.users as user_classes
from devsupport.ports import free_port
from poolbench_locust.metrics.collector import PoolingStats
from poolbench_locust.results import compare, series
from tests.support.locust_run import LOAD, ROOT, Completed, csv_rows, result_schema, run_locust
from tests.support.process_servers import served

FLAVOURS = {
    "vllm": [
        "EmbeddingsUser",
        "EmbeddingsChatUser",
        "PoolingUser",
        "RerankUser",
        "ScoreUser",
        "ClassifyUser",
        "CohereEmbedUser",
    ],
    "infinity": ["InfinityEmbeddingsUser", "InfinityRerankUser"],
    "tei": ["TEIEmbedUser", "TEIRerankUser"],
}
SECRET = "sk-results-secret-0123"
PASSWORD = "hunter2-results"


def validator() -> jsonschema.Draft202012Validator:
    schema = result_schema()  # schema.json holds the document's own keys: every room's part is merged in
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def assert_valid(doc: dict) -> None:
    errors = sorted(validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{e.json_path}: {e.message[:300]}" for e in errors[:10])


def locustfile(tmp_path: Path, classes: list[str]) -> Path:
    path = tmp_path / "classes.py"
    path.write_text(f"from poolbench_locust import {', '.join(classes)}  # noqa: F401\n")
    return path


def run(locustfile: str | Path, *args: str, **given: Any) -> Completed:
    """A headless run of `locustfile` with the small load, that must end well (in 90 s unless told)."""
    result = run_locust(locustfile, "--stop-timeout", "5", *LOAD, *args, **{"timeout": 90, **given})
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def assert_equals_the_csv(doc: dict, prefix: Path) -> None:
    """The document's Locust rows and pooling rows are the CSV files' rows, cell for cell; its blocks
    add up to the totals."""
    stats = csv_rows(Path(f"{prefix}_stats.csv"))
    pooling = csv_rows(Path(f"{prefix}_pooling.csv"))
    entries = [*doc["requests"], doc["total"]]
    assert {e["name"] for e in entries} == set(stats)
    for entry in entries:
        for title, cell in stats[entry["name"]].items():
            assert cell == ("" if entry["locust"][title] is None else str(entry["locust"][title])), (
                entry["name"],
                title,
            )
        if entry["pooling"] is not None:
            for title, cell in pooling[entry["name"]].items():
                shown = entry["pooling"][title]
                assert cell == ("" if shown is None else str(shown)), (entry["name"], title)
        blocks = entry["series"]
        assert sum(b["requests"] for b in blocks) == int(stats[entry["name"]]["Request Count"]) > 0
        assert sum(b["failures"] for b in blocks) == int(stats[entry["name"]]["Failure Count"])
        assert sum(sum(b["timings"]["e2e"].values()) for b in blocks if "e2e" in b["timings"]) == int(
            stats[entry["name"]]["Request Count"]
        )
        if entry["pooling"] is not None:
            assert sum(b["input_tokens"] for b in blocks) == entry["pooling"]["Input Tokens"]
    total = doc["total"]
    assert doc["completed"] == total["locust"]["Request Count"] - total["locust"]["Failure Count"]
    assert doc["total_input_tokens"] == int(pooling["Aggregated"]["Input Tokens"])


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_one_process_result_validates_for_every_user_class_and_equals_the_csv(flavour, mock_server_factory, tmp_path):
    mock = mock_server_factory("--flavor", flavour)
    host = mock.url.replace("http://", f"http://user:{PASSWORD}@")
    prefix, result = tmp_path / "run", tmp_path / "result.json"
    users = str(len(FLAVOURS[flavour]))  # one user of each class at least
    load = {
        "tei": ["--sweep-users", "2,4", "--sweep-step-time", "2"],
        "infinity": ["-t", "3s", "--request-rate", "40"],  # open loop: vLLM's queue-time fields too
        "vllm": ["-t", "3s"],
    }[flavour]
    run(
        str(locustfile(tmp_path, FLAVOURS[flavour])),
        *("-u", users, "-r", users),
        *load,
        "--api-key",
        SECRET,
        host=host,
        csv=prefix,
        json_result=result,
    )
    text = result.read_text()
    assert SECRET not in text and PASSWORD not in text
    doc = json.loads(text)
    assert_valid(doc)
    assert_equals_the_csv(doc, prefix)
    assert [u["name"] for u in doc["run"]["user_classes"]] == FLAVOURS[flavour]
    routes = {getattr(user_classes, name).endpoint.route for name in FLAVOURS[flavour]}
    assert {e["name"] for e in doc["requests"]} == routes
    assert "api_key" in doc["options_left_out"] and doc["run"]["host"] == mock.url.replace("http://", "http://***@")
    assert doc["run"]["runner"] == "local"
    if flavour == "infinity":
        assert doc["request_rate"] == 40.0 and doc["p99_client_queue_time_ms"] is not None
    else:
        assert doc["request_rate"] == "inf" and "p99_client_queue_time_ms" not in doc
    if flavour == "tei":
        steps = doc["sweep"]["steps"]
        assert [s["Target"] for s in steps] == [2, 4] and doc["sweep"]["by"] == "users"
        assert sum(s["Request Count"] for s in steps) == doc["total"]["locust"]["Request Count"]


def test_distributed_result_validates_and_equals_the_csv(mock_server, tmp_path):
    prefix, result = tmp_path / "dist", tmp_path / "dist.json"
    port = str(free_port())  # not Locust's default 5557, where another run's workers may be calling
    run(
        "locustfiles/demo.py",
        *("--processes", "2", "--master-bind-port", port, "--master-port", port),
        host=mock_server.url,
        users=4,
        requests=60,  # 4 s ended before a worker's first request on a busy machine
        csv=prefix,
        json_result=result,
    )
    doc = json.loads(result.read_text())
    assert_valid(doc)
    assert_equals_the_csv(doc, prefix)
    assert doc["run"]["runner"] == "master" and doc["run"]["workers"] == 2
    assert doc["total_input_tokens"] == mock_server.stats()["prompt_tokens"]
    # the bytes sent, merged from the workers, are what the mock received; text answers: a vector per sequence
    pooling = doc["total"]["pooling"]
    assert pooling["Sent Bytes"] == mock_server.stats()["bytes_received"] > 0 and pooling["Sent MB/s"] > 0
    assert pooling["Vectors"] == pooling["Sequences"] and pooling["Image Tokens"] is None


def test_environment_variable_names_the_file_and_a_directory_stops_the_run_at_start(mock_server, tmp_path):
    result = tmp_path / "env.json"
    common: dict[str, Any] = {"host": mock_server.url, "users": 1, "run_time": "1s"}
    done = run_locust("locustfiles/embeddings.py", **common, env={"LOCUST_JSON_RESULT": str(result)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert_valid(json.loads(result.read_text()))
    bad = run_locust("locustfiles/embeddings.py", **common, json_result=tmp_path)
    assert bad.returncode == 1
    assert f"--json-result: {tmp_path} is a directory" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_hostile_servers_failure_text_reaches_the_document_bounded(tmp_path):
    result = tmp_path / "hostile.json"
    with served("huge_failures") as url:
        done = run_locust(
            "locustfiles/embeddings.py",
            "--stop-timeout",
            "5",
            host=url,
            users=2,
            run_time="2s",
            json_result=result,
        )
    assert result.exists(), done.stderr[-2000:]
    doc = json.loads(result.read_text())
    assert_valid(doc)
    assert doc["failures"] and doc["failed"] == doc["num_prompts"] > 0
    assert all(len(f["Error"]) <= 1001 for f in doc["failures"])
    assert sum(f["Occurrences"] for f in doc["failures"]) == doc["failed"]


@pytest.fixture(scope="module")
def delayed_runs(mock_server_factory, tmp_path_factory) -> dict[str, Path]:
    """The same test against the mock, and against the mock with 30 % more delay."""
    folder = tmp_path_factory.mktemp("delay")
    out = {}
    for label, ms in (("base", "50"), ("slow", "65")):  # delays the client's own few ms hardly move
        mock = mock_server_factory("--ttfb-ms", ms, "--body-ms", ms)
        out[label] = folder / f"{label}.json"
        run("locustfiles/embeddings.py", host=mock.url, users=8, run_time="8s", json_result=out[label])
    return out


def compare_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "poolbench_locust.results.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def marked(stdout: str, section: str) -> dict[str, str]:
    """{figure: the row's last column} of one section of the text table."""
    lines = stdout.split(f"== {section}\n", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    return {line[:18].strip(): line.rsplit(None, 1)[-1] for line in lines}


def test_a_run_compared_with_itself_shows_no_significant_change(delayed_runs):
    base = str(delayed_runs["base"])
    done = compare_cli(base, base, "--max-regression", "0%")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = marked(done.stdout, "Aggregated")
    assert rows and all(mark != "*" for mark in rows.values()), done.stdout
    assert rows["Requests/s"] == "+0.0%"


def test_thirty_percent_more_delay_is_flagged_and_fails_the_gate(delayed_runs, tmp_path):
    page = tmp_path / "compare.html"
    done = compare_cli(
        str(delayed_runs["base"]), str(delayed_runs["slow"]), "--max-regression", "5%", "--html", str(page)
    )
    assert done.returncode == compare.EXIT_REGRESSION, done.stdout + done.stderr
    rows = marked(done.stdout, "POST /v1/embeddings")
    for figure in ("E2E mean (ms)", "E2E 50% (ms)", "TTFB 50% (ms)", "Transfer 50% (ms)"):
        assert rows[figure] == "*", (figure, done.stdout)
    # Throughput falls too; on a loaded machine the client's slowdown can hide part of it in noise.
    assert rows["Requests/s"] == "*" or rows["Requests/s"].startswith("-"), done.stdout
    assert "Regression: slow.json: Aggregated: E2E 50% " in done.stderr and "beyond noise" in done.stderr
    regressions = [line for line in done.stderr.splitlines() if line.startswith("Regression: ")]
    # one request name: its figures are the total's, each listed once (not for the name and Aggregated)
    assert sum(": E2E 50% " in line for line in regressions) == 1, regressions
    assert not any("/v1/embeddings" in line for line in regressions), regressions
    html = page.read_text()
    assert html.count("<polyline") == 8  # four charts, two runs each
    verdict = html[: html.index("<svg")]  # the verdict comes before the curves and the tables
    assert "Failed the gate" in verdict and "Aggregated: E2E 50% " in verdict, verdict
    assert html.count("<li>slow.json: Aggregated: ") == len(regressions)
    assert "* worse" in html and "color:#c62828" in html  # a worse change is red, marked as such
    assert "<script" not in html and "src=" not in html and "href=" not in html
    # The other way round everything improved: improvements never fail the gate.
    better = compare_cli(str(delayed_runs["slow"]), str(delayed_runs["base"]), "--max-regression", "5%")
    assert better.returncode == 0, better.stdout + better.stderr
    assert marked(better.stdout, "Aggregated")["E2E 50% (ms)"] == "*"


def test_sweeps_compare_step_by_step(tmp_path, mock_server):
    results = []
    for name in ("a", "b"):
        results.append(tmp_path / f"{name}.json")
        run(
            "locustfiles/embeddings.py",
            *("--sweep-users", "1,2", "--sweep-step-time", "2"),
            host=mock_server.url,
            users=2,
            spawn_rate=1,
            json_result=results[-1],
        )
    done = compare_cli(*map(str, results))
    assert done.returncode == 0, done.stderr
    assert "== sweep step 1 (users 1)" in done.stdout and "== sweep step 2 (users 2)" in done.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not JSON"),
        (b'{"format": "something-else"}', "not a poolbench-locust result"),
        (b'{"format": "poolbench-locust-result", "format_version": 99}', "format_version 99"),
        (b'{"format": "poolbench-locust-result", "format_version": 1, "requests": 3}', "field 'requests'"),
    ],
)
def test_a_file_that_is_no_result_is_one_line_and_exit_code_2(tmp_path, content, message):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    done = compare_cli(str(bad), str(bad))
    assert done.returncode == compare.EXIT_USAGE
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_bad_blocks_in_a_result_are_ignored_not_a_crash(delayed_runs, tmp_path):
    doc = json.loads(delayed_runs["base"].read_text())
    doc["total"]["series"] = [{"seconds": "x"}, None, {"requests": -1}, *doc["total"]["series"][:2]]
    doc["requests"][0]["pooling"]["E2E 50%"] = "NaN"
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(doc))
    done = compare_cli(str(broken), str(delayed_runs["base"]))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


def test_blocks_stay_bounded_and_add_up_to_the_totals():
    stats, pooling = RequestStats(), PoolingStats()
    environment = SimpleNamespace(stats=stats)
    kept = series.Series()
    seconds = series.MAX_BLOCKS * 3
    for t in range(seconds):
        stats.log_request("POST", "/x", 10 + t % 7, 100)
        context = {"sequences": 2, "input_tokens": 5, "request_bytes": 300, "vectors": 7}
        pooling.on_request("/x", 10 + t % 7, 100, None, context)
        kept.sample(environment, pooling, now=pooling.start_time + t + 1)
    blocks = kept.final(environment, pooling)[series.TOTAL]
    assert len(blocks) <= series.MAX_BLOCKS and kept.width == 4
    assert sum(b["requests"] for b in blocks) == seconds
    assert sum(b["input_tokens"] for b in blocks) == 5 * seconds
    assert sum(b["sent_bytes"] for b in blocks) == 300 * seconds
    assert sum(b["vectors"] for b in blocks) == 7 * seconds
    assert sum(sum(b["timings"]["e2e"].values()) for b in blocks) == seconds


def test_the_schema_is_in_the_installed_package():
    text = files("poolbench_locust.results").joinpath("schema.json").read_text()
    assert json.loads(text)["properties"]["format"]["const"] == "poolbench-locust-result"
    assert 'poolbench_locust = ["results/schema.json"]' in (ROOT / "pyproject.toml").read_text()


def test_a_column_added_to_the_pooling_table_appears_in_the_document_by_itself(monkeypatch):
    # Other branches add columns (goodput, mean and standard deviation): the document takes them
    # from table.rows, and a mean or deviation of E2E also under vLLM's name.
    from locust.env import Environment

    from poolbench_locust.metrics import table
    from poolbench_locust.results import document
    from tests.support.harness import options

    extra = [
        ("Goodput Requests/s", lambda s, e: 12.5),
        ("E2E Mean", lambda s, e: 41.0),
        ("E2E StdDev", lambda s, e: 3.0),
    ]
    monkeypatch.setattr(table, "COLUMNS", [*table.COLUMNS, *extra])
    environment = Environment(user_classes=[], parsed_options=options("--api-key", SECRET))
    environment.create_local_runner()
    pooling = PoolingStats()
    environment.stats.log_request("POST", "/x", 40, 100)
    pooling.on_request("/x", 40, 100, None, {"sequences": 1, "input_tokens": 3, "ttfb_ms": 10.0})
    doc = document.build(environment, pooling, {})
    assert_valid(doc)
    assert doc["total"]["pooling"]["Goodput Requests/s"] == 12.5 == doc["requests"][0]["pooling"]["Goodput Requests/s"]
    assert doc["mean_e2el_ms"] == 41.0 and doc["std_e2el_ms"] == 3.0
    assert SECRET not in json.dumps(doc)


def test_a_section_a_room_pushes_goes_into_the_document_in_its_order_and_into_the_schema():
    """A room adds keys to the JSON result as it adds a section to the HTML report: a listener of
    result_events.json_sections appends its JsonSection (its order, its keys' values, their schema)."""
    from locust.env import Environment

    from poolbench_locust.json_sections import CAPACITY_JSON, SWEEP_JSON, JsonSection, json_sections, result_events
    from poolbench_locust.results import document, schema
    from tests.support.harness import options

    def fields(environment: Environment) -> dict[str, Any]:
        return {"my_room": {"figure": float("nan"), "runner": type(environment.runner).__name__}}

    def between(sections: list[JsonSection], **_: Any) -> None:
        figures = {"my_room": {"type": "object", "required": ["figure"]}}
        sections.append(JsonSection((SWEEP_JSON + CAPACITY_JSON) // 2, fields, figures, ("my_room",)))

    result_schema()  # the plugin loaded: every room's own section registered
    environment = Environment(user_classes=[], parsed_options=options())
    environment.create_local_runner()
    pooling = PoolingStats()
    environment.stats.log_request("POST", "/x", 40, 100)
    pooling.on_request("/x", 40, 100, None, {"sequences": 1, "input_tokens": 3, "ttfb_ms": 10.0})
    result_events.json_sections.add_listener(between)
    try:
        doc = document.build(environment, pooling, {})
        whole = schema.whole()
    finally:
        result_events.json_sections.remove_listener(between)
    keys = list(doc)
    assert keys.index("sweep") < keys.index("my_room") < keys.index("capacity") < keys.index("date")
    assert doc["my_room"] == {"figure": None, "runner": "LocalRunner"}, "made JSON-safe by the document"
    assert "my_room" in whole["properties"] and "my_room" in whole["required"]
    jsonschema.validate(doc, whole)
    assert "my_room" not in schema.whole(), "gone with its listener"
    twice = JsonSection(1, lambda environment: {}, {"history": {"type": "object"}})
    with pytest.raises(ValueError, match="history"):
        schema.whole([*json_sections(), twice])


def synthetic_blocks(seed: int, latency_ms: float, rate: float, seconds: int = 60) -> list[dict]:
    """A run's blocks drawn from known distributions: Poisson-like counts, normal latencies."""
    import random

    from locust.stats import bucket_response_time

    rng = random.Random(seed)
    blocks = []
    for t in range(seconds):
        n = max(int(rng.gauss(rate, rate**0.5)), 1)
        times = [max(rng.gauss(latency_ms, latency_ms / 10), 1.0) for _ in range(n)]
        histogram: dict[str, int] = {}
        for ms in times:
            key = str(bucket_response_time(ms))
            histogram[key] = histogram.get(key, 0) + 1
        blocks.append(
            {"time": float(t), "seconds": 1.0, "requests": n, "failures": 0, "e2e_sum_ms": sum(times),
             "input_tokens": 10 * n, "sequences": n, "bytes": 100 * n, "sent_bytes": 50 * n, "vectors": n,
             "timings": {"e2e": histogram}}
        )  # fmt: skip
    return blocks


def synthetic_result(blocks: list[dict], vectors_per_sequence: int = 1, sent_per_request: int = 50) -> compare.Run:
    """A result of one request name whose blocks are `blocks` (their vectors and sent bytes rescaled) and whose
    rows are the figures of all of them: what compare reads of a document."""
    blocks = [
        {**b, "vectors": b["sequences"] * vectors_per_sequence, "sent_bytes": b["requests"] * sent_per_request}
        for b in blocks
    ]
    whole = series.merge_blocks(blocks)
    per_s = {k: whole[k] / whole["seconds"] for k in series.COUNTS if k in whole}
    pooling = {"Sequences/s": per_s["sequences"], "Input Tokens/s": per_s["input_tokens"], "MB/s": per_s["bytes"] / 1e6}
    if "vectors" in per_s:
        pooling |= {"Vectors/s": per_s["vectors"], "Sent MB/s": per_s["sent_bytes"] / 1e6}
    locust = {"Requests/s": per_s["requests"], "Average Response Time": whole["e2e_sum_ms"] / whole["requests"]}

    def entry(method: str, name: str) -> dict[str, Any]:
        return {"name": name, "method": method, "series": list(blocks), "pooling": {**pooling}, "locust": {**locust}}

    return compare.Run("r.json", {"requests": [entry("POST", "/v1/embeddings")], "total": entry("", "Aggregated")})


def test_compare_shows_sent_mb_s_and_shows_vectors_s_where_they_are_not_the_sequences():
    """Sent MB/s is compared with its noise like MB/s; Vectors/s only where some run's answers held more (or fewer)
    vectors than sequences (token-level, multi-vector): one vector per input would only repeat Sequences/s."""
    base = synthetic_result(synthetic_blocks(1, 50, 100))
    same = synthetic_result(synthetic_blocks(2, 50, 100))
    [*_, total] = compare.compare([base, same])
    titles = [f.title for f in total.figures]
    assert "Sent MB/s" in titles and "Vectors/s" not in titles, titles
    assert not total.changes[0]["Sent MB/s"].significant and total.changes[0]["Sent MB/s"].noise is not None

    bigger = synthetic_result(synthetic_blocks(2, 50, 100), vectors_per_sequence=30, sent_per_request=80)
    [*_, total] = compare.compare([base, bigger])
    assert [f.title for f in total.figures].index("Vectors/s") == titles.index("Sequences/s") + 1
    vectors, sent = total.changes[0]["Vectors/s"], total.changes[0]["Sent MB/s"]
    assert vectors.significant and vectors.relative == pytest.approx(29, rel=0.05)
    assert sent.significant and sent.relative == pytest.approx(0.6, rel=0.05)
    assert "Vectors/s" in compare.text_tables(compare.compare([base, bigger]), [base, bigger])


def test_a_result_written_before_sent_bytes_and_vectors_were_kept_still_compares():
    """Blocks without `sent_bytes` and `vectors` (results of earlier versions, format_version 1 still), or with
    garbage in them: the old blocks give no noise for the new figures, the garbled ones are left out; no crash."""
    new = synthetic_result(synthetic_blocks(1, 50, 100))
    old = synthetic_result(synthetic_blocks(2, 50, 100))
    for entry in [*old.doc["requests"], old.doc["total"]]:
        entry["series"] = [{k: v for k, v in b.items() if k not in ("sent_bytes", "vectors")} for b in entry["series"]]
        del entry["pooling"]["Sent MB/s"], entry["pooling"]["Vectors/s"]
    assert "sent_bytes" not in series.merge_blocks(old.doc["total"]["series"])
    [*_, total] = compare.compare([old, new])
    assert total.changes[0]["Sent MB/s"] == noise_free(None, new.doc["total"]["pooling"]["Sent MB/s"])
    assert total.changes[0]["Requests/s"].noise is not None
    garbled = synthetic_result(synthetic_blocks(3, 50, 100))
    garbled.doc["total"]["series"][:5] = [{**b, "sent_bytes": "x"} for b in garbled.doc["total"]["series"][:5]]
    garbled.doc["total"]["series"][5]["vectors"] = -1
    assert len(compare.blocks_of(garbled.doc["total"])) == len(new.doc["total"]["series"]) - 6
    compare.text_tables(compare.compare([garbled, new, old]), [garbled, new, old])


def noise_free(base: float | None, new: float | None) -> Any:
    from poolbench_locust.results.noise import Change

    return Change(base, new, None)


def test_the_bootstrap_tells_noise_from_a_shift_on_runs_of_known_distributions():
    from poolbench_locust.results import noise

    def changes(base: list[dict], new: list[dict]) -> dict[str, noise.Change]:
        out = {}
        for figure in noise.FIGURES:
            if figure.title.startswith(("TTFB", "Transfer")):
                continue  # the synthetic runs have E2E times only
            a, b = noise.chunks(base), noise.chunks(new)
            whole_a, whole_b = series.merge_blocks(base), series.merge_blocks(new)
            out[figure.title] = noise.change(
                figure,
                figure.of_block(whole_a),
                figure.of_block(whole_b),
                noise.relative_error(figure, a),
                noise.relative_error(figure, b),
            )
        return out

    same = changes(synthetic_blocks(1, 50, 100), synthetic_blocks(2, 50, 100))
    assert not [t for t, c in same.items() if c.significant], same
    slower = changes(synthetic_blocks(1, 50, 100), synthetic_blocks(3, 65, 77))
    assert all(slower[t].significant for t in ("Requests/s", "E2E mean", "E2E 50%", "E2E 90%", "E2E 99%")), slower
    assert all(slower[t].worse_by(f) > 0.05 for f in noise.FIGURES if (t := f.title) in slower)


def test_a_run_too_short_for_a_noise_estimate_is_gated_on_the_change_alone(delayed_runs, tmp_path):
    short = []
    for label in ("base", "slow"):
        doc = json.loads(delayed_runs[label].read_text())
        for entry in [*doc["requests"], doc["total"]]:
            entry["series"] = entry["series"][:3]  # fewer than six chunks: no estimate
        short.append(tmp_path / f"{label}.json")
        short[-1].write_text(json.dumps(doc))
    done = compare_cli(*map(str, short), "--max-regression", "5%")
    assert done.returncode == compare.EXIT_REGRESSION, done.stdout + done.stderr
    assert marked(done.stdout, "Aggregated")["E2E 50% (ms)"] == "?"
    assert "noise unknown (a run too short)" in done.stderr
    itself = compare_cli(str(short[0]), str(short[0]), "--max-regression", "0%")
    assert itself.returncode == 0, itself.stdout + itself.stderr
