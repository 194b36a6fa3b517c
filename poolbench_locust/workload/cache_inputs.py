"""Inputs that provoke a server's caches, so that a cache that answers wrongly shows: --repeat-ratio (a share of
the inputs are exact copies of inputs an earlier request of the pool carries) and --shared-prefix-tokens (every
input begins with the same words: the prefix of a random text is datasets.LengthFitter's; a dataset's text gets
it prepended here).

A repeat keeps the workload's shape: it takes the place of an input in the same request, so every request keeps
its batch size (its documents); what it copies is an input drawn as every other was, so lengths keep their
distribution. The client counts each request's tokens from the texts it sends, copies included, so its counts
stay exact. Repeats are drawn from a `random.Random` of their own (from --seed), so that the inputs drawn are the
same with or without them.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from poolbench_locust.endpoints.spec import Inputs, Shape

EARLIER_KEPT = 1024
"""Earlier inputs (rerank and score: earlier requests) a repeat may copy: a uniform sample of all of them
(reservoir sampling), so that a pool of any size holds no more of them than this."""


SOURCE_DRAWS = 8
"""Earlier requests drawn at most to find one with as many documents as a rerank's repeats want."""


def prefixed(inputs: Inputs, shape: Shape, prefix: str) -> Inputs:
    """A dataset's record with `prefix` (words and a space) before its text: the query of rerank and score, the
    first message of a chat, each text otherwise; an input of images alone (no text) stays as it is."""
    if shape == "pairs":
        return replace(inputs, query=prefix + inputs.query)
    if shape == "chat" and inputs.messages:
        first, *rest = inputs.messages
        messages = ({**first, "content": prefix + first["content"]}, *rest)
        return replace(inputs, texts=tuple(m["content"] for m in messages), messages=messages)
    return replace(inputs, texts=tuple(prefix + t if t else t for t in inputs.texts))


@dataclass(frozen=True, slots=True)
class _Unit:
    """One input as a repeat copies it: a text (a document), a conversation, with its images."""

    texts: tuple[str, ...]
    images: tuple[str, ...] | None
    """None: the request carries no images at all."""
    messages: tuple[Mapping[str, Any], ...] = ()


def _units(inputs: Inputs, shape: Shape) -> list[_Unit]:
    """A request's inputs: its texts, or (a batch of chats) its conversations, each with its images."""
    each = inputs.conversations if shape == "chat" else inputs.texts
    images: list[tuple[str, ...] | None] = list(inputs.images) if inputs.images else [None] * len(each)
    if shape == "chat":
        return [
            _Unit(tuple(m["content"] for m in conversation), i, conversation)
            for conversation, i in zip(inputs.conversations, images, strict=True)
        ]
    return [_Unit((text,), i) for text, i in zip(inputs.texts, images, strict=True)]


def _rebuilt(inputs: Inputs, shape: Shape, units: list[_Unit]) -> Inputs:
    images = tuple(u.images or () for u in units) if any(u.images is not None for u in units) else ()
    if shape == "chat":
        return replace(
            inputs,
            texts=tuple(t for u in units for t in u.texts),
            conversations=tuple(u.messages for u in units),
            images=images,
        )
    return replace(inputs, texts=tuple(t for u in units for t in u.texts), images=images)


class Repeats:
    """Makes a share `ratio` of a pool's inputs copies of earlier ones, request by request, in the pool's order.

    After each request the repeats so far are the nearest whole number to `ratio` x the inputs so far, as far
    as the request's own inputs allow (the first request has nothing earlier to copy, a rerank's repeats come
    from one earlier request, so from at most its documents): the pool's share is then `ratio` to within one
    request's inputs over the pool's inputs, and exactly round(ratio x inputs) once those are made up.

    A repeated text or conversation is one an earlier request carries. For rerank and score, where the
    server's prompt is the query, then the document, a repeat is the pair: a request with repeats takes the
    query of one earlier request and copies some of its documents in place of its own (its others are new
    documents after a query seen before); every earlier request may be copied from, its own copies included."""

    def __init__(self, ratio: float, seed: int, shape: Shape) -> None:
        self.ratio, self.shape = ratio, shape
        self._rng = random.Random(f"repeat-ratio:{seed}")
        self._earlier: list[Any] = []
        self._offered = 0
        self.inputs = 0
        """Inputs of the pool so far (rerank and score: query-document pairs)."""
        self.repeats = 0
        """Of them, copies of an input of an earlier request."""

    def _keep(self, item: Any) -> None:
        """Reservoir sampling: every earlier input is kept with the same chance."""
        self._offered += 1
        if len(self._earlier) < EARLIER_KEPT:
            self._earlier.append(item)
        elif (slot := self._rng.randrange(self._offered)) < EARLIER_KEPT:
            self._earlier[slot] = item

    def _wanted(self, count: int) -> int:
        due = round(self.ratio * (self.inputs + count)) - self.repeats
        return max(0, min(due, count)) if self._earlier else 0

    def apply(self, inputs: Inputs) -> Inputs:
        """`inputs` with some of its inputs made copies of earlier ones; `inputs` itself when none is."""
        if self.ratio <= 0:
            return inputs
        if self.shape == "pairs":
            return self._pairs(inputs)
        if self.shape == "chat" and not inputs.conversations:  # one conversation a request: the request is the input
            return self._whole(inputs)
        units = _units(inputs, self.shape)
        wanted = self._wanted(len(units))
        fresh = list(units)
        if wanted:
            for place in self._rng.sample(range(len(units)), wanted):
                units[place] = self._rng.choice(self._earlier)
        for unit in (u for i, u in enumerate(fresh) if units[i] is u):
            self._keep(unit)
        self.inputs += len(units)
        self.repeats += wanted
        return _rebuilt(inputs, self.shape, units) if wanted else inputs

    def _pairs(self, inputs: Inputs) -> Inputs:
        count = len(inputs.texts)
        wanted = self._wanted(count)
        result = inputs
        if wanted:
            source = self._source(wanted)
            wanted = min(wanted, len(source.texts))
            places = self._rng.sample(range(count), wanted)
            copied = self._rng.sample(range(len(source.texts)), wanted)
            texts = list(inputs.texts)
            images = list(inputs.images) if inputs.images else None
            for place, index in zip(places, copied, strict=True):
                texts[place] = source.texts[index]
                if images is not None or source.images:
                    images = images if images is not None else [()] * count
                    images[place] = source.images[index] if source.images else ()
            result = replace(inputs, texts=tuple(texts), query=source.query, images=tuple(images) if images else ())
        self._keep(result)  # every pair of it is one a later request may copy
        self.inputs += count
        self.repeats += wanted
        return result

    def _source(self, wanted: int) -> Inputs:
        """An earlier request to copy `wanted` pairs from: the first of a few drawn that has that many documents,
        else the one of them with the most (a request of one document cannot give three)."""
        best: Inputs = self._rng.choice(self._earlier)
        for _ in range(SOURCE_DRAWS - 1):
            if len(best.texts) >= wanted:
                break
            other: Inputs = self._rng.choice(self._earlier)
            best = other if len(other.texts) > len(best.texts) else best
        return best

    def _whole(self, inputs: Inputs) -> Inputs:
        wanted = self._wanted(1)
        if not wanted:
            self._keep(inputs)
        self.inputs += 1
        self.repeats += wanted
        return self._rng.choice(self._earlier) if wanted else inputs
