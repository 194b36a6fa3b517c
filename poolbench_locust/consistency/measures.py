"""How one observed answer compares with its reference answer: the same input, answered once as the
reference and once under load. A server that batches differently under load may still be right while its
floats change in their last bits, so "identical" alone would call it wrong; each figure below says by how
much an answer moved, in the terms its kind of answer is used in.

The figures of a `Comparison`, each None where it does not apply to the kind of answer:

- identical: every value equal as a number (0.0 equals -0.0, 1 equals 1.0; for sparse vectors and
  labels a missing index is 0). Whether the server gave the very same answer.
- cosine: the cosine similarity of the two vectors, what a search by embeddings ranks on: 1 is the same
  direction (a vector scaled by 2 too: cosine 1, not identical), 0 orthogonal, -1 opposite. Dense,
  int8 and uint8 (as numbers), sparse (over the union of indices) and token-level matrices (the smallest
  of the rows' cosines: one token's row gone wrong is enough to spoil a late-chunking answer).
- abs_diff: the largest absolute difference of one value (a vector component, a score, a probability),
  bounding how far any one number moved. Saturates at the largest float instead of overflowing.
- hamming: bits that differ, binary and ubinary (8 dimensions a byte): what a search on binary vectors
  ranks on.
- top1_changed: rerank, score, similarity: the best-scored document is another one (the first of equal
  scores is the best), i.e. a search with one result would have answered differently.
- kendall_tau: rerank, score, similarity: how much of the documents' order was kept, Kendall's tau-b
  (1 the same order, -1 reversed; tied scores count neither way), computed in O(n log n) with Knight's
  merge-sort algorithm: a rerank of 1,000 documents took 8 ms, where every pair took 570 ms. One
  document has no order: None. When every score of both answers is tied it is 1.0 (the order, none, was
  kept); when every score of only one is tied, 0.0 (no order in common: a server answering one constant
  score under load must not hide from the minimum).
- label_changed: classify: the most probable label is another one (the first of equal probabilities).

Decisions on the rare cases:

- A length mismatch (two vectors, rows, byte strings or score lists of different lengths) is not
  identical, and every other figure is None: there is no per-value pairing to measure. The engine fails an
  answer of the wrong dimension before it could be compared, so this is rare, and it still shows in the
  identical ratio.
- A zero vector: two zero vectors have cosine 1.0 (the same answer); one zero vector against another
  vector has cosine 0.0 (no direction in common), since servers have been seen answering all-zero
  vectors under load and a None would hide that from the minimum.
- A cosine is a float, computed with a few roundings: a 1 - cosine below about 1e-15 is rounding, not a
  measure (a float32 answer with one component a unit in the last place off has a cosine of 1.0 or of the
  float just below it); identical and abs_diff still tell such answers apart.
- Every value must be a finite number: a NaN, an infinity or a non-number raises ValueError (the engine
  fails answers holding them before they could be compared, so one here is a caller's mistake).

Pure Python (no numpy: it is not a dependency): fast enough for sampled answers, about 5 ms for a
4,096-dimension vector and 0.4 ms for its binary form (Python 3.11 on a busy 2-core machine).
"""

from __future__ import annotations

import math
import operator
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any

LARGEST = sys.float_info.max
"""Where abs_diff saturates: the difference of two finite values near the float range's ends overflows."""


@dataclass(frozen=True, slots=True)
class Comparison:
    """One observed answer against its reference (the module's docstring says what each figure means).
    Its values are checked when made, so a tally of comparisons never holds a NaN or an out-of-range value."""

    identical: bool
    cosine: float | None = None
    """Within [-1, 1]: dense, int8/uint8, sparse and token-level answers."""
    abs_diff: float | None = None
    """A finite number >= 0: every kind but binary and ubinary."""
    hamming: int | None = None
    """Bits, >= 0: binary and ubinary."""
    top1_changed: bool | None = None
    kendall_tau: float | None = None
    """Within [-1, 1]: two documents or more."""
    label_changed: bool | None = None

    def __post_init__(self) -> None:
        for name in ("cosine", "kendall_tau"):
            value = getattr(self, name)
            if value is not None and not -1.0 <= value <= 1.0:  # NaN fails too
                raise ValueError(f"{name} must be within [-1, 1], not {value!r}")
        if self.abs_diff is not None and not 0.0 <= self.abs_diff <= LARGEST:
            raise ValueError(f"abs_diff must be a finite number >= 0, not {self.abs_diff!r}")
        if self.hamming is not None and (type(self.hamming) is not int or self.hamming < 0):
            raise ValueError(f"hamming must be a whole number >= 0, not {self.hamming!r}")


