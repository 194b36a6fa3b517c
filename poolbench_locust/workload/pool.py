"""Request bodies prepared before the test, so that the timed loop only sends bytes.

A pool of distinct bodies per User class is shared by its users: varied enough that a server
cannot answer from a cache of one prompt, small enough that 1,000 users cost no memory. The pool
is drawn from one `random.Random` of --seed and the process's worker index, so the same seed prepares the same
requests in the same process, and no two processes of a run send the same pool. With --repeat-ratio, a share of
its inputs are copies of an earlier request's (workload/cache_inputs.py), to provoke the server's caches.

With --images, each request is sent with images of its own (`FreshImages`): the pool's bodies are templates,
each image's last bytes made anew as the request is taken.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from poolbench_locust.endpoints.spec import Endpoint, Inputs
from poolbench_locust.options import OptionError, Settings
from poolbench_locust.workload import images, injected_references
from poolbench_locust.workload.cache_inputs import Repeats
from poolbench_locust.workload.datasets import Dataset
from poolbench_locust.workload.input_lengths import InputLengths
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
    input_tokens: tuple[int, ...] = ()
    """Each input's exact token count, kept only for token-level answers checked against it (one row per
    token); empty for every other request, so that a pool of them costs nothing more."""
    refs: tuple[tuple[int, int], ...] = ()
    """The reference inputs this request carries (docs/consistency.md): (the position of the input's item in
    the answer, or -1 for the whole answer's scores, the reference's id); empty for most requests, so that
    the engine's cost for them is one attribute test."""


def prepare(
    endpoint: Endpoint,
    settings: Settings,
    inputs: Inputs,
    counter: TokenCounter,
    fields: Mapping[str, Any],
    per_input: bool = False,
    lengths: InputLengths | None = None,
) -> PreparedRequest:
    """One request; `fields` (request_fields.request_fields) merged into its body; with `per_input`, each
    input's own token count kept beside their sum; with `lengths`, each input's count added to that tally
    (the counts the sum is made of: nothing is counted twice but a batch of conversations' messages)."""
    if inputs.images:
        inputs = images.sendable(endpoint, inputs)
        if endpoint.images == "alone":  # each image one input, one vector; the texts are not sent
            count = sum(len(i) for i in inputs.images)
            return PreparedRequest(_body(endpoint, settings, inputs, fields), count, 0, count)
        if endpoint.images == "chat":  # one conversation of the texts and their images: one vector
            tokens = sum(counter.count(t) for t in inputs.texts if t)
            if lengths is not None:
                lengths.add((tokens,))  # its images' tokens are not counted: the server's count is higher
            return PreparedRequest(_body(endpoint, settings, inputs, fields), 1, tokens, 1)
    body = _body(endpoint, settings, inputs, fields)
    if per_input and endpoint.shape == "texts":
        counts = tuple(counter.count(t) for t in inputs.texts)
        if lengths is not None:
            lengths.add(counts)
        return PreparedRequest(body, len(counts), sum(counts), len(counts), counts)
    each = [counter.count(t) for t in inputs.texts if t]
    tokens = sum(each)
    if endpoint.shape == "pairs":
        pairs = len(inputs.texts)
        query = counter.count(inputs.query)
        if lengths is not None:  # a cross-encoder's prompt is the query and the document together
            lengths.add(query + n for n in each)
        return PreparedRequest(body, pairs, tokens + pairs * query, pairs)
    if endpoint.shape == "chat":  # one conversation, however many messages, is one embedding
        conversations = len(inputs.conversations) or 1
        if lengths is not None:
            lengths.add(_conversation_counts(inputs, counter) if inputs.conversations else (tokens,))
        return PreparedRequest(body, conversations, tokens, conversations)
    if lengths is not None:
        lengths.add(each)
    return PreparedRequest(body, len(inputs.texts), tokens, len(inputs.texts))


