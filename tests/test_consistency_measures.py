"""consistency/: one answer against its reference (known cosines, Hamming distances, Kendall's tau, label
changes) and the tally of many: merges equal to one tally of everything, the cosines' 1st percentile
within its stated error, and a shipped tally refused on anything garbled. Starts no process."""

from __future__ import annotations

import itertools
import json
import math
import sys
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poolbench_locust.consistency.measures import (
    Comparison,
    compare_labels,
    compare_packed,
    compare_rows,
    compare_scores,
    compare_sparse,
    compare_vectors,
    kendall_tau_b,
)
from poolbench_locust.consistency.tally import (
    LOWEST_DISTANCE,
    MAX_BUCKETS,
    MAX_KEY,
    RELATIVE_ERROR,
    Tally,
    distance_key,
)
from tests.support.percentiles import nearest_rank

ROUNDING = 4 * sys.float_info.epsilon
"""What float arithmetic adds to a reported cosine beyond the histogram's own error."""


# One answer against its reference


def test_an_identical_vector_is_identical_with_cosine_exactly_one():
    c = compare_vectors([0.1, -0.2, 0.3], [0.1, -0.2, 0.3])
    assert c == Comparison(identical=True, cosine=1.0, abs_diff=0.0)


@pytest.mark.parametrize(
    ("ref", "got", "cosine", "abs_diff"),
    [
        ([1.0, 0.0], [0.0, 1.0], 0.0, 1.0),  # orthogonal
        ([1.0, 2.0, 3.0], [-1.0, -2.0, -3.0], -1.0, 6.0),  # opposite
        ([1.0, 2.0, 3.0], [2.0, 4.0, 6.0], 1.0, 3.0),  # scaled: the same direction, not the same answer
        ([1.0, 0.0], [1.0, 1.0], 1 / math.sqrt(2), 1.0),  # 45 degrees
        ([1e308, 1e308], [1e308, -1e308], 0.0, sys.float_info.max),  # no overflow; the difference saturates
        ([1e-310, 0.0], [0.0, 1e-310], 0.0, 1e-310),  # subnormals: no underflow to a zero vector
    ],
    ids=["orthogonal", "opposite", "scaled", "45-degrees", "huge", "subnormal"],
)
def test_known_vectors_have_their_known_cosine(ref, got, cosine, abs_diff):
    c = compare_vectors(ref, got)
    assert c.identical is False
    assert c.cosine == pytest.approx(cosine, abs=1e-15)
    assert c.abs_diff == pytest.approx(abs_diff)
    assert c.hamming is c.top1_changed is c.kendall_tau is c.label_changed is None


def test_a_change_in_the_last_float32_bits_is_not_identical_and_shows_in_abs_diff():
    ref = [0.5, 0.25, -0.125]
    got = [0.5, 0.25 + 2**-25, -0.125]
    c = compare_vectors(ref, got)
    assert c.identical is False and c.abs_diff == 2**-25
    assert 1 - 1e-12 < c.cosine <= 1.0


def test_zero_vectors_compare_as_the_same_answer_or_as_nothing_shared():
    assert compare_vectors([0.0, 0.0], [0.0, -0.0]) == Comparison(identical=True, cosine=1.0, abs_diff=0.0)
    spoiled = compare_vectors([0.6, 0.8], [0.0, 0.0])  # the all-zero answer seen under load: cosine 0, not None
    assert spoiled.identical is False and spoiled.cosine == 0.0 and spoiled.abs_diff == 0.8


def test_vectors_of_other_lengths_are_not_identical_and_have_no_cosine():
    assert compare_vectors([1.0, 2.0], [1.0, 2.0, 3.0]) == Comparison(identical=False)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "0.5", None, 10**400])
def test_a_value_that_is_not_a_finite_number_is_refused(bad):
    with pytest.raises(ValueError, match="observed answer"):
        compare_vectors([1.0, 2.0], [1.0, bad])
    with pytest.raises(ValueError, match="reference"):
        compare_scores([bad, 1.0], [1.0, 2.0])


