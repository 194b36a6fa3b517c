"""Reference inputs put into a workload whose inputs do not recur (docs/consistency.md, "Workloads whose inputs
do not recur"): a trace, each of whose lines is sent once, or a dataset pool too large for a run to go round.

There the first requests' inputs, which a recurring pool's references are (workload/pool.py), would be
answered once each and compared hardly ever. Instead a small share of the pool's requests is marked, spread
evenly over the pool (a running sum that steps over a whole number, from an offset drawn from --seed), and
each marked request carries a reference input **in place of** one of its own of the same token length:

- texts: the references are texts of the marked requests themselves, chosen so that their token lengths
  cover the marked requests' (one a length while there are no more lengths than --consistency-inputs,
  else the lengths at even quantiles); each marked request then has the input whose length is closest to a
  reference's replaced by that reference (a request that holds one already carries it as it is). Its
  token count, batch size and shape stay what they were when a reference of that exact length exists,
  which it does for every length when there are no more lengths than references; else its count is the
  reference's, counted as every other request's is.
- rerank and score (pairs): the whole request is the input; a marked request becomes a copy of the
  reference request of the same number of documents (or the closest) and the closest token count.

The share of requests marked: twice --consistency-rate times the mean inputs a request (the comparison
budget, engine/comparison_budget.py, then compares about --consistency-rate of the inputs), or enough for
two a second at the expected rate (a trace's own; --request-rate's, the lowest --sweep-rates step's, else
ASSUMED_RATE requests a second), this one capped at PER_SECOND_MOST so that a slow trace's inputs stay
mostly its own; at most every request. Rerank and score mark --consistency-rate itself: every marked
request is compared whole. Requests with images are not marked (the first of them carry references as in a
recurring pool, workload/pool.py); nor is a chat workload (its conversations: the first requests' references).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from poolbench_locust.endpoints.spec import Endpoint, Inputs, Shape
from poolbench_locust.options import Settings

RECURRING_MOST = 256
"""The most requests of a dataset's pool (file:, hf:) whose first requests' references recur: at 50
requests a second, a user who starts anywhere in a pool of 256 meets its first 8 requests about every
5 s, and 16 users together more than once a second. A larger pool gets references put into it."""
ASSUMED_RATE = 50.0
"""Requests a second a closed-loop run of a dataset is assumed to send when the pool is made."""
PER_SECOND_MOST = 0.1
"""The most of the pool marked for one comparison a second's sake: a trace slower than 20 requests a second
gets fewer, rather than most of its inputs made references."""
MARGIN = 2.0
"""Marked over what the budget compares: the budget trims the excess, and an uneven run still finds one."""


def injects(settings: Settings, shape: Shape, pool_size: int) -> bool:
    """Whether the pool's inputs are not expected to recur within a run: a trace, or a dataset pool of more
    than RECURRING_MOST requests; of texts or pairs (chat conversations keep the first requests' references)."""
    if shape == "chat":
        return False
    if settings.trace is not None:
        return True
    return settings.dataset.startswith(("file:", "hf:")) and pool_size > RECURRING_MOST


def expected_rate(settings: Settings, schedule: Any) -> float:
    """Requests a second the run is expected to send: a trace's lines over its span (at --trace-speed), the
    open loop's rate (a sweep's lowest step), else ASSUMED_RATE."""
    seconds = getattr(schedule, "seconds", None)
    if seconds:
        span = (seconds[-1] - seconds[0]) / settings.trace_speed
        return len(seconds) / span if span > 0 else math.inf
    if settings.request_rate:
        return settings.request_rate
    if settings.sweep_rates:
        return min(settings.sweep_rates)
    return ASSUMED_RATE


def marked_share(settings: Settings, pairs: bool, inputs_per_request: float, rate: float) -> float:
    """The share of the pool's requests marked to carry a reference (the module's docstring says why)."""
    # a text's request carries one reference among its inputs; a pairs request is its reference whole
    per_request = 1.0 if pairs else MARGIN * max(1.0, inputs_per_request)
    by_rate = settings.consistency_rate * per_request
    per_second = min(PER_SECOND_MOST, MARGIN / rate) if rate > 0 else PER_SECOND_MOST
    return min(1.0, max(by_rate, per_second))


@dataclass(slots=True)
class Marks:
    """Which requests of a pool, built in order, are marked; each marked one's inputs kept for `carried`."""

    settings: Settings
    pairs: bool
    rate: float
    marked: list[tuple[int, Inputs]]
    _sum: float
    _requests: int = 0
    _inputs: int = 0

    @classmethod
    def of(cls, settings: Settings, endpoint: Endpoint, schedule: Any) -> Marks:
        offset = random.Random(f"consistency-inject:{settings.seed}").random()
        return cls(settings, endpoint.shape == "pairs", expected_rate(settings, schedule), [], offset)

    def see(self, index: int, inputs: Inputs, sequences: int) -> None:
        """The pool's request `index` is built from `inputs` (markable): mark it when the running sum of the share steps
        over a whole number. The share follows the mean inputs a request of the pool so far."""
        self._requests += 1
        self._inputs += sequences
        share = marked_share(self.settings, self.pairs, self._inputs / self._requests, self.rate)
        before, self._sum = self._sum, self._sum + share
        if math.floor(self._sum) > math.floor(before):
            self.marked.append((index, inputs))


def markable(inputs: Inputs, pairs: bool) -> bool:
    """A request of texts (or a query and documents) alone: no images, no conversation."""
    if inputs.images or inputs.messages or inputs.conversations or not inputs.texts:
        return False
    return bool(inputs.query) if pairs else True


def _spread(items: Sequence[Any], count: int) -> list[Any]:
    """`count` of `items` (sorted) at even quantiles: the middle of each of `count` equal slices."""
    if len(items) <= count:
        return list(items)
    return [items[(2 * j + 1) * len(items) // (2 * count)] for j in range(count)]


def chosen_texts(marked: list[tuple[int, Inputs]], lengths: dict[str, int], most: int) -> list[str]:
    """Up to `most` distinct texts of the marked requests whose token lengths cover theirs: every length
    while there are no more than `most`, else the lengths at even quantiles of the texts'; then more texts
    of those lengths, taken in turn, up to `most`."""
    by_length: dict[int, list[str]] = {}
    seen: set[str] = set()
    every: list[int] = []
    for _, inputs in marked:
        for text in inputs.texts:
            every.append(lengths[text])
            if text not in seen:
                seen.add(text)
                by_length.setdefault(lengths[text], []).append(text)
    wanted = sorted(set(_spread(sorted(every), most))) if len(by_length) > most else sorted(by_length)
    texts: list[str] = []
    depth = 0
    while len(texts) < most and any(depth < len(by_length[n]) for n in wanted):
        texts += [by_length[n][depth] for n in wanted if depth < len(by_length[n])][: most - len(texts)]
        depth += 1
    return texts


_Distance = Callable[[Any], Any]
"""A value's distance, as `_closest` asks it. The lambdas below bind their loop's values as defaults, which
mypy cannot type against a Callable: they are cast to it."""


def _closest(values: Sequence[Any], distance: _Distance, turn: int) -> int:
    """The index of the value nearest by `distance`; ties taken in turn (`turn`), so every reference of a
    length is used."""
    best = min(distance(v) for v in values)
    ties = [i for i, v in enumerate(values) if distance(v) == best]
    return ties[turn % len(ties)]


def carried_texts(
    marked: list[tuple[int, Inputs]], lengths: dict[str, int], texts: list[str]
) -> list[tuple[int, Inputs, int, int]]:
    """(pool index, the request's inputs with a reference in place, the reference's position in them, its
    id) of each marked request: the reference closest in length to one of its inputs, there."""
    carried = []
    ids = {text: i for i, text in enumerate(texts)}
    for turn, (index, inputs) in enumerate(marked):
        held = next((p for p, t in enumerate(inputs.texts) if t in ids), None)
        if held is not None:
            carried.append((index, inputs, held, ids[inputs.texts[held]]))
            continue
        own = [lengths[t] for t in inputs.texts]
        # the input whose length a reference matches best, then the reference: ties in turn
        position = _closest(own, lambda n: min(abs(n - lengths[t]) for t in texts), 0)
        replaced = own[position]
        ref_id = _closest(texts, cast(_Distance, lambda t, n=replaced: abs(lengths[t] - n)), turn)
        swapped = (*inputs.texts[:position], texts[ref_id], *inputs.texts[position + 1 :])
        carried.append((index, replace(inputs, texts=swapped), position, ref_id))
    return carried


def chosen_requests(sizes: list[tuple[int, int, int]], most: int) -> list[int]:
    """Up to `most` of the marked pairs requests, by (documents, tokens, their order among the marked),
    spread evenly over those sizes: the orders of the requests chosen as references."""
    return sorted(order for _, _, order in _spread(sorted(sizes), most))


def carried_pairs(sizes: list[tuple[int, int, int]], chosen: list[int]) -> list[int]:
    """The reference id each marked request (in order) carries: its own where it is one, else the reference
    of the closest number of documents, then the closest token count."""
    ids = {order: i for i, order in enumerate(chosen)}
    references = [sizes[order] for order in chosen]
    carried = []
    for documents, tokens, order in sizes:
        if order in ids:
            carried.append(ids[order])
        else:
            distance = cast(_Distance, lambda r, d=documents, t=tokens: (abs(r[0] - d), abs(r[1] - t)))
            carried.append(_closest(references, distance, order))
    return carried
