"""Workloads that match real traffic: datasets, exact token counts, seeds, open-loop arrivals,
sweeps and warm-up."""

from __future__ import annotations

import csv
import itertools
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

import poolbench_locust as pb
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.options import OptionError
from tests.support.harness import Run, failure_text, options
from tests.support.locust_run import csv_rows, run_locust
from tests.support.tokenizers import write_tokenizer


def texts_of(plan) -> list[list[str]]:
    return [orjson.loads(r.body)["input"] for r in plan.requests]


def test_random_inputs_with_a_tokenizer_hit_the_exact_token_length(tmp_path):
    from tokenizers import Tokenizer

    path = write_tokenizer(tmp_path / "tokenizer.json")
    plan = plan_for(pb.EmbeddingsUser, options("--tokenizer", str(path), "--input-len", "17", "--batch-size", "3"))
    tokenizer = Tokenizer.from_file(str(path))
    counts = {len(tokenizer.encode(t).ids) for batch in texts_of(plan) for t in batch}
    assert counts == {17}
    assert plan.client_token_source == "client-tokenizer"
    assert {r.client_tokens for r in plan.requests} == {51}


def test_input_len_range_and_batch_range_are_drawn_per_request():
    plan = plan_for(pb.EmbeddingsUser, options("--input-len-range", "3:9", "--batch-size", "1:4", "--seed", "5"))
    batches = texts_of(plan)
    assert {len(b) for b in batches} == {1, 2, 3, 4}
    lengths = {len(t.split()) for b in batches for t in b}
    assert min(lengths) >= 3 and max(lengths) <= 9 and len(lengths) > 3


def test_a_fixed_seed_gives_the_same_requests_and_another_seed_others():
    def bodies(seed: str) -> list[bytes]:
        # a fresh User class per call, so the plan is built again, not taken from the cache
        user = type("U", (pb.EmbeddingsUser,), {})
        return [r.body for r in plan_for(user, options("--seed", seed, "--batch-size", "1:3")).requests]

    assert bodies("7") == bodies("7")
    assert bodies("7") != bodies("8")


DATASETS = [
    (pb.EmbeddingsUser, "inputs.txt", "first line\n\nsecond line here\n", 2),
    (pb.EmbeddingsUser, "inputs.jsonl", '{"text": "a b c"}\n{"text": "d e"}\n', 2),
    (pb.EmbeddingsUser, "inputs.csv", "id,text\n1,a b c\n2,d e f g\n", 2),
    (pb.RerankUser, "pairs.jsonl", '{"query": "q w", "documents": ["a b", "c d e"]}\n', 2),
    (pb.ScoreUser, "pairs.csv", "query,document\nq1,a b\nq1,c\nq2,d e\n", 2),
    (
        pb.EmbeddingsChatUser,
        "chat.jsonl",
        '{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]}\n',
        1,
    ),
]


@pytest.mark.parametrize(("user_class", "name", "content", "batch"), DATASETS, ids=[d[1] for d in DATASETS])
def test_file_datasets_load_and_run_against_the_mock(mock_server, tmp_path, user_class, name, content, batch):
    path = tmp_path / name
    path.write_text(content)
    run = Run(user_class, mock_server.url, "--dataset", f"file:{path}", "--batch-size", str(batch))
    mock_server.reset()
    events = [run.one() for _ in range(4)]
    assert [failure_text(e) for e in events] == [""] * 4
    assert sum(e["context"]["input_tokens"] for e in events) == mock_server.stats()["prompt_tokens"]
    assert sum(e["context"]["client_tokens"] for e in events) == mock_server.stats()["prompt_tokens"]


BAD_FILES = [
    ("missing.txt", None, r"missing.txt: no such file"),
    ("empty.txt", b"\n\n", r"empty.txt: holds no inputs"),
    ("latin1.txt", b"ok\nna\xefve\n", r"latin1.txt:2: not UTF-8 text"),
    ("fields.jsonl", b'{"text": "a"}\n{"text": "b"}\n{"txt": "c"}\n', r"fields.jsonl:3: field 'text' missing"),
    ("broken.jsonl", b'{"text": "a"}\n{"text": \n', r"broken.jsonl:2: not JSON"),
    ("header.csv", b"id,body\n1,a\n", r"header.csv:1: header has no column 'text'"),
    ("cell.csv", b'text\na\n\n""\n', r"cell.csv:\d+: field 'text' missing"),
    ("inputs.parquet", b"x", r"inputs.parquet: not a Parquet file"),
    ("inputs.bin", b"x", r"must end in .txt, .jsonl, .csv or .parquet"),
]


