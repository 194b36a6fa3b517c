"""Request bodies prepared before the test, so that the timed loop only sends bytes.

A pool of distinct bodies per User class is shared by its users: varied enough that a server
cannot answer from a cache of one prompt, small enough that 1,000 users cost no memory. The pool
is drawn from one `random.Random(--seed)`, so the same seed prepares the same requests.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from poolbench_locust.endpoints.spec import Endpoint, Inputs
from poolbench_locust.options import Settings
from poolbench_locust.workload.datasets import Dataset
from poolbench_locust.workload.request_fields import merged, request_fields
from poolbench_locust.workload.tokens import TokenCounter


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    body: bytes
    sequences: int
    """Inputs the server pools: texts embedded, or query-document pairs scored."""
    client_tokens: int
    """The client's count of every prompt the server sees (a query counts once per document)."""
    expected_items: int
    """Embeddings or results a correct answer holds."""


def prepare(
    endpoint: Endpoint, settings: Settings, inputs: Inputs, counter: TokenCounter, fields: Mapping[str, Any]
) -> PreparedRequest:
    """One request; `fields` (request_fields.request_fields) merged into its body."""
    # orjson's bytes keep the whole buffer it wrote into (8 KiB for a 600-byte body): a pool of 10,000 such
    # bodies held 78 MiB (bench/dataset_memory.py). A copy of the body's own size holds 6 MiB.
    body = bytes(memoryview(orjson.dumps(merged(endpoint.body(inputs, settings), fields))))
    tokens = sum(counter.count(t) for t in inputs.texts)
    if endpoint.shape == "pairs":
        pairs = len(inputs.texts)
        return PreparedRequest(body, pairs, tokens + pairs * counter.count(inputs.query), pairs)
    if endpoint.shape == "chat":  # one conversation, however many messages, is one embedding
        conversations = len(inputs.conversations) or 1
        return PreparedRequest(body, conversations, tokens, conversations)
    return PreparedRequest(body, len(inputs.texts), tokens, len(inputs.texts))


def request_pool(
    endpoint: Endpoint, settings: Settings, dataset: Dataset, counter: TokenCounter
) -> list[PreparedRequest]:
    rng = random.Random(settings.seed)
    fields = request_fields(endpoint, settings)
    return [prepare(endpoint, settings, dataset.draw(rng), counter, fields) for _ in range(dataset.size_hint())]