def _conversation_counts(inputs: Inputs, counter: TokenCounter) -> list[int]:
    """Each conversation's tokens of a batch of them: its messages' texts (a chat template adds a few more)."""
    return [
        sum(counter.count(text) for message in conversation for text in _message_texts(message) if text)
        for conversation in inputs.conversations
    ]


def _message_texts(message: Mapping[str, Any]) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):  # content parts: the texts beside the images
        return [p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
    return []


def _body(endpoint: Endpoint, settings: Settings, inputs: Inputs, fields: Mapping[str, Any]) -> bytes:
    # orjson's bytes keep the whole buffer it wrote into (8 KiB for a 600-byte body): a pool of 10,000 such
    # bodies held 78 MiB (bench/dataset_memory.py). A copy of the body's own size holds 6 MiB.
    return bytes(memoryview(orjson.dumps(merged(endpoint.body(inputs, settings), fields))))


POOL_BYTES = 128 * 1024 * 1024
"""The most bytes of bodies a pool holds: images make a body megabytes (64 of 512x512 are 1.6 MB), and a
pool of 10,000 such bodies would hold gigabytes. The pool stops growing here (after its first body)."""

logger = logging.getLogger("poolbench_locust")


MASTER = 0xFFFF
"""The worker index of a distributed run's master, which sends only its preflight request: one no worker has."""


def pool_random(settings: Settings, worker: int) -> random.Random:
    """What a pool's inputs are drawn from: --seed alone in a process of its own (a worker index of 0), so that a
    seed keeps the requests it always prepared there, and --seed with the worker index in every other worker."""
    return random.Random(settings.seed) if worker == 0 else random.Random(f"{settings.seed} worker {worker}")


def request_pool(
    endpoint: Endpoint,
    settings: Settings,
    dataset: Dataset,
    counter: TokenCounter,
    per_input: bool = False,
    references: list[PreparedRequest] | None = None,
    reference_inputs: list[Any] | None = None,
    lengths: InputLengths | None = None,
    worker: int = 0,
) -> list[PreparedRequest]:
    """The pool of distinct requests. With `lengths` (workload/input_lengths.py), each of its inputs' counts
    is tallied there. With `references` (a list, filled here), up to --consistency-inputs of its requests carry
    a reference input (`PreparedRequest.refs`), the id of each its index in `references`: for a texts-shaped
    endpoint the first text of each of the first distinct requests, alone in a request of its own; for a
    pairs-shaped one the whole request, itself its reference. With `reference_inputs` too, each reference's
    input is appended to it by id (`reference_input`): what a reference file keys it by.
    `worker`: the process's worker index (0 in a process of its own), which its inputs and images are drawn with.
    With --images, a `FreshImages`: the same requests, each taken with images of its own.

    Where the pool's inputs do not recur within a run (a trace, a large dataset: injected_references.injects),
    the references are drawn from a small share of marked requests instead, each of which then carries one
    in place of one of its own inputs (workload/injected_references.py); such a pool is drawn from --seed alone
    in every worker, as its references are."""
    # The requests that carry a reference input are drawn from --seed alone in every worker: the workers'
    # references are compared with each other by input (consistency/reference_agreement.py), and a reference
    # file (--consistency-reference) holds one run's inputs. The rest are each worker's own.
    shared, own = random.Random(settings.seed), pool_random(settings, worker)
    if worker == 0:
        own = shared
    fields = request_fields(endpoint, settings)
    numbers = images.ImageNumbers(settings, worker) if settings.images else None
    repeats = Repeats(settings.repeat_ratio, settings.seed, endpoint.shape)
    pool: list[PreparedRequest] = []
    urls: list[tuple[str, ...]] = []
    """Each request's generated images (--images), in the order they were drawn."""
    known: dict[Any, int] = {}
    """Reference id by its input (a text; a pairs request's body): a later copy carries the same one."""
    held = 0
    wanted = dataset.size_hint()
    marks: injected_references.Marks | None = None
    if references is not None and injected_references.injects(settings, endpoint.shape, wanted):
        marks = injected_references.Marks.of(settings, endpoint, getattr(dataset, "schedule", None))
    for _ in range(wanted):
        choosing = references is not None and len(references) < settings.consistency_inputs
        inputs = dataset.draw(shared if choosing else own)
        if inputs.images and endpoint.images is None:
            raise OptionError("--dataset", f"its records hold images, which {endpoint.route} does not take")
        if numbers is not None:
            if inputs.images:
                raise OptionError("--images", "the dataset brings its own images: leave --images out")
            inputs = images.with_generated(inputs, numbers)
        inputs = repeats.apply(inputs)
        if numbers is not None:
            urls.append(tuple(url for each in inputs.images for url in each))
        request = prepare(endpoint, settings, inputs, counter, fields, per_input, lengths)
        if marks is not None and injected_references.markable(inputs, endpoint.shape == "pairs"):
            marks.see(len(pool), inputs, request.sequences)
        elif references is not None and inputs.texts:  # images: the first requests' references
            request = _with_reference(
                endpoint, settings, inputs, request, counter, fields, references, known, reference_inputs
            )
        pool.append(request)
        held += len(request.body)
        if held >= POOL_BYTES and len(pool) < wanted:
            logger.info(
                "%s: %d distinct requests prepared, not %d: their bodies hold %d MB (images), the most a pool holds",
                endpoint.route,
                len(pool),
                wanted,
                held >> 20,
            )
            break
    if marks is not None and references is not None:
        _inject(endpoint, settings, pool, marks, counter, fields, per_input, references, reference_inputs)
    if repeats.ratio:
        logger.info(
            "%s: %d of the pool's %d inputs are copies of an earlier request's (--repeat-ratio %s)",
            endpoint.route,
            repeats.repeats,
            repeats.inputs,
            settings.repeat_ratio,
        )
    if numbers is not None:
        return FreshImages(pool, urls, numbers)
    return pool


REFERENCE_EVERY = 8
"""A request that carries a reference input is sent as prepared (so that its answer can be compared with the
reference's) one take in this many; the others are sent with fresh images and no reference. With 8 of a pool of
32 carrying one, 1 request in 32 sends images sent before, where every fourth would."""


class FreshImages(list[PreparedRequest]):
    """A pool of requests with generated images, each taken (`pool[i]`, what a user does for every request) with
    images of its own: its template's body with each image's tail (images.ImageNumbers.sent) in place of the
    template's, so that no image is sent twice, at the cost of the tails (microseconds) and one copy of the
    body; bench/fresh_images.py measures it. Iterating gives the templates, as a list would.

    Two kinds of image are sent as prepared: those of a request that carries a reference input, one take in
    REFERENCE_EVERY (its answer is compared with the reference's, so its input must be the reference's), and
    those --repeat-ratio copied (found more than once in the pool: a copy is the point). `sent_as_prepared`
    counts the requests that always hold some; `carrying` the requests sent with a reference, in the pool's
    terms (the comparison budget's: engine/comparison_budget.py)."""

    def __init__(self, requests: list[PreparedRequest], urls: list[tuple[str, ...]], numbers: images.ImageNumbers):
        super().__init__(requests)
        self.numbers = numbers
        head = numbers.generator.url_head.encode("ascii")
        seen: dict[str, int] = {}
        for each in urls:
            for url in each:
                seen[url] = seen.get(url, 0) + 1
        self._fresh = [_fresh(request, each, seen, head) for request, each in zip(requests, urls, strict=True)]
        self.sent_as_prepared = sum(1 for f in self._fresh if f is None or f.kept)
        """Requests always sent with images found in other requests too (--repeat-ratio's copies)."""
        self.carrying = sum(
            (1 / REFERENCE_EVERY if f is not None else 1) for f, r in zip(self._fresh, requests, strict=True) if r.refs
        )
        """Requests sent with their reference input, per turn of the pool."""

    def __getitem__(self, index: Any) -> Any:
        fresh = self._fresh[index]
        if type(fresh) is not _Fresh:  # a request sent as prepared, or a slice: the templates
            return list.__getitem__(self, index)
        t = fresh.template
        if t.refs:
            taken = fresh.taken
            fresh.taken = taken + 1
            if taken % REFERENCE_EVERY == 0:
                return t
        sent = self.numbers.sent
        parts = fresh.parts
        body: list[bytes | memoryview] = [parts[0]]
        for part in parts[1:]:
            body.append(sent())
            body.append(part)
        return PreparedRequest(b"".join(body), t.sequences, t.client_tokens, t.expected_items, t.input_tokens)


class _Fresh:
    __slots__ = ("kept", "parts", "taken", "template")

    def __init__(self, template: PreparedRequest, parts: tuple[memoryview, ...], kept: bool) -> None:
        self.template = template
        self.parts = parts
        """The template's body cut around each image's tail: a fresh tail goes between each two parts."""
        self.kept = kept
        """Some of its images are sent as prepared (copies found elsewhere in the pool)."""
        self.taken = 0
        """Takes of a request that carries a reference: one in REFERENCE_EVERY is sent as prepared."""


def _fresh(request: PreparedRequest, urls: tuple[str, ...], seen: Mapping[str, int], head: bytes) -> _Fresh | None:
    """Where the request's images found once in the pool (`seen`: how often each is) sit in its body; None when
    the body holds none of them."""
    body = request.body
    view = memoryview(body)
    cuts: list[tuple[int, int]] = []
    for url in urls:
        if seen[url] > 1:
            continue
        whole = url.encode("ascii")
        at = body.find(whole + b'"')  # a URL ends at its quote: no other URL is found in its place
        if at < 0 or not whole.startswith(head) or body.find(whole + b'"', at + 1) >= 0:
            continue  # not in the body as written, or in it twice: sent as prepared
        cuts.append((at + len(head), at + len(whole)))
    if not cuts:
        return None
    cuts.sort()
    parts, start = [], 0
    for begin, end in cuts:
        parts.append(view[start:begin])
        start = end
    parts.append(view[start:])
    return _Fresh(request, tuple(parts), kept=len(cuts) < len(urls))


def reference_input(endpoint: Endpoint, inputs: Inputs) -> str | dict[str, Any] | None:
    """The input a reference answers, as a reference file (consistency/reference_file.py) writes it: the text
    embedded; for a pairs-shaped endpoint the query and its documents. None for a conversation or an input
    with images: no reference file holds those."""
    if endpoint.shape == "pairs":
        return {"query": inputs.query, "documents": list(inputs.texts)}
    if endpoint.shape == "chat" or inputs.images:
        return None
    return inputs.texts[0]


def _with_reference(
    endpoint: Endpoint,
    settings: Settings,
    inputs: Inputs,
    request: PreparedRequest,
    counter: TokenCounter,
    fields: Mapping[str, Any],
    references: list[PreparedRequest],
    known: dict[Any, int],
    reference_inputs: list[Any] | None = None,
) -> PreparedRequest:
    """The request, marked with the reference it carries, if any (a new one while fewer than
    --consistency-inputs are chosen); a new reference's own request appended to `references`, its input to
    `reference_inputs`."""
    key, alone = _reference_of(endpoint, inputs, request)
    if (ref_id := known.get(key)) is None:
        if len(references) >= settings.consistency_inputs:
            return request
        ref_id = known[key] = len(references)
        references.append(request if alone is None else prepare(endpoint, settings, alone, counter, fields))
        if reference_inputs is not None:
            reference_inputs.append(reference_input(endpoint, inputs))
    return replace(request, refs=((-1 if endpoint.shape == "pairs" else 0, ref_id),))


def _reference_of(endpoint: Endpoint, inputs: Inputs, request: PreparedRequest) -> tuple[Any, Inputs | None]:
    """(what identifies the request's reference input, the inputs of its reference request alone; None: the
    request is its own reference). A query with its documents, one chat conversation, a conversation of
    every text and its images (/pooling): the whole request, one answer. A batch of conversations: its first
    conversation alone, with its images. Texts: the first text alone, with its images (the first image
    alone where each image is an input of its own)."""
    if endpoint.shape == "pairs" or (endpoint.shape == "chat" and not inputs.conversations):
        return request.body, None
    if endpoint.shape == "chat":
        conversation = inputs.conversations[0]
        own = inputs.images[:1]
        texts = tuple(m["content"] for m in conversation if isinstance(m.get("content"), str))
        key = orjson.dumps([list(conversation), list(own)], option=orjson.OPT_SORT_KEYS)
        return key, Inputs(texts, messages=conversation, images=own)
    if inputs.images:
        if endpoint.images == "chat":
            return request.body, None
        if endpoint.images == "alone":
            if (first := next((url for urls in inputs.images for url in urls), None)) is None:
                return request.body, None
            return ("image", first), Inputs(("",), images=((first,),))
        own = inputs.images[:1]
        return (inputs.texts[0], own), Inputs(inputs.texts[:1], images=own)
    return inputs.texts[0], Inputs(inputs.texts[:1])


def _inject(
    endpoint: Endpoint,
    settings: Settings,
    pool: list[PreparedRequest],
    marks: injected_references.Marks,
    counter: TokenCounter,
    fields: Mapping[str, Any],
    per_input: bool,
    references: list[PreparedRequest],
    reference_inputs: list[Any] | None,
) -> None:
    """The pool's marked requests made to carry a reference in place of one of their inputs, in place; the
    references (each a text alone, or a pairs request whole) appended to `references`, their inputs to
    `reference_inputs` (workload/injected_references.py)."""
    marked = [(i, inputs) for i, inputs in marks.marked if i < len(pool)]  # a pool cut short (POOL_BYTES)
    base = len(references)  # those its requests with images took, the first ones' (_with_reference)
    if not marked or (most := settings.consistency_inputs - base) < 1:
        return
    if endpoint.shape == "pairs":
        sizes = [(pool[i].sequences, pool[i].client_tokens, order) for order, (i, _) in enumerate(marked)]
        bodies: set[bytes] = set()
        distinct = []  # a request repeated (--repeat-ratio, a dataset's duplicates) is one reference at most
        for size in sizes:
            if (body := pool[marked[size[2]][0]].body) not in bodies:
                bodies.add(body)
                distinct.append(size)
        chosen = injected_references.chosen_requests(distinct, most)
        for order in chosen:
            index, inputs = marked[order]
            references.append(pool[index])
            if reference_inputs is not None:
                reference_inputs.append(reference_input(endpoint, inputs))
        for (index, _), ref_id in zip(marked, injected_references.carried_pairs(sizes, chosen), strict=True):
            pool[index] = replace(references[base + ref_id], refs=((-1, base + ref_id),))
    else:
        lengths = {t: counter.count(t) for _, inputs in marked for t in inputs.texts}
        texts = injected_references.chosen_texts(marked, lengths, most)
        for text in texts:
            references.append(prepare(endpoint, settings, Inputs((text,)), counter, fields))
            if reference_inputs is not None:
                reference_inputs.append(text)
        for index, inputs, position, ref_id in injected_references.carried_texts(marked, lengths, texts):
            request = prepare(endpoint, settings, inputs, counter, fields, per_input)
            pool[index] = replace(request, refs=((position, base + ref_id),))
    logger.info(
        "%s: %d of the pool's %d requests carry one of %d reference inputs in place of their own "
        "(its inputs do not recur: docs/consistency.md)",
        endpoint.route,
        len(marked),
        len(pool),
        len(references),
    )
