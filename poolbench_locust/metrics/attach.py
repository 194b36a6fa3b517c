"""One object of a kind per Locust environment, made on first use: the pooling stats, their history,
the JSON result's blocks. An attribute of the environment, because a test or a master may hold
several environments in one process, and each must count alone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def attached(environment: Any, attribute: str, make: Callable[[], T]) -> T:
    found = getattr(environment, attribute, None)
    if found is None:
        found = make()
        setattr(environment, attribute, found)
    return found