def test_int8_and_uint8_compare_as_numbers():
    c = compare_packed([1, -1, 0], [-1, 1, 0], bits=False)
    assert c.identical is False and c.cosine == pytest.approx(-1.0) and c.abs_diff == 2 and c.hamming is None
    assert compare_packed([3, 200], [3.0, 200.0], bits=False).identical is True  # Infinity's whole floats


def test_hamming_counts_the_bits_that_differ():
    # 0b10110000 vs 0b00110001: the top and bottom bits; 255 vs 0: all eight.
    c = compare_packed([0b10110000, 255, 7], [0b00110001, 0, 7], bits=True)
    assert c == Comparison(identical=False, hamming=10)
    assert compare_packed([-128], [127], bits=True).hamming == 8  # binary: the bytes 0 and 255
    assert compare_packed([-14.0, 3], [-14, 3], bits=True) == Comparison(identical=True, hamming=0)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_binary_and_ubinary_of_the_same_bytes_have_the_same_hamming_distance(data):
    """binary is ubinary less 128 (wire.PACKED_RANGES): the same bytes sent either way differ in the same bits."""
    ref = data.draw(st.lists(st.integers(0, 255), min_size=1, max_size=64))
    got = data.draw(st.lists(st.integers(0, 255), min_size=len(ref), max_size=len(ref)))
    expected = sum(bin(a ^ b).count("1") for a, b in zip(ref, got, strict=True))
    ubinary = compare_packed(ref, got, bits=True)
    binary = compare_packed([v - 128 for v in ref], [v - 128 for v in got], bits=True)
    assert ubinary.hamming == binary.hamming == expected
    assert ubinary.identical is binary.identical is (ref == got)


@pytest.mark.parametrize("bad", [256, -129, 1.5, math.nan, "1"])
def test_a_packed_value_that_is_no_byte_is_refused(bad):
    with pytest.raises(ValueError, match="packed value"):
        compare_packed([1, 2], [1, bad], bits=True)


def test_packed_bytes_of_other_lengths_have_no_hamming_distance():
    assert compare_packed([1, 2], [1], bits=True) == Comparison(identical=False)


def test_sparse_vectors_compare_over_the_union_of_their_indices():
    assert compare_sparse({1: 1.0, 5: 2.0}, {5: 2.0, 1: 1.0, 9: 0.0}).identical is True  # an explicit 0 is missing
    disjoint = compare_sparse({1: 1.0}, {2: 1.0})
    assert disjoint.identical is False and disjoint.cosine == 0.0 and disjoint.abs_diff == 1.0
    dropped = compare_sparse({1: 3.0, 2: 4.0}, {1: 3.0})  # one index lost: cos = 3*3 / (5*3)
    assert dropped.cosine == pytest.approx(0.6) and dropped.abs_diff == 4.0


def test_token_rows_take_the_worst_row():
    rows = [[1.0, 0.0], [0.0, 1.0]]
    assert compare_rows(rows, [list(r) for r in rows]) == Comparison(identical=True, cosine=1.0, abs_diff=0.0)
    one_row_moved = compare_rows(rows, [[1.0, 0.0], [1.0, 1.0]])
    assert one_row_moved.identical is False
    assert one_row_moved.cosine == pytest.approx(1 / math.sqrt(2)) and one_row_moved.abs_diff == 1.0


@pytest.mark.parametrize(
    "got", [[[1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]], [[1.0, 0.0], [0.0]]], ids=["short", "long", "ragged"]
)
def test_token_rows_of_another_shape_are_not_identical_and_have_no_cosine(got):
    assert compare_rows([[1.0, 0.0], [0.0, 1.0]], got) == Comparison(identical=False)


def test_scores_in_the_same_order_keep_tau_one_and_the_top_document():
    c = compare_scores([0.9, 0.1, 0.5], [0.9, 0.1, 0.5])
    assert c == Comparison(identical=True, abs_diff=0.0, top1_changed=False, kendall_tau=1.0)


def test_reversed_scores_have_tau_minus_one_and_another_top_document():
    c = compare_scores([1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0])
    assert c.kendall_tau == -1.0 and c.top1_changed is True and c.abs_diff == 3.0 and c.cosine is None