@pytest.mark.parametrize(("name", "content", "message"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_dataset_files_fail_at_start_with_file_line_and_field(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    user = type("U", (pb.EmbeddingsUser,), {})
    with pytest.raises(OptionError, match=rf"^--dataset: .*{message}"):
        plan_for(user, options("--dataset", f"file:{path}"))


def test_bad_dataset_stops_the_locust_run_at_start(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"query": "q", "documents": []}\n')
    result = run_locust("locustfiles/rerank.py", "--dataset", f"file:{path}", run_time="2s", host="http://127.0.0.1:9")
    assert result.returncode == 1
    assert f"--dataset: {path}:1: field 'documents' missing or not a non-empty list of strings" in result.stderr
    assert "Traceback" not in result.stderr


def test_bytes_only_tokens_counted_by_the_server_tokenize_route(mock_server):
    run = Run(
        pb.EmbeddingsUser,
        mock_server.url,
        "--count-tokens-with-server",
        "--encoding-format",
        "bytes_only",
        "--batch-size",
        "2",
        "--input-len",
        "6",
    )
    event = run.one()
    assert event["context"]["token_source"] == "client-tokenize"
    assert event["context"]["input_tokens"] == 12


def test_infinity_counts_characters_and_the_gap_shows_it(mock_server, tmp_path):
    prefix = tmp_path / "inf"
    result = run_locust(
        "locustfiles/infinity.py",
        "InfinityEmbeddingsUser",  # the one class of the file this vLLM-flavored mock answers as Infinity does
        *("--stop-timeout", "5", "--input-len", "5"),
        host=mock_server.url,
        users=2,
        requests=20,
        csv=prefix,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    row = csv_rows(Path(f"{prefix}_pooling.csv"))["/embeddings"]
    assert float(row["Token Gap %"]) > 100, "5 short words are far more characters than tokens"
    assert int(row["Client Tokens"]) > 0


def test_open_loop_arrival_gaps_have_the_asked_mean_and_shape():
    from statistics import fmean, pstdev

    from poolbench_locust.options import Settings
    from poolbench_locust.workload.arrival import OpenLoop

    class Env:  # one process that holds every user of the run: its share of the rate is all of it
        runner = None
        parsed_options = None

    for burstiness in (1.0, 0.5, 4.0):
        loop = OpenLoop()
        loop.reset(seed=1)
        settings = Settings(request_rate=4000.0, burstiness=burstiness)
        dues = [loop.next_send_time(Env(), settings) for _ in range(2000)]  # half a second of arrivals
        loop.reset()
        gaps = [b - a for a, b in itertools.pairwise(dues)]
        assert fmean(gaps) == pytest.approx(1 / 4000, rel=0.08)
        assert pstdev(gaps) / fmean(gaps) == pytest.approx(burstiness**-0.5, rel=0.12)  # gamma: CV = 1/sqrt(k)


def test_a_paused_schedule_sends_nothing_and_resumes_from_its_new_rate_without_a_burst():
    """A capacity probe that failed pauses the arrivals while the server's backlog ends (capacity_shape.py): none
    falls due in the pause, and the first after it is one gap of the new rate away, not the pause's arrears."""
    import gevent

    from poolbench_locust.options import Settings
    from poolbench_locust.workload.arrival import OpenLoop

    class Env:
        runner = None
        parsed_options = None

    loop = OpenLoop()
    loop.reset(seed=1)
    settings = Settings(request_rate=1000.0, burstiness=25.0)  # gaps of 1 ms give or take a fifth
    [loop.next_arrival(Env(), settings) for _ in range(5)]
    loop.pause()
    scheduled = loop.tally.scheduled
    gevent.sleep(0.2)  # 200 arrivals' worth of time
    assert loop.tally.scheduled - scheduled <= 1  # the one whose gap was drawn before the pause, at most
    loop.drop_due()
    loop.rate_override = 100.0
    loop.resume()
    resumed = time.perf_counter()
    due = [loop.next_arrival(Env(), settings) for _ in range(3)]
    loop.reset()
    assert all(arrival is not None for arrival in due)
    first, last = due[0][0], due[-1][0]  # type: ignore[index]
    assert resumed < first < resumed + 0.03 and last - first == pytest.approx(0.02, rel=0.3)  # 10 ms gaps


def test_a_run_whose_schedule_is_paused_ends_at_its_run_time_not_its_request_timeout(mock_server, tmp_path):
    """Users waiting for an arrival of a paused schedule stop when the run stops (OpenLoop.end at test_stopping).
    Before, Locust gave them the stop timeout (here the default --request-timeout, 60 s) to finish their task."""
    from tests.support.locust_run import LOAD, run_locust

    started = time.monotonic()
    result = run_locust(
        "tests/support/paused_loop_locustfile.py",
        *LOAD,
        *("--request-rate", "20"),
        host=mock_server.url,
        users=2,
        run_time="2s",
        csv=tmp_path / "paused",
        timeout=90,
    )
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    assert took < 20, f"the run took {took:.0f} s: its users waited out the stop timeout"
    served = mock_server.stats()["requests"]
    assert 0 < served <= 20, "the arrivals of the half second before the pause, and none after"
    assert int(result.csv("stats")["Aggregated"]["Request Count"]) == served


def test_an_ended_schedule_releases_the_users_waiting_on_it_at_once():
    import gevent

    from poolbench_locust.options import Settings
    from poolbench_locust.workload.arrival import OpenLoop

    class Env:
        runner = None
        parsed_options = None

    loop = OpenLoop()
    loop.reset(seed=1)
    settings = Settings(request_rate=1000.0)
    loop.next_arrival(Env(), settings)
    loop.pause()
    gevent.sleep(0.02)  # the one arrival whose gap was drawn before the pause falls due, then none
    loop.drop_due()
    waiting = [gevent.spawn(loop.next_arrival, Env(), settings) for _ in range(3)]
    gevent.sleep(0.05)
    assert not any(w.ready() for w in waiting), "paused: nothing falls due"
    loop.end()
    gevent.joinall(waiting, timeout=1)
    assert [w.value for w in waiting] == [None, None, None]
    assert loop.next_arrival(Env(), settings) is None, "and any user that asks later"
    loop.reset()


@pytest.mark.timing
def test_a_dispatcher_that_did_not_run_counts_the_arrivals_it_put_out_late():
    """A process whose loop is held (here 0.3 s of a blocking sleep, as a starved CPU holds it) catches its
    schedule up when it runs again: every arrival is still scheduled, and the ones due meanwhile are counted
    late, which is what tells a capacity probe that the rate was not offered on time (capacity/probes.py)."""
    import gevent
    from gevent import monkey

    from poolbench_locust.options import Settings
    from poolbench_locust.workload.arrival import OpenLoop

    class Env:
        runner = None
        parsed_options = None

    loop = OpenLoop()
    loop.reset(seed=1)
    settings = Settings(request_rate=200.0, burstiness=25.0)
    taken = [loop.next_arrival(Env(), settings) for _ in range(20)]  # 0.1 s, on time on a machine not starved
    before = loop.tally.dispatched_late
    monkey.get_original("time", "sleep")(0.3)  # blocks the hub (Locust patched time.sleep): no greenlet runs
    taken += [loop.next_arrival(Env(), settings) for _ in range(80)]
    late = loop.tally.dispatched_late - before
    gevent.sleep(0)
    loop.reset()
    assert len(taken) == 100 and loop.tally.scheduled >= 100
    assert 40 <= late <= 70, late  # about 0.3 s x 200/s due while held, less the first 50 ms of each


def test_open_loop_achieves_the_asked_rate(mock_server_factory, tmp_path):
    """A steady arrival process (burstiness 25: gaps vary by 20%) so that 8 s suffice to judge 5%."""
    mock = mock_server_factory("--ttfb-ms", "20")
    prefix = tmp_path / "open"
    result = run_locust(
        "locustfiles/embeddings.py",
        *("--stop-timeout", "5", "--request-rate", "40", "--burstiness", "25"),
        host=mock.url,
        users=10,
        spawn_rate=100,
        run_time="8s",
        csv=prefix,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # Locust's own Requests/s counts from before the first user started: judge by count over run time
    achieved = int(csv_rows(Path(f"{prefix}_stats.csv"))["Aggregated"]["Request Count"]) / 8
    assert abs(achieved - 40) <= 0.05 * 40, achieved


def e2e(prefix: Path, column: str) -> float:
    return float(csv_rows(Path(f"{prefix}_pooling.csv"))["Aggregated"][column])


@pytest.mark.timing
def test_open_loop_latency_includes_queueing_that_closed_loop_hides(mock_server_factory, tmp_path):
    """Service time 200 ms, 2 slots: at most 10 req/s. Asked for 16 req/s, requests queue."""
    mock = mock_server_factory("--ttfb-ms", "200")
    common: dict[str, Any] = {"host": mock.url, "users": 2, "spawn_rate": 100, "run_time": "5s"}
    stop = ("--stop-timeout", "5")
    opened, closed = tmp_path / "open", tmp_path / "closed"
    assert (
        run_locust(
            "locustfiles/embeddings.py",
            *stop,
            *("--request-rate", "16", "--max-concurrency", "2"),
            **common,
            csv=opened,
        ).returncode
        == 0
    )
    assert run_locust("locustfiles/embeddings.py", *stop, **common, csv=closed).returncode == 0
    assert e2e(closed, "E2E 95%") < 300, "closed loop sees the service time only"
    assert e2e(opened, "E2E 95%") > 2 * e2e(closed, "E2E 95%"), "open loop sees the queue grow"
    assert e2e(opened, "Queue 95%") > 500


# The rates' arrivals nearly evenly spaced (--burstiness 25: a gap's spread a fifth of its mean): Poisson arrivals'
# count in a 3 s step of 15/s spreads by 15 %, and the seeded run's drew 35 of 45 once the run's end stopped
# counting the arrivals its stopping users took (OpenLoop.end).
@pytest.mark.parametrize(
    ("sweep", "targets"),
    [(["--sweep-users", "1,3"], [1, 3]), (["--sweep-rates", "5,15", "-u", "4", "--burstiness", "25"], [5, 15])],
)
def test_sweep_writes_one_row_per_step(mock_server_factory, tmp_path, sweep, targets):
    mock = mock_server_factory("--ttfb-ms", "20")
    prefix = tmp_path / "sweep"
    result = run_locust(
        "locustfiles/embeddings.py",
        *sweep,
        *("--sweep-step-time", "3", "--stop-timeout", "5"),
        host=mock.url,
        csv=prefix,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    with open(f"{prefix}_sweep.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["Target"]) for r in rows] == targets
    assert all(int(r["Request Count"]) > 0 for r in rows)
    if sweep[0] == "--sweep-rates":
        assert [round(float(r["Requests/s"])) for r in rows] == pytest.approx(targets, rel=0.25)


def test_warmup_requests_are_counted_nowhere(mock_server, tmp_path):
    prefix = tmp_path / "warm"
    result = run_locust(
        "locustfiles/embeddings.py",
        *("--stop-timeout", "5", "--warmup", "2", "--request-rate", "20"),
        host=mock_server.url,
        users=1,
        run_time="4s",
        csv=prefix,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    counted = int(csv_rows(Path(f"{prefix}_stats.csv"))["Aggregated"]["Request Count"])
    pooling = int(csv_rows(Path(f"{prefix}_pooling.csv"))["Aggregated"]["Request Count"])
    served = mock_server.stats()["requests"]
    assert counted == pooling
    assert 25 <= served - counted <= 55, (served, counted)  # about 2 s of 20 req/s went uncounted


SERVER_MS = 263.5
"""Between Locust's buckets of 260 and 270 ms: a rounded percentile misses the true one by 1.3 % or more."""


def test_sweep_steps_carry_the_precise_percentiles(mock_server_factory, tmp_path):
    from tests.support.percentiles import PERCENTILES, nearest_rank

    mock = mock_server_factory("--ttfb-ms", str(SERVER_MS))
    prefix, result, record = tmp_path / "sweep", tmp_path / "result.json", tmp_path / "times"
    record.mkdir()
    done = run_locust(
        "tests/support/recording_locustfile.py",
        *(
            "--only-summary",
            "--batch-size",
            "1",
            "--sweep-users",
            "1,2",
            "--sweep-step-time",
            "3",
            "--stop-timeout",
            "5",
        ),
        host=mock.url,
        csv=prefix,
        json_result=result,
        timeout=60,
        env={"RECORD_DIR": str(record)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (times,) = [orjson.loads(f.read_bytes()) for f in record.iterdir()]  # every request's time, in event order
    with open(f"{prefix}_sweep.csv") as f:
        rows = list(csv.DictReader(f))
    steps = orjson.loads(result.read_bytes())["sweep"]["steps"]
    assert sum(int(r["Request Count"]) for r in rows) == len(times)
    first = 0
    for row, step in zip(rows, steps, strict=True):
        count = int(row["Request Count"])
        assert count >= 5, row
        mine, first = times[first : first + count], first + count  # the step's own requests
        assert min(mine) >= SERVER_MS
        for p in PERCENTILES:
            true = nearest_rank(mine, int(p[:-1]) / 100)
            assert abs(float(row[f"E2E {p}"]) - true) <= 0.005 * true, (row["Step"], p, row[f"E2E {p}"], true)
            assert step[f"E2E {p}"] == float(row[f"E2E {p}"]), "the JSON result's step says what the CSV says"
