"""Trace replay (--dataset trace:): each request arrives at its timestamp with its shape, --trace-speed scales
time, late sends are timed from their schedule, the run ends with the trace, and a bad line stops it at start.

The arrivals are judged by a server of its own process that records when each request came
(tests/support/recording_server.py). The trace is sparse (14 requests over 2.5 s) so that the check is about
the schedule, not about this shared machine's CPU.
"""

from __future__ import annotations

import subprocess
import time
from contextlib import AbstractContextManager
from pathlib import Path
from statistics import median
from typing import Any

import orjson
import pytest
import requests

import poolbench_locust as pb
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.options import OptionError
from tests.support.harness import options
from tests.support.hostile import server_process
from tests.support.locust_run import csv_rows, run_locust

TOLERANCE_S = 0.020
"""How far from its schedule a request may arrive (the issue's bound)."""

TRACE: list[dict[str, Any]] = [
    {"timestamp": 0, "input_length": 6},
    {"timestamp": 150, "input_length": 9, "batch_size": 3},
    {"timestamp": 300, "text": "a text as written in the trace"},
    {"timestamp": 380, "texts": ["first of two", "second of two"]},
    {"timestamp": 600, "input": "one input"},
    {"timestamp": 900, "input_length": 4, "output_length": 100, "hash_ids": [1, 2, 3]},  # a mooncake line
    {"timestamp": 1000, "input_length": 12, "batch_size": 2},
    {"timestamp": 1400, "input": ["x y", "z"]},
    {"timestamp": 1500, "input_length": 3},
    {"timestamp": 1800, "input_length": 5, "batch_size": 4},
    {"timestamp": 2100, "text": "near the end"},
    {"timestamp": 2200, "input_length": 7},
    {"timestamp": 2400, "input_length": 2, "batch_size": 2},
    {"timestamp": 2500, "text": "the last one"},
]


def expected_inputs(line: dict[str, Any]) -> list[str] | list[int]:
    """The texts a line's request must carry, or (for a shape) the word count of each of its texts."""
    if "text" in line:
        return [line["text"]]
    if "texts" in line:
        return line["texts"]
    if "input" in line:
        return [line["input"]] if isinstance(line["input"], str) else line["input"]
    return [line["input_length"]] * line.get("batch_size", 1)


