"""Inputs from Parquet files, `datasets` save_to_disk directories and the local Hugging Face cache reach
the server as written; a missing column, a bad row or a missing extra stops the run at start, named.

Every dataset here is made by the test; nothing is downloaded (the code switches the Hub off, and the
cache used is the test's own directory)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import poolbench_locust as pb
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.options import OptionError
from poolbench_locust.workload import corpus
from tests.support.harness import Run, failure_text, options
from tests.support.hostile import HostileServer, response, serve_requests
from tests.support.recording_server import answer_for

pa: Any = None
pq: Any = None
datasets: Any = None


@pytest.fixture(scope="module", autouse=True)
def _arrow_and_datasets() -> None:
    """pyarrow and datasets (skipped without them), imported for this module's first test, not at its import:
    every xdist worker imports each test module to collect it, and these two cost 1.5 s of CPU."""
    global pa, pq, datasets
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    datasets = pytest.importorskip("datasets")


TEXTS = ["plain words", "ünïcödé and emoji 🚀", "  spaces kept  ", 'a "quoted" line, with commas']
PAIRS = [
    {"query": "what is a vector", "documents": ["a list of numbers", "an arrow"]},
    {"query": "second query", "documents": ["only one document"]},
]


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    bodies: list[dict[str, Any]] = []

    def answer(head: bytes, body: bytes, _n: int) -> bytes:
        doc = orjson.loads(body)
        bodies.append(doc)
        return response(200, answer_for(head.split(b" ")[1].decode(), doc))

    with HostileServer(serve_requests(answer)) as hostile:
        yield hostile.url, bodies


def sent(user_class: type, url: str, bodies: list[dict[str, Any]], count: int, *args: str) -> list[dict[str, Any]]:
    run = Run(user_class, url, *args)
    events = [run.one() for _ in range(count)]
    assert [failure_text(e) for e in events] == [""] * count
    return bodies[-count:]


def write_parquet(path: Path, columns: dict[str, list[Any]]) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


def test_parquet_texts_reach_the_server_as_written(server, tmp_path):
    url, bodies = server
    path = write_parquet(tmp_path / "corpus.parquet", {"id": list(range(len(TEXTS))), "text": TEXTS})
    got = sent(pb.EmbeddingsUser, url, bodies, len(TEXTS), "--dataset", f"file:{path}")
    assert sorted(t for b in got for t in b["input"]) == sorted(TEXTS)


def test_dataset_column_names_the_texts_column(server, tmp_path):
    url, bodies = server
    path = write_parquet(tmp_path / "beir.parquet", {"_id": ["d1", "d2", "d3", "d4"], "passage": TEXTS})
    args = ("--dataset", f"file:{path}", "--dataset-column", "passage")
    got = sent(pb.EmbeddingsUser, url, bodies, len(TEXTS), *args)
    assert sorted(t for b in got for t in b["input"]) == sorted(TEXTS)


def test_parquet_query_and_documents_reach_a_rerank_server_as_written(server, tmp_path):
    url, bodies = server
    columns = {"query": [p["query"] for p in PAIRS], "documents": [p["documents"] for p in PAIRS]}
    path = write_parquet(tmp_path / "pairs.parquet", columns)
    got = sent(pb.RerankUser, url, bodies, 2, "--dataset", f"file:{path}")
    assert sorted((b["query"], b["documents"]) for b in got) == sorted((p["query"], p["documents"]) for p in PAIRS)


def test_a_saved_dataset_directory_reaches_the_server_as_written(server, tmp_path):
    url, bodies = server
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict({"text": TEXTS, "label": [0, 1, 0, 1]}).save_to_disk(str(saved))
    got = sent(pb.EmbeddingsUser, url, bodies, len(TEXTS), "--dataset", f"file:{saved}")
    assert sorted(t for b in got for t in b["input"]) == sorted(TEXTS)


def test_a_saved_dataset_dict_takes_its_train_split(server, tmp_path):
    url, bodies = server
    saved = tmp_path / "saved_dict"
    splits = {
        "train": datasets.Dataset.from_dict({"text": TEXTS[:2]}),
        "test": datasets.Dataset.from_dict({"text": ["x"]}),
    }
    datasets.DatasetDict(splits).save_to_disk(str(saved))
    got = sent(pb.EmbeddingsUser, url, bodies, 2, "--dataset", f"file:{saved}")
    assert sorted(t for b in got for t in b["input"]) == sorted(TEXTS[:2])


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local Hugging Face cache holding `tiny/corpus` as `load_dataset` leaves a Hub dataset it loaded:
    built from a local JSON file by the packaged json builder, then laid out under the dataset's name."""
    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    source = tmp_path / "corpus.jsonl"
    source.write_bytes(b"".join(orjson.dumps({"text": t}) + b"\n" for t in TEXTS))
    builder = datasets.load_dataset_builder("json", data_files={"train": str(source)}, cache_dir=str(cache))
    builder.download_and_prepare()
    built = Path(builder.cache_dir)  # cache/json/default-<hash>/0.0.0/<hash>
    target = cache / "tiny___corpus" / "default" / "0.0.0" / built.name
    target.mkdir(parents=True)
    for item in built.iterdir():
        shutil.copy(item, target / item.name.replace("json-", "corpus-"))
    return cache


