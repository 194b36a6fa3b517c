"""One text-table aligner (poolbench_locust/texttable.py) for every console table."""

from __future__ import annotations

from poolbench_locust.texttable import aligned


def test_names_left_numbers_right_and_no_trailing_spaces():
    rows = [["Name", "Requests", "Mark"], ["/v1/embeddings", "1,024", ""], ["Aggregated", "7", "!"]]
    assert aligned(rows) == [
        "Name            Requests  Mark",
        "/v1/embeddings     1,024",
        "Aggregated             7     !",
    ]


def test_every_column_left_when_asked():
    assert aligned([["Server", "Kind"], ["http://h:1", "vllm"]], right=False) == [
        "Server      Kind",
        "http://h:1  vllm",
    ]
    assert aligned([]) == []
