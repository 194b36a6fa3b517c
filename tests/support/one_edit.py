"""A document one edit away from a good one, drawn by hypothesis: the fuzz of the JSON readers' verdicts."""

from __future__ import annotations

from typing import Any, TypeVar

from hypothesis import strategies as st

Text = TypeVar("Text", bytearray, list[Any])


def one_edit(text: Text, data: st.DataObject, alphabet: list[Any]) -> Text:
    """`text` (a bytearray, or a list of characters) with one element replaced, inserted or deleted, or cut
    short there: the place, the kind of edit and the element inserted drawn from `data` and `alphabet`."""
    where = data.draw(st.integers(0, len(text) - 1))
    how = data.draw(st.sampled_from(["replace", "insert", "delete", "truncate"]))
    element = data.draw(st.sampled_from(alphabet))
    if how == "replace":
        text[where] = element
    elif how == "insert":
        text.insert(where, element)
    elif how == "delete":
        del text[where]
    else:
        del text[where:]
    return text
