"""Each answer that carries a reference input, compared with its reference as its request event arrives
(docs/consistency.md): the comparison a kind of answer takes, tallied per request name."""

from __future__ import annotations

import logging
from typing import Any

from locust.env import Environment

from poolbench_locust.consistency.measures import compare_scores, compare_vectors
from poolbench_locust.consistency.state import Consistency

logger = logging.getLogger("poolbench_locust")


def on_request(environment: Environment, state: Consistency, ship: bool) -> Any:
    def compare(name: str = "", exception: Any = None, context: Any = None, **_: Any) -> None:
        if exception is not None or not context or (answers := context.get("answers")) is None:
            return
        references = state.references.get(name)
        if references is None:
            return
        scores = state.kinds.get(name) == "scores"
        for ref_id, values in answers:
            if (reference := references.get(ref_id)) is None:
                continue
            try:
                comparison = compare_scores(reference, values) if scores else compare_vectors(reference, values)
            except ValueError as e:
                state.skipped += 1
                if state.skipped == 1:
                    logger.warning("consistency: an answer of %s could not be compared: %s", name, e)
                continue
            state.add(name, comparison, ship)

    return compare
