"""Inputs from the tables public corpora ship in (BEIR, MTEB, MS MARCO): Parquet files, directories
written by `datasets`' save_to_disk, and Hugging Face datasets already in the local cache.

Rows are read in batches and reading stops at the records a pool can use (datasets.records_wanted):
a Parquet file is streamed by pyarrow's iter_batches, a saved or cached dataset is memory-mapped by
`datasets`, so a corpus of any size costs the same memory. Nothing is ever downloaded: `hf:` reads
the local cache only, with the Hub switched off before `datasets` is imported.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from poolbench_locust.endpoints.spec import Inputs, Shape
from poolbench_locust.options import OptionError
from poolbench_locust.workload import images
from poolbench_locust.workload.records import fail, record_inputs

BATCH_ROWS = 1024
"""Rows converted to Python at a time."""
PARQUET_BUFFER = 1 << 20
EXTRA = "pip install 'poolbench-locust[datasets]'"


def columns_for(shape: Shape, column: str | None) -> list[str]:
    if column is not None and shape != "texts":
        raise OptionError(
            "--dataset-column",
            "names the column of the texts to embed or classify; rerank/score read 'query' and 'documents', "
            "chat embeddings 'messages'",
        )
    return {"texts": [column or "text"], "pairs": ["query", "documents"], "chat": ["messages"]}[shape]


IMAGE_COLUMN = "image"
"""A table's image column (Hugging Face's Image feature: a struct of `bytes` and `path`; or paths or URLs):
read beside the texts (or alone) for embeddings and chat, when the table has one."""


def with_images(columns: list[str], names: list[str], shape: Shape) -> list[str]:
    """The columns to read: `columns`, and the image column where the table has one; a table of images
    without texts is read for its images alone."""
    if shape == "pairs" or IMAGE_COLUMN not in names or IMAGE_COLUMN in columns:
        return columns
    if shape == "texts" and columns[0] not in names:
        return [IMAGE_COLUMN]
    return [*columns, IMAGE_COLUMN]


def _missing(where: str, names: Iterable[str], wanted: list[str]) -> None:
    have = list(names)
    for name in wanted:
        if name not in have:
            hint = "; name the text column with --dataset-column" if wanted == ["text"] else ""
            raise fail(where, f"no column {name!r} (its columns: {', '.join(have) or 'none'}){hint}")


def _records(
    rows: Iterator[Mapping[str, Any]], shape: Shape, columns: list[str], where: str, limit: int, base: Path | None
) -> list[Inputs]:
    records = []
    held = 0
    for number, row in enumerate(rows):
        records.append(record_inputs(row, shape, f"{where} row {number}", columns[0], base))
        held += images.inline_bytes(records[-1])
        if held >= images.DATASET_IMAGE_BYTES:
            break
        if len(records) >= limit:
            break
    return records


def parquet_records(path: Path, shape: Shape, column: str | None, limit: int) -> list[Inputs]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise fail(str(path), f"reading Parquet needs pyarrow: {EXTRA}") from None
    try:
        # Buffered reads page by page: unbuffered, pyarrow reads a row group's whole column chunk at once
        # (a file of 250 MB in one row group cost 83 MB to take 10,000 rows; buffered, 23 MB).
        table = pq.ParquetFile(path, buffer_size=PARQUET_BUFFER, pre_buffer=False)
    except Exception as e:  # pyarrow raises its own ArrowInvalid and OSError kinds for a file that is not Parquet
        raise fail(str(path), f"not a Parquet file: {e}") from None
    names = list(table.schema_arrow.names)
    wanted = columns_for(shape, column)
    read = with_images(wanted, names, shape)
    _missing(str(path), names, read)

    def rows() -> Iterator[Mapping[str, Any]]:
        for batch in table.iter_batches(batch_size=BATCH_ROWS, columns=read):
            yield from batch.to_pylist()

    return _records(rows(), shape, wanted, str(path), limit, path.parent)


def _datasets_offline() -> Any:
    """`datasets`, with the Hub switched off: it reads files and the cache, and never downloads."""
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        import datasets
    except ImportError:
        raise OptionError("--dataset", f"reading a Hugging Face dataset needs the datasets package: {EXTRA}") from None
    # Imported before us (by a locustfile, a test), both libraries read the environment then: set their flags.
    # huggingface_hub refuses every HTTP request with its flag set.
    from huggingface_hub import constants

    constants.HF_HUB_OFFLINE = True
    datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = True
    return datasets


def _split(found: Any, where: str, split: str | None) -> Any:
    """One split of a DatasetDict: the named one, else the only one or 'train'."""
    if not hasattr(found, "keys"):
        return found
    names = list(found.keys())
    chosen = split or ("train" if "train" in names else names[0] if len(names) == 1 else None)
    if chosen not in names:
        raise fail(where, f"no split {chosen!r} (its splits: {', '.join(names)}); name one as hf:NAME:SPLIT")
    return found[chosen]


def _dataset_records(dataset: Any, shape: Shape, column: str | None, where: str, limit: int) -> list[Inputs]:
    wanted = columns_for(shape, column)
    columns = with_images(wanted, list(dataset.column_names), shape)
    _missing(where, dataset.column_names, columns)
    if IMAGE_COLUMN in columns:  # the Image feature's struct of bytes and path, not a decoded PIL image
        dataset = dataset.cast_column(IMAGE_COLUMN, _undecoded_image(dataset.features[IMAGE_COLUMN]))

    def rows() -> Iterator[Mapping[str, Any]]:
        for batch in dataset.select_columns(columns).iter(batch_size=BATCH_ROWS):
            for index in range(len(batch[columns[0]])):
                yield {name: batch[name][index] for name in columns}

    return _records(rows(), shape, wanted, where, limit, None)


def _undecoded_image(feature: Any) -> Any:
    """An Image feature that hands over its bytes and path instead of a PIL image (datasets' decode=False)."""
    if type(feature).__name__ == "Image":
        return type(feature)(decode=False)
    return feature


def saved_records(path: Path, shape: Shape, column: str | None, limit: int) -> list[Inputs]:
    """A directory written by Dataset.save_to_disk (or DatasetDict's: its train split)."""
    datasets = _datasets_offline()
    try:
        found = datasets.load_from_disk(str(path))
    except FileNotFoundError as e:
        raise fail(str(path), f"a directory, but not one written by datasets' save_to_disk: {e}") from None
    return _dataset_records(_split(found, str(path), None), shape, column, str(path), limit)


def hub_records(name_and_split: str, shape: Shape, column: str | None, limit: int) -> list[Inputs]:
    """hf:NAME[:SPLIT] from the local Hugging Face cache only."""
    name, _, split = name_and_split.partition(":")
    where = f"hf:{name}"
    datasets = _datasets_offline()
    try:
        found = datasets.load_dataset(name, split=split or None)
    except (ConnectionError, FileNotFoundError) as e:
        raise fail(
            where,
            f"not in the local Hugging Face cache ({datasets.config.HF_DATASETS_CACHE}), and nothing is "
            f"downloaded: load it once where the Hub is reachable, or give file:DIR of save_to_disk ({e})",
        ) from None
    except ValueError as e:  # an unknown split
        raise fail(where, str(e)) from None
    return _dataset_records(_split(found, where, split or None), shape, column, where, limit)
