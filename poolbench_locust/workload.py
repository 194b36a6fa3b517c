"""Synthetic request bodies, prepared before the test so that the timed loop only sends bytes.

Each input is exactly `--input-len` words drawn from a fixed vocabulary, so the documented
client-side token rule (`wire.count_words`) knows its count without looking at it again. A
small pool of distinct bodies per User class is shared by its users: varied enough that a server
cannot answer from a cache of one prompt, small enough that 1,000 users cost no memory.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import orjson

from poolbench_locust.endpoints.spec import Endpoint, Inputs
from poolbench_locust.options import Settings
from poolbench_locust.wire import count_words

POOL_SIZE = 32

_VOCABULARY = (
    "the of and to in is that for it as with was on be by this are from at or an have not which but "
    "vector model server token batch query document search answer score rank embed latency memory "
    "river mountain window garden yellow silver quiet rapid ancient modern simple careful bright "
    "north south east west winter summer spring autumn morning evening little large small great"
).split()


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    body: bytes
    sequences: int
    """Inputs the server pools: texts embedded, or query-document pairs scored."""
    client_tokens: int
    """The word-rule count of every prompt the server sees (a query counts once per document)."""
    expected_items: int
    """Embeddings or results a correct answer holds."""


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choices(_VOCABULARY, k=words))


def synthetic_inputs(endpoint: Endpoint, settings: Settings, rng: random.Random) -> Inputs:
    if endpoint.shape == "pairs":
        docs = tuple(_text(rng, settings.input_len) for _ in range(settings.documents))
        return Inputs(docs, query=_text(rng, settings.input_len))
    return Inputs(tuple(_text(rng, settings.input_len) for _ in range(settings.batch_size)))


def prepare(endpoint: Endpoint, settings: Settings, inputs: Inputs) -> PreparedRequest:
    body = orjson.dumps(endpoint.body(inputs, settings))
    words = sum(count_words(t) for t in inputs.texts)
    if endpoint.shape == "pairs":
        pairs = len(inputs.texts)
        return PreparedRequest(body, pairs, words + pairs * count_words(inputs.query), pairs)
    if endpoint.shape == "chat":  # one conversation, however many messages, is one embedding
        return PreparedRequest(body, 1, words, 1)
    return PreparedRequest(body, len(inputs.texts), words, len(inputs.texts))


def request_pool(endpoint: Endpoint, settings: Settings, seed: int = 0, size: int = POOL_SIZE) -> list[PreparedRequest]:
    rng = random.Random(seed)
    return [prepare(endpoint, settings, synthetic_inputs(endpoint, settings, rng)) for _ in range(size)]
