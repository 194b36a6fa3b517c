"""Each answer that carries a reference input, compared with its reference as its request event arrives
(docs/consistency.md): the measure is the one of the values' kind (engine/answer_values.py), tallied per
request name."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from locust.env import Environment

from poolbench_locust.consistency.measures import (
    Comparison,
    compare_labels,
    compare_packed,
    compare_rows,
    compare_scores,
    compare_sparse,
    compare_vectors,
)
from poolbench_locust.consistency.state import Consistency

logger = logging.getLogger("poolbench_locust")

MEASURES: Mapping[str, Callable[[Any, Any], Comparison]] = {
    "vectors": compare_vectors,
    "packed_bits": lambda ref, got: compare_packed(ref, got, bits=True),
    "sparse": compare_sparse,
    "rows": compare_rows,
    "scores": compare_scores,
    "labels": compare_labels,
}
"""The measure of each kind of values (consistency/measures.py says each figure)."""


def compare_values(kind: str, reference: Any, got: Any) -> Comparison:
    """`got` against `reference`, both values of `kind`; ValueError when they cannot be compared (an unknown
    kind, a value the measures refuse: a non-number, a NaN, mismatched forms)."""
    measure = MEASURES.get(kind)
    if measure is None:
        raise ValueError(f"values of an unknown kind {kind!r}")
    try:
        return measure(reference, got)
    except (TypeError, AttributeError, KeyError) as e:  # a value of another shape than its kind says
        raise ValueError(f"{kind} values of an unexpected shape: {type(e).__name__}") from None


def on_request(environment: Environment, state: Consistency, ship: bool) -> Any:
    def skip(name: str, why: object) -> None:
        state.skipped += 1
        if state.skipped == 1:
            logger.warning("consistency: an answer of %s could not be compared: %s", name, why)

    def compare(name: str = "", exception: Any = None, context: Any = None, **_: Any) -> None:
        if exception is not None or not context or (answers := context.get("answers")) is None:
            if context and (why := context.get("answers_unread")) is not None and name in state.references:
                skip(name, why)
            return
        references = state.references.get(name)
        if references is None:
            return
        kind = state.kinds.get(name, "vectors")
        for ref_id, values in answers:
            if (reference := references.get(ref_id)) is None:
                continue
            got_kind, got = (values.kind, values.data) if hasattr(values, "kind") else (kind, values)
            try:
                if got_kind != kind:
                    raise ValueError(f"its values are {got_kind}, its reference's {kind}")
                comparison = compare_values(kind, reference, got)
            except ValueError as e:
                skip(name, e)
                continue
            state.add(name, comparison, ship)

    return compare