@pytest.mark.parametrize("n", [2, 3, 5, 10, 40])
def test_one_swap_of_two_neighbours_costs_four_over_n_n_minus_one(n):
    ref = [float(n - i) for i in range(n)]
    got = list(ref)
    got[-2], got[-1] = got[-1], got[-2]  # the last two
    c = compare_scores(ref, got)
    assert c.kendall_tau == pytest.approx(1 - 4 / (n * (n - 1)))
    assert c.top1_changed is (n == 2)  # only in two documents is the last pair the top one


def test_one_document_has_no_order_and_ties_keep_the_first_as_best():
    alone = compare_scores([0.3], [0.4])
    assert alone.kendall_tau is None and alone.top1_changed is False and alone.abs_diff == pytest.approx(0.1)
    assert compare_scores([0.5, 0.5, 0.1], [0.5, 0.6, 0.1]).top1_changed is True  # the first of the tied was best


def test_a_server_answering_one_constant_score_has_tau_zero():
    assert compare_scores([0.1, 0.2, 0.3], [0.5, 0.5, 0.5]).kendall_tau == 0.0
    assert compare_scores([0.5, 0.5, 0.5], [0.5, 0.5, 0.5]).kendall_tau == 1.0  # no order, and none lost


def brute_tau_b(x: list[float], y: list[float]) -> float:
    """Kendall's tau-b by its definition, every pair once, for the O(n log n) one to agree with."""
    concordant = discordant = ties_x = ties_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = x[i] - x[j], y[i] - y[j]
        ties_x += dx == 0
        ties_y += dy == 0
        concordant += dx * dy > 0
        discordant += dx * dy < 0
    n0 = len(x) * (len(x) - 1) // 2
    if ties_x == n0 or ties_y == n0:
        return 1.0 if ties_x == ties_y else 0.0
    return (concordant - discordant) / math.sqrt((n0 - ties_x) * (n0 - ties_y))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_kendall_tau_b_agrees_with_its_definition(data):
    """Scores drawn from a few values, so that ties in one answer, the other and both are common."""
    n = data.draw(st.integers(2, 30))
    x = data.draw(st.lists(st.integers(0, 5).map(float), min_size=n, max_size=n))
    y = data.draw(st.lists(st.integers(0, 5).map(float), min_size=n, max_size=n))
    assert kendall_tau_b(x, y) == pytest.approx(brute_tau_b(x, y), abs=1e-12)


def test_scores_of_other_lengths_are_not_identical_and_have_no_tau():
    assert compare_scores([0.1, 0.2], [0.1, 0.2, 0.3]) == Comparison(identical=False)


def test_a_label_change_is_the_most_probable_label_changing():
    flipped = compare_labels({"positive": 0.9, "negative": 0.1}, {"positive": 0.4, "negative": 0.6})
    assert flipped.label_changed is True and flipped.abs_diff == pytest.approx(0.5) and flipped.identical is False
    kept = compare_labels([0.2, 0.8], [0.3, 0.7])  # probabilities by class index
    assert kept.label_changed is False and kept.abs_diff == pytest.approx(0.1)
    assert compare_labels([0.5, 0.5], [0.5, 0.5]) == Comparison(identical=True, abs_diff=0.0, label_changed=False)
    gone = compare_labels({"a": 0.7, "b": 0.3}, {"b": 0.3})  # a label missing counts as probability 0
    assert gone.label_changed is True and gone.abs_diff == pytest.approx(0.7)


def test_labels_as_a_mapping_against_a_sequence_are_refused():
    with pytest.raises(ValueError, match="both be mappings"):
        compare_labels({"a": 1.0}, [1.0])


@pytest.mark.parametrize(
    "fields",
    [
        {"cosine": math.nan},
        {"cosine": 1.5},
        {"kendall_tau": -1.01},
        {"abs_diff": -0.1},
        {"abs_diff": math.inf},
        {"hamming": -1},
        {"hamming": 1.0},
    ],
)
def test_a_comparison_out_of_range_cannot_be_made(fields):
    """So that no tally ever holds a NaN or an impossible figure."""
    with pytest.raises(ValueError):
        Comparison(identical=False, **fields)