def test_hf_name_reads_the_local_cache_only(server, hf_cache):
    url, bodies = server
    got = sent(pb.EmbeddingsUser, url, bodies, len(TEXTS), "--dataset", "hf:tiny/corpus:train")
    assert sorted(t for b in got for t in b["input"]) == sorted(TEXTS)
    assert datasets.config.HF_HUB_OFFLINE is True


def test_hf_name_not_in_the_cache_is_refused_without_a_download(hf_cache):
    with pytest.raises(OptionError, match=r"^--dataset: hf:nobody/absent: not in the local Hugging Face cache"):
        plan_for(type("U", (pb.EmbeddingsUser,), {}), options("--dataset", "hf:nobody/absent"))


BAD_TABLES = [
    ({"body": ["a"]}, (), r"no column 'text' \(its columns: body\); name the text column with --dataset-column"),
    ({"text": ["a", None, "c"]}, (), r"row 1: field 'text' missing or not a non-empty string"),
    ({"text": ["a"]}, ("--dataset-column", "passage"), r"no column 'passage' \(its columns: text\)"),
]


@pytest.mark.parametrize(("columns", "args", "message"), BAD_TABLES, ids=[b[2][:30] for b in BAD_TABLES])
def test_bad_parquet_files_name_the_column_or_row(tmp_path, columns, args, message):
    path = write_parquet(tmp_path / "bad.parquet", columns)
    with pytest.raises(OptionError, match=rf"^--dataset: {path}:? {message}"):
        plan_for(type("U", (pb.EmbeddingsUser,), {}), options("--dataset", f"file:{path}", *args))


def test_a_bad_saved_dataset_names_its_row(tmp_path):
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict({"text": ["fine", ""]}).save_to_disk(str(saved))
    with pytest.raises(OptionError, match=rf"^--dataset: {saved} row 1: field 'text' missing"):
        plan_for(type("U", (pb.EmbeddingsUser,), {}), options("--dataset", f"file:{saved}"))


def test_dataset_column_is_refused_where_it_names_nothing(tmp_path):
    path = tmp_path / "inputs.txt"
    path.write_text("a line\n")
    with pytest.raises(OptionError, match=r"^--dataset-column: names a field of"):
        plan_for(type("U", (pb.EmbeddingsUser,), {}), options("--dataset", f"file:{path}", "--dataset-column", "x"))
    with pytest.raises(OptionError, match=r"^--dataset-column: names a column of a file"):
        plan_for(type("U", (pb.EmbeddingsUser,), {}), options("--dataset-column", "x"))


def test_without_pyarrow_the_message_names_the_extra(tmp_path, monkeypatch):
    path = write_parquet(tmp_path / "corpus.parquet", {"text": ["a"]})
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # an import of it now fails as if not installed
    with pytest.raises(OptionError, match=r"needs pyarrow: pip install 'poolbench-locust\[datasets\]'"):
        plan_for(type("U", (pb.EmbeddingsUser,), {}), options("--dataset", f"file:{path}"))


def test_reading_stops_at_the_records_the_pool_can_use(tmp_path):
    """A corpus larger than any pool is read only as far as the pool goes: its size costs no memory."""
    path = write_parquet(tmp_path / "big.parquet", {"text": [f"passage {i}" for i in range(20_000)]})
    records = corpus.parquet_records(path, "texts", None, limit=3000)
    assert [r.texts[0] for r in records] == [f"passage {i}" for i in range(3000)]