def write_trace(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def recording_server(delay_ms: float = 5) -> AbstractContextManager[str]:
    return server_process("tests.support.recording_server:recording", {"RECORDING_DELAY_MS": str(delay_ms)})


def arrivals(url: str) -> list[dict[str, Any]]:
    return sorted(requests.get(f"{url}/arrivals", timeout=5).json(), key=lambda a: a["at"])


def schedule_errors(got: list[dict[str, Any]], lines: list[dict[str, Any]], speed: float = 1.0) -> list[float]:
    """Each arrival's distance from its schedule, once the unknown start of the replay is taken out
    (the median of arrival minus schedule: the clocks of client and server share no zero)."""
    due = [line["timestamp"] / 1000 / speed for line in lines]
    start = median(a["at"] - d for a, d in zip(got, due, strict=True))
    return [a["at"] - start - d for a, d in zip(got, due, strict=True)]


def replay(url: str, trace: Path, *args: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    result = run_locust(
        "locustfiles/embeddings.py",
        *("--no-preflight", "--dataset", f"trace:{trace}"),
        *args,
        host=url,
        users=4,
        spawn_rate=100,
        run_time="40s",
        timeout=timeout,
    )
    return result, time.monotonic() - began


@pytest.mark.timing
@pytest.mark.alone  # each request on its schedule to 20 ms
def test_a_trace_arrives_on_its_schedule_with_its_shapes_and_ends_the_run(tmp_path):
    trace = write_trace(tmp_path / "trace.jsonl", TRACE)
    with recording_server() as url:
        result, took = replay(url, trace)
        got = arrivals(url)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(got) == len(TRACE), [a["body"] for a in got]
    for arrival, line in zip(got, TRACE, strict=True):
        texts = arrival["body"]["input"]
        want = expected_inputs(line)
        assert (texts if isinstance(want[0], str) else [len(t.split()) for t in texts]) == want, (line, texts)
    errors = schedule_errors(got, TRACE)
    print(f"max |arrival - scheduled| = {max(map(abs, errors)) * 1000:.1f} ms over {len(errors)} requests")
    assert max(map(abs, errors)) <= TOLERANCE_S, [round(e * 1000, 1) for e in errors]
    # the run ended with the trace, not at -t 40s, and said so; the mooncake fields were named once
    assert took < 30, took
    assert "Trace over: the 14 requests of" in result.stderr, result.stderr[-2000:]
    assert result.stderr.count("fields a pooling request does not use are ignored: hash_ids, output_length") == 1


@pytest.mark.timing
@pytest.mark.alone  # each request on its schedule to 20 ms
def test_trace_speed_2_halves_the_span(tmp_path):
    trace = write_trace(tmp_path / "trace.jsonl", TRACE)
    with recording_server() as url:
        result, _ = replay(url, trace, "--trace-speed", "2")
        got = arrivals(url)
    assert result.returncode == 0, result.stderr[-3000:]
    span = got[-1]["at"] - got[0]["at"]
    errors = schedule_errors(got, TRACE, speed=2)
    print(f"span at --trace-speed 2: {span:.3f} s (trace 2.500 s); max error {max(map(abs, errors)) * 1000:.1f} ms")
    assert span == pytest.approx(1.25, abs=2 * TOLERANCE_S)
    assert max(map(abs, errors)) <= TOLERANCE_S


@pytest.mark.timing
@pytest.mark.alone  # each request on its schedule to 20 ms
def test_processes_share_the_trace_and_together_send_it_all_on_schedule(tmp_path):
    trace = write_trace(tmp_path / "trace.jsonl", TRACE)
    with recording_server() as url:
        result, took = replay(url, trace, "--processes", "2", timeout=90)
        got = arrivals(url)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(got) == len(TRACE)
    errors = schedule_errors(got, TRACE)
    print(f"--processes 2: max |arrival - scheduled| = {max(map(abs, errors)) * 1000:.1f} ms")
    # two workers start their replay when each gets its spawn message: a few ms apart, within the bound
    assert max(map(abs, errors)) <= TOLERANCE_S, [round(e * 1000, 1) for e in errors]
    assert "Trace over: the 14 requests of" in result.stderr
    assert took < 40


def test_a_request_sent_late_is_timed_from_its_schedule(tmp_path):
    """One user, answers of 300 ms, a request due every 50 ms: the last is sent about 1.5 s late."""
    lines = [{"timestamp": 50 * i, "input_length": 3} for i in range(6)]
    trace = write_trace(tmp_path / "late.jsonl", lines)
    prefix = tmp_path / "late"
    with recording_server(delay_ms=300) as url:
        result = run_locust(
            "locustfiles/embeddings.py",
            *("--no-preflight", "--dataset", f"trace:{trace}"),
            host=url,
            users=1,
            run_time="30s",
            csv=prefix,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    row = csv_rows(Path(f"{prefix}_pooling.csv"))["Aggregated"]
    assert float(row["Queue 95%"]) > 1000, row
    assert float(row["E2E 95%"]) > 1300, row  # 300 ms of service plus the wait since its scheduled time


def test_a_bad_trace_stops_the_run_at_start_naming_the_line(tmp_path):
    trace = write_trace(tmp_path / "bad.jsonl", [{"timestamp": 0, "text": "ok"}, {"timestamp": 5, "text": 7}])
    result = run_locust(
        "locustfiles/embeddings.py", "--dataset", f"trace:{trace}", run_time="5s", host="http://127.0.0.1:9"
    )
    assert result.returncode == 1
    assert f"--dataset: {trace}:2: field 'text' must be a non-empty string" in result.stderr
    assert "Traceback" not in result.stderr


BAD_TRACES = [
    (pb.EmbeddingsUser, b'{"timestamp": 0, "text": "a"}\n{"timestamp": \n', r":2: not JSON"),
    (pb.EmbeddingsUser, b'{"text": "a"}\n', r":1: field 'timestamp' missing or not a number of ms >= 0"),
    (pb.EmbeddingsUser, b'{"timestamp": -1, "text": "a"}\n', r":1: field 'timestamp' missing or not a number"),
    (pb.EmbeddingsUser, b'{"timestamp": "5", "text": "a"}\n', r":1: field 'timestamp' missing or not a number"),
    (
        pb.EmbeddingsUser,
        b'{"timestamp": 10, "text": "a"}\n\n{"timestamp": 9, "text": "b"}\n',
        r":3: field 'timestamp' 9 is before the line above's 10",
    ),
    (pb.EmbeddingsUser, b'{"timestamp": 0}\n', r":1: field 'input_length' missing, and no inputs"),
    (pb.EmbeddingsUser, b'{"timestamp": 0, "input_length": 0}\n', r":1: field 'input_length' must be a whole number"),
    (pb.EmbeddingsUser, b'{"timestamp": 0, "input_length": 2.5}\n', r":1: field 'input_length' must be a whole"),
    (
        pb.EmbeddingsUser,
        b'{"timestamp": 0, "input_length": 4, "batch_size": 1e9}\n',
        r":1: field 'batch_size' must be a whole number from 1 to 100000",
    ),
    (pb.EmbeddingsUser, b'{"timestamp": 0, "texts": []}\n', r":1: field 'texts' must be a non-empty list"),
    (pb.EmbeddingsUser, b"[1, 2]\n", r":1: not a JSON object"),
    (pb.RerankUser, b'{"timestamp": 0, "documents": ["a"]}\n', r":1: field 'query' missing"),
    (pb.RerankUser, b'{"timestamp": 0, "input_length": 3, "documents": 0}\n', r":1: field 'documents' must be"),
    (pb.EmbeddingsUser, b"\n\n", r": holds no requests"),
]


@pytest.mark.parametrize(("user_class", "content", "message"), BAD_TRACES, ids=[b[2] for b in BAD_TRACES])
def test_bad_trace_lines_name_the_line_and_the_field(tmp_path, user_class, content, message):
    path = tmp_path / "trace.jsonl"
    path.write_bytes(content)
    user = type("U", (user_class,), {})
    with pytest.raises(OptionError, match=rf"^--dataset: {path}{message}"):
        plan_for(user, options("--dataset", f"trace:{path}"))


def test_a_word_length_the_tokenizer_cannot_build_names_the_line(tmp_path):
    from tests.support.tokenizers import write_tokenizer

    tokenizer = write_tokenizer(tmp_path / "tokenizer.json")  # adds [CLS] and [SEP]: 2 tokens hold no text
    path = write_trace(
        tmp_path / "trace.jsonl", [{"timestamp": 0, "input_length": 5}, {"timestamp": 1, "input_length": 2}]
    )
    with pytest.raises(OptionError, match=rf"^--dataset: {path}:2: field 'input_length' 2: .*special tokens"):
        plan_for(
            type("U", (pb.EmbeddingsUser,), {}), options("--dataset", f"trace:{path}", "--tokenizer", str(tokenizer))
        )


def test_shapes_are_exact_token_lengths_with_a_tokenizer(tmp_path):
    from tokenizers import Tokenizer

    from tests.support.tokenizers import write_tokenizer

    tokenizer = write_tokenizer(tmp_path / "tokenizer.json")
    path = write_trace(tmp_path / "trace.jsonl", [{"timestamp": 0, "input_length": 9, "batch_size": 2}])
    plan = plan_for(
        type("U", (pb.EmbeddingsUser,), {}), options("--dataset", f"trace:{path}", "--tokenizer", str(tokenizer))
    )
    texts = orjson.loads(plan.requests[0].body)["input"]
    assert [len(Tokenizer.from_file(str(tokenizer)).encode(t).ids) for t in texts] == [9, 9]
    assert plan.schedule is not None and plan.schedule.seconds == (0.0,)


@pytest.mark.parametrize("flag", [["--request-rate", "5"], ["--sweep-users", "1,2"]])
def test_a_trace_refuses_another_arrival_process(tmp_path, flag):
    path = write_trace(tmp_path / "trace.jsonl", [{"timestamp": 0, "text": "a"}])
    with pytest.raises(OptionError, match=rf"^{flag[0]}: a trace"):
        plan_for(type("U", (pb.EmbeddingsUser,), {}), options("--dataset", f"trace:{path}", *flag))


def test_in_the_web_ui_the_trace_stops_the_run_and_a_second_start_replays_it(tmp_path):
    from tests.support.webui import WebUI

    lines = [{"timestamp": 100 * i, "input_length": 3} for i in range(5)]
    trace = write_trace(tmp_path / "short.jsonl", lines)
    with recording_server() as url:
        ui = WebUI("locustfiles/embeddings.py", "--host", url, "--no-preflight", "--dataset", f"trace:{trace}")
        try:
            for run in (1, 2):
                assert ui.swarm(user_count=2, spawn_rate=2, host=url)["success"]
                deadline = time.monotonic() + 30
                while len(arrivals(url)) < run * len(lines):  # the state reads "stopped" until the run begins
                    assert time.monotonic() < deadline, f"run {run}: {len(arrivals(url))} arrivals"
                    time.sleep(0.1)
                # by itself: the trace is over (said in the log before the stop; the state alone can read
                # "stopped" for a moment before a run's users spawn)
                while ui.log().count("Trace over: the 5 requests of") < run:
                    assert time.monotonic() < deadline, f"run {run} never said its trace was over:\n{ui.log()}"
                    time.sleep(0.1)
                ui.wait_for("stopped", timeout=30)
                assert len(arrivals(url)) == run * len(lines)
            assert ui.proc.poll() is None, "a web UI's run stops; the web UI stays"
            assert ui.log().count("Trace over: the 5 requests of") == 2
        finally:
            ui.close()


def test_the_rate_check_takes_a_trace_as_the_open_loop_it_is(tmp_path):
    """A trace is an open loop (its timestamps are its schedule): --check-min-rate-ratio runs on it."""
    lines = [{"timestamp": 50 * i, "input_length": 3} for i in range(6)]
    trace, document = write_trace(tmp_path / "trace.jsonl", lines), tmp_path / "result.json"
    with recording_server() as url:
        result, _ = replay(url, trace, "--check-min-rate-ratio", "0.5", "--json-result", str(document))
    assert result.returncode == 0 and "Check failed" not in result.stderr, result.stderr[-3000:]
    # what the check compares with its floor: the share of the trace's due requests that were sent
    client_load = orjson.loads(document.read_bytes())["client_load"]
    assert client_load["sent_ratio"] == 1.0 and client_load["rows"][0]["Sent"] == len(lines), client_load