# The tally of many


def known_tally() -> Tally:
    tally = Tally()
    tally.add(compare_vectors([1.0, 2.0], [1.0, 2.0]))
    tally.add(compare_vectors([1.0, 0.0], [0.0, 1.0]))
    tally.add(compare_scores([1.0, 2.0, 3.0], [3.0, 2.0, 1.0]))
    tally.add(compare_scores([3.0, 2.0, 1.0], [3.0, 2.0, 1.0]))
    tally.add(compare_labels([0.9, 0.1], [0.1, 0.9]))
    tally.add(compare_packed([0, 255], [1, 255], bits=True))
    return tally


def test_the_figures_of_a_known_tally():
    assert known_tally().figures() == {
        "compared": 6,
        "identical_ratio": 2 / 6,
        "cosine_min": 0.0,
        "cosine_p01": 0.0,
        "abs_diff_max": 2.0,
        "top1_changed_ratio": 1 / 2,
        "kendall_tau_min": -1.0,
        "labels_changed_ratio": 1.0,
        "hamming_max": 1,
    }


def test_a_figure_is_present_only_where_it_applies():
    assert Tally().figures() == {"compared": 0}
    vectors = Tally()
    vectors.add(compare_vectors([1.0, 2.0], [1.0, 2.5]))
    assert set(vectors.figures()) == {"compared", "identical_ratio", "cosine_min", "cosine_p01", "abs_diff_max"}
    labels = Tally()
    labels.add(compare_labels([0.4, 0.6], [0.4, 0.6]))
    assert set(labels.figures()) == {"compared", "identical_ratio", "abs_diff_max", "labels_changed_ratio"}


cosines = st.one_of(
    st.floats(-1.0, 1.0),
    st.floats(0.0, 1e-3).map(lambda d: 1.0 - d),  # where answers that stay right crowd
    st.floats(0.0, 1e-12).map(lambda d: 1.0 - d),
    st.just(1.0),
)
comparisons = st.builds(
    Comparison,
    identical=st.booleans(),
    cosine=st.none() | cosines,
    abs_diff=st.none() | st.floats(0.0, 1e6),
    hamming=st.none() | st.integers(0, 4096),
    top1_changed=st.none() | st.booleans(),
    kendall_tau=st.none() | st.floats(-1.0, 1.0),
    label_changed=st.none() | st.booleans(),
)


def shipped(tally: Tally, packer: str) -> Tally:
    """A tally as the master gets it: through msgpack (Locust's reports) or JSON, then from_wire."""
    if packer == "json":
        return Tally.from_wire(json.loads(json.dumps(tally.to_wire(), allow_nan=False)))
    return Tally.from_wire(msgpack.unpackb(msgpack.packb(tally.to_wire(), use_bin_type=True), raw=False))


@settings(max_examples=200, deadline=None)
@given(st.lists(comparisons, max_size=60), st.data(), st.sampled_from(["msgpack", "json"]))
def test_merged_tallies_in_any_split_equal_one_tally_of_everything(items, data, packer):
    whole = Tally()
    for c in items:
        whole.add(c)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(items)), max_size=4)))
    master = Tally()
    for low, high in itertools.pairwise([0, *cuts, len(items)]):
        worker = Tally()
        for c in items[low:high]:
            worker.add(c)
        master.merge(shipped(worker, packer))
    assert master.figures() == whole.figures()
    assert master.to_wire() == whole.to_wire()


@settings(max_examples=300, deadline=None)
@given(st.lists(cosines, min_size=1, max_size=400), st.floats(0.001, 1.0))
def test_the_cosine_percentile_is_within_its_stated_error(values, fraction):
    """|reported - true| <= (1 - true) * RELATIVE_ERROR: the error is on the distance 1 - cosine."""
    tally = Tally()
    for v in values:
        tally.add(Comparison(identical=False, cosine=v))
    for p in (0.01, fraction):
        true = nearest_rank(values, p)
        reported = tally.cosine_percentile(p)
        assert abs(reported - true) <= (1.0 - true) * RELATIVE_ERROR + ROUNDING, (p, true, reported)
        assert reported >= min(values)
    assert tally.figures()["cosine_p01"] == tally.cosine_percentile(0.01)


