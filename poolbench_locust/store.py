"""Each room's state, kept in its Locust environment by a store that knows no room's type.

As Flask's `app.extensions`: the store is a plain dict on the environment, and a room declares, once
at import, the `Slot` its state is kept in and how to make it. The room finds or makes its state
with `SLOT.of(environment)`; no module below a room names that room's types, and adding a room
edits no shared file.

A process may hold several environments (a test, a master beside its workers' tests), each with
state of its own: nothing a room keeps lives in a module global, so a new environment starts clean.
What one run counts is reset by the room's own test_start listener (the web UI's next run shares
the environment); what outlives a run (prepared plans, warnings given once) says so in its slot.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

ATTRIBUTE = "poolbench"
"""The environment's attribute that holds the store: {slot key: state}."""

T = TypeVar("T")

_declared: dict[str, str] = {}
"""Each slot's key and the module that declares it: two rooms may not share a key."""


def store_of(environment: Any) -> dict[str, Any]:
    """The environment's store, made on first use."""
    store = getattr(environment, ATTRIBUTE, None)
    if store is None:
        store = {}
        setattr(environment, ATTRIBUTE, store)
    return store


class Slot(Generic[T]):
    """One room's state in each environment's store: found there, or made by `make` on first use."""

    __slots__ = ("_make", "key")

    def __init__(self, key: str, make: Callable[[], T] | None = None) -> None:
        """`make` makes the state on first use; without it, the room `put`s it before any `of`."""
        room = sys._getframe(1).f_globals.get("__name__", "?")
        if _declared.setdefault(key, room) != room:  # the same module imported again declares it again
            raise ValueError(f"slot {key!r} is declared twice: in {_declared[key]} and in {room}")
        self.key = key
        self._make = make

    def of(self, environment: Any) -> T:
        """The environment's state of this slot, made on first use."""
        store = store_of(environment)
        try:
            return cast(T, store[self.key])
        except KeyError:
            if self._make is None:
                raise LookupError(f"{self!r} is put by its room before it is asked for") from None
            made = store[self.key] = self._make()
            return made

    def peek(self, environment: Any) -> T | None:
        """The environment's state of this slot, or None when nothing has made it yet."""
        return cast("T | None", store_of(environment).get(self.key))

    def put(self, environment: Any, value: T) -> T:
        """Make `value` the environment's state of this slot (a room that starts its state anew)."""
        store_of(environment)[self.key] = value
        return value

    def drop(self, environment: Any) -> None:
        store_of(environment).pop(self.key, None)

    def __repr__(self) -> str:
        return f"Slot({self.key!r})"