def compare_vectors(ref: Sequence[float], got: Sequence[float]) -> Comparison:
    """Dense embeddings: identical, cosine and the largest absolute difference."""
    _finite(ref, "the reference")
    _finite(got, "the observed answer")
    if len(ref) != len(got):
        return Comparison(identical=False)
    if all(map(operator.eq, ref, got)):
        return Comparison(identical=True, cosine=1.0, abs_diff=0.0)  # exactly 1.0: no rounding of a sum
    return Comparison(identical=False, cosine=_cosine(ref, got), abs_diff=_largest_difference(ref, got))


def compare_packed(ref: Sequence[int], got: Sequence[int], bits: bool) -> Comparison:
    """Packed embeddings, both of one --embedding-type. int8 and uint8 (`bits` False) are numbers: as
    compare_vectors. binary and ubinary (`bits` True) are bytes of 8 dimensions each: the Hamming
    distance over them, cosine None.

    The bytes are the values' low 8 bits: a ubinary value is its byte, a binary value is its byte less 128
    (wire.PACKED_RANGES, offset binary), and since adding 128 flips only the top bit of both bytes, the
    bits that differ are those of the values' low bytes either way. Whole numbers written as floats
    (Infinity's `-14.0`) are taken as their integers."""
    if not bits:
        return compare_vectors(ref, got)
    ref_bytes, got_bytes = _low_bytes(ref, "the reference"), _low_bytes(got, "the observed answer")
    if len(ref_bytes) != len(got_bytes):
        return Comparison(identical=False)
    # One XOR of the two byte strings as big integers: C speed, however long the vector.
    hamming = (int.from_bytes(ref_bytes, "big") ^ int.from_bytes(got_bytes, "big")).bit_count()
    return Comparison(identical=hamming == 0, hamming=hamming)


def compare_sparse(ref: Mapping[Any, float], got: Mapping[Any, float]) -> Comparison:
    """Sparse embeddings, index -> value: cosine and the largest difference over the union of the
    indices, a missing index being 0 (an explicit 0 and a missing index are the same vector: identical)."""
    indices = list(ref.keys() | got.keys())
    return compare_vectors([ref.get(i, 0.0) for i in indices], [got.get(i, 0.0) for i in indices])


def compare_rows(ref_rows: Sequence[Sequence[float]], got_rows: Sequence[Sequence[float]]) -> Comparison:
    """Token-level answers, one row per token: identical if every row is; the cosine the smallest of the
    rows' and abs_diff the largest. A different number of rows (or a row of another length): not
    identical, cosine and abs_diff None."""
    if len(ref_rows) != len(got_rows):
        return Comparison(identical=False)
    rows = [compare_vectors(r, g) for r, g in zip(ref_rows, got_rows, strict=True)]
    cosines = [c.cosine for c in rows if c.cosine is not None]
    diffs = [c.abs_diff for c in rows if c.abs_diff is not None]
    whole = bool(rows) and len(cosines) == len(rows)  # no row of another length
    return Comparison(
        identical=all(c.identical for c in rows),
        cosine=min(cosines) if whole else None,
        abs_diff=max(diffs) if whole else None,
    )


def compare_scores(ref: Sequence[float], got: Sequence[float]) -> Comparison:
    """Rerank, score and similarity answers: one score per document, by the document's position in the
    request (answers sorted by score are put back in request order before they come here). abs_diff,
    top1_changed and kendall_tau (tau-b, O(n log n)); cosine None."""
    _finite(ref, "the reference")
    _finite(got, "the observed answer")
    if len(ref) != len(got):
        return Comparison(identical=False)
    if not ref:
        return Comparison(identical=True)
    return Comparison(
        identical=all(map(operator.eq, ref, got)),
        abs_diff=_largest_difference(ref, got),
        top1_changed=_first_best(range(len(ref)), ref.__getitem__) != _first_best(range(len(got)), got.__getitem__),
        kendall_tau=kendall_tau_b(ref, got) if len(ref) > 1 else None,
    )


Probabilities = Mapping[Any, float] | Sequence[float]
"""A classify answer: label -> probability, or the probabilities by class index."""


