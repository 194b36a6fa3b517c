"""Which source --dataset names: random texts, a file or saved dataset, the local Hugging Face cache,
or a trace to replay."""

from __future__ import annotations

from poolbench_locust.endpoints.spec import Shape
from poolbench_locust.options import Settings
from poolbench_locust.workload import corpus
from poolbench_locust.workload.datasets import Dataset, FileDataset, RandomDataset, load_file, records_wanted
from poolbench_locust.workload.tokens import TokenCounter
from poolbench_locust.workload.trace import TraceDataset


def dataset_for(settings: Settings, shape: Shape, counter: TokenCounter) -> Dataset:
    limit = records_wanted(settings, shape)
    if settings.dataset.startswith("file:"):
        path = settings.dataset.removeprefix("file:")
        return FileDataset(load_file(path, shape, limit, settings.dataset_column), settings, shape, counter)
    if settings.dataset.startswith("hf:"):
        records = corpus.hub_records(settings.dataset.removeprefix("hf:"), shape, settings.dataset_column, limit)
        return FileDataset(records, settings, shape, counter)
    if settings.trace is not None:
        return TraceDataset(settings, shape, counter)
    return RandomDataset(settings, shape, counter)