def test_close_cosines_are_told_apart_and_exactly_one_is_kept_exact():
    assert distance_key(1 - 0.9999) != distance_key(1 - 0.999)
    assert distance_key(1e-12) != distance_key(1e-11)
    assert distance_key(0.0) == 0 < distance_key(1.0 - math.nextafter(1.0, 0.0)) == distance_key(LOWEST_DISTANCE)
    ones = Tally()
    for _ in range(200):
        ones.add(Comparison(identical=False, cosine=1.0))
    assert ones.figures()["cosine_p01"] == 1.0


def test_the_histogram_is_bounded_whatever_it_is_fed():
    tally = Tally()
    steps = [i / 5000 for i in range(-5000, 5001)]
    near_one = [1.0 - 2.0**-e for e in range(1, 54)]
    for v in [*steps, *near_one, 1.0, -1.0, math.nextafter(-1.0, 0.0), math.nextafter(1.0, 0.0)]:
        tally.add(Comparison(identical=False, cosine=v))
    assert 0 < len(tally.cosine_buckets) <= MAX_BUCKETS
    assert min(tally.cosine_buckets) == 0 and max(tally.cosine_buckets) == MAX_KEY == distance_key(2.0)


# A shipped tally, untrusted


def garbled(change: dict[str, Any]) -> dict[str, Any]:
    wire = known_tally().to_wire()
    wire.update(change)
    return {k: v for k, v in wire.items() if v != "DROP"}


@pytest.mark.parametrize(
    "data",
    [
        [],
        "tally",
        garbled({"compared": "DROP"}),
        garbled({"extra": 1}),
        garbled({"compared": "6"}),
        garbled({"compared": 6.0}),
        garbled({"identical": True}),
        garbled({"top1_changed": -1}),
        garbled({"compared": 2**64}),
        garbled({"identical": 7}),
        garbled({"labels_compared": 7, "labels_changed": 0}),
        garbled({"cosine_min": math.nan}),
        garbled({"cosine_min": "0.5"}),
        garbled({"cosine_min": 1.5}),
        garbled({"kendall_tau_min": -math.inf}),
        garbled({"abs_diff_max": math.inf}),
        garbled({"abs_diff_max": -1.0}),
        garbled({"hamming_max": 1.5}),
        garbled({"cosine_keys": "1,2"}),
        garbled({"cosine_keys": [1], "cosine_counts": [1, 1]}),
        garbled({"cosine_keys": [1] * (MAX_BUCKETS + 1), "cosine_counts": [1] * (MAX_BUCKETS + 1)}),
        garbled({"cosine_keys": [MAX_KEY + 1], "cosine_counts": [1]}),
        garbled({"cosine_keys": [5, 0], "cosine_counts": [1, 1]}),
        garbled({"cosine_keys": [5, -1], "cosine_counts": [1, 1]}),
        garbled({"cosine_counts": [0, 1]}),
        garbled({"cosine_counts": [1, math.nan]}),
        garbled({"cosine_counts": [100, 1]}),
        garbled({"cosine_min": None}),
        garbled({"cosine_min": 0.5}),
        garbled({"cosine_keys": [], "cosine_counts": []}),
        garbled({k: 0 for k in ("compared", "identical", "top1_compared", "top1_changed")}),
    ],
    ids=lambda d: json.dumps(d)[:60] if not isinstance(d, dict) else None,
)
def test_a_garbled_shipped_tally_is_refused_with_a_value_error(data):
    with pytest.raises(ValueError):
        Tally.from_wire(data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(known_tally().to_wire())), json_values)
def test_any_one_value_garbled_is_refused_or_gives_a_tally_that_ships_again(key, value):
    """Whatever one field holds, from_wire raises ValueError or gives a tally as good as one made by add."""
    data = known_tally().to_wire()
    data[key] = value
    try:
        tally = Tally.from_wire(data)
    except ValueError:
        return
    assert Tally.from_wire(tally.to_wire()).figures() == tally.figures()