def compare_labels(ref: Probabilities, got: Probabilities) -> Comparison:
    """Classify answers: each a mapping label -> probability, or a sequence of probabilities by class
    index (both of one form). label_changed (the most probable label, the first of equal ones) and the
    largest probability difference over the union of the labels, a missing label being 0."""
    if isinstance(ref, Mapping) != isinstance(got, Mapping):
        raise ValueError("the reference and the observed answer must both be mappings or both be sequences")
    ref_map = dict(ref) if isinstance(ref, Mapping) else dict(enumerate(ref))
    got_map = dict(got) if isinstance(got, Mapping) else dict(enumerate(got))
    _finite(ref_map.values(), "the reference")
    _finite(got_map.values(), "the observed answer")
    labels = list(ref_map.keys() | got_map.keys())
    ref_values, got_values = [ref_map.get(k, 0.0) for k in labels], [got_map.get(k, 0.0) for k in labels]
    changed = None
    if ref_map and got_map:
        changed = _first_best(ref_map, ref_map.__getitem__) != _first_best(got_map, got_map.__getitem__)
    return Comparison(
        identical=all(map(operator.eq, ref_values, got_values)),
        abs_diff=_largest_difference(ref_values, got_values) if labels else None,
        label_changed=changed,
    )


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b of two equally long score lists (at least two), in O(n log n) (Knight 1966, as
    scipy computes it): sort the pairs by x then y, count the x ties, the joint ties, then the pairs the
    y order swaps (a merge sort's inversions) and the y ties. (C - D) / sqrt((n0 - ties_x)(n0 - ties_y));
    see the module's docstring for the all-tied cases."""
    pairs = sorted(zip(x, y, strict=True))
    n0 = len(pairs) * (len(pairs) - 1) // 2
    ties_x = _tied_pairs(p[0] for p in pairs)
    ties_xy = _tied_pairs(pairs)
    ys = [p[1] for p in pairs]
    swaps = _sort_counting_inversions(ys)  # ys sorted in place
    ties_y = _tied_pairs(ys)
    if ties_x == n0 or ties_y == n0:  # one answer (or both) with every score tied: no order
        return 1.0 if ties_x == ties_y else 0.0
    agreement = n0 - ties_x - ties_y + ties_xy - 2 * swaps  # concordant less discordant pairs
    return max(-1.0, min(1.0, agreement / math.sqrt((n0 - ties_x) * (n0 - ties_y))))


def _tied_pairs(ordered: Iterable[Any]) -> int:
    """The pairs of equal values in a sorted sequence: t(t - 1)/2 for each run of t."""
    total = 0
    for _, run in groupby(ordered):
        t = sum(1 for _ in run)
        total += t * (t - 1) // 2
    return total


def _sort_counting_inversions(values: list[float]) -> int:
    """Sorts `values` in place (a bottom-up merge sort) and gives the pairs i < j with values[i] > values[j]
    (strictly: equal values are a tie, not a swap)."""
    n, width, swaps = len(values), 1, 0
    source, target = values, [0.0] * len(values)
    while width < n:
        for low in range(0, n, 2 * width):
            middle, high = min(low + width, n), min(low + 2 * width, n)
            i, j, k = low, middle, low
            while i < middle and j < high:
                if source[j] < source[i]:  # every value left of the middle from i on is greater
                    target[k] = source[j]
                    swaps += middle - i
                    j += 1
                else:
                    target[k] = source[i]
                    i += 1
                k += 1
            target[k : k + middle - i] = source[i:middle]
            k += middle - i
            target[k : k + high - j] = source[j:high]
        source, target = target, source
        width *= 2
    if source is not values:
        values[:] = source
    return swaps


def _first_best(keys: Iterable[Any], score: Any) -> Any:
    """The key of the highest score, the first of equal ones (max keeps the first it met)."""
    return max(keys, key=score)


def _finite(values: Iterable[Any], whose: str) -> None:
    try:
        if all(map(math.isfinite, values)):
            return
    except (TypeError, OverflowError):  # a non-number; an integer too large for a float
        raise ValueError(f"{whose} holds a value that is not a number of the float range") from None
    raise ValueError(f"{whose} holds a NaN or infinite value")


def _cosine(ref: Sequence[float], got: Sequence[float]) -> float:
    """The cosine of two finite vectors of one length, each scaled first by its largest magnitude so that
    no product or square overflows or underflows; the sums are math.fsum's, correctly rounded."""
    ref_scale, got_scale = max(map(abs, ref), default=0), max(map(abs, got), default=0)
    if not ref_scale or not got_scale:
        return 1.0 if ref_scale == got_scale else 0.0  # both zero: the same answer; one zero: nothing shared
    r = [v / ref_scale for v in ref]
    g = [v / got_scale for v in got]
    dot = math.fsum(map(operator.mul, r, g))
    norms = math.sqrt(math.fsum(v * v for v in r)) * math.sqrt(math.fsum(v * v for v in g))
    return max(-1.0, min(1.0, dot / norms))  # rounding can step a hair past +-1


def _largest_difference(ref: Sequence[float], got: Sequence[float]) -> float:
    return min(float(max(abs(a - b) for a, b in zip(ref, got, strict=True))), LARGEST)


def _low_bytes(values: Sequence[Any], whose: str) -> bytes:
    """Packed values (-128..255, whole numbers) as their low bytes."""
    try:
        ints = [int(v) if isinstance(v, float) and v.is_integer() else operator.index(v) for v in values]
    except TypeError:  # a fraction, a NaN, an infinity, a non-number
        raise ValueError(f"{whose} holds a packed value that is not a whole number") from None
    if ints and not -128 <= min(ints) <= max(ints) <= 255:
        raise ValueError(f"{whose} holds a packed value outside -128..255")
    return bytes(v & 0xFF for v in ints)
