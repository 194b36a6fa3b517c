"""A SpooledList behaves as a list of its records, holds them on disk not in memory, and its file stays
within about twice what it keeps however many records were replaced (poolbench_locust/spool.py)."""

from __future__ import annotations

import tracemalloc

import pytest

from poolbench_locust.spool import COMPACT_ABOVE, SpooledList


@pytest.mark.parametrize("capacity", [0, 20, 100])
def test_it_reads_as_the_list_it_was_given(capacity):
    kept, mirror = SpooledList(capacity), []
    for i in range(50):
        record = None if i % 7 == 3 else {"i": i, "timings": {i: i * 2, 300 + i: 1}, "rows": [1.5, None, "x"]}
        kept.append(record)
        mirror.append(record)
    for i in (40, 10, 0):
        del kept[i]
        del mirror[i]
    kept[5], mirror[5] = {"merged": True}, {"merged": True}
    kept[6], mirror[6] = None, None
    assert len(kept) == len(mirror) and [kept[i] for i in range(len(kept))] == mirror
    assert kept[-1] == mirror[-1]
    assert isinstance(next(iter(kept[1]["timings"])), int), "int keys come back as ints"
    with pytest.raises(IndexError):
        kept[len(mirror)]
    with pytest.raises(IndexError):
        kept[-len(mirror) - 1]
    kept.clear()
    assert len(kept) == 0 and kept.disk_bytes() == 0 and kept._file is None
    with pytest.raises(IndexError):
        kept[0]
    kept.append("again")
    assert len(kept) == 1 and kept[0] == "again"


def test_with_a_capacity_the_places_are_made_once():
    """Filled up to its capacity, appended to and deleted from, the list never remakes its index."""
    kept = SpooledList(101)
    where = (kept._offsets.buffer_info(), kept._sizes.buffer_info())
    for i in range(101):
        kept.append(i)
    for i in range(500):  # as Tiers keeps it: one more, then two merge into one
        del kept[(i * 37) % 100 + 1]
        kept.append(101 + i)
    assert len(kept) == 101 and (kept._offsets.buffer_info(), kept._sizes.buffer_info()) == where
    assert kept[0] == 0 and kept[-1] == 600


def test_a_list_of_only_none_opens_no_file():
    kept = SpooledList()
    for _ in range(10):
        kept.append(None)
    assert kept._file is None and kept[3] is None


def test_records_are_on_disk_not_in_memory():
    kept = SpooledList()

    def record(i: int) -> dict:  # a sample of the pooling table: a few kB pickled, more as objects
        return {"time": float(i), "rows": [{f"column {c}": float(c + i) for c in range(60)}]}

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(3600):
            kept.append(record(i))  # a list would hold each record: some 10 MB
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept.disk_bytes() > 3600 * 1000
    assert held < 3600 * 64, f"{held} bytes held for 3600 records: more than their places"
    assert kept[1234] == record(1234)


def test_the_file_is_rewritten_when_dead_records_outweigh_live_ones():
    kept = SpooledList()
    payload = "y" * 1000
    for i in range(100):
        kept.append((i, payload))
    for round_ in range(50):  # 5,000 replacements: 5 MB written, 100 kB live
        for i in range(100):
            kept[i] = (i, round_, payload)
        assert kept.disk_bytes() <= 2 * kept._live + COMPACT_ABOVE + 2000
    assert [kept[i] for i in range(100)] == [(i, 49, payload) for i in range(100)]
    while len(kept) > 1:
        del kept[0]
    assert kept[0] == (99, 49, payload)
