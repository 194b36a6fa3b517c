"""Token-level answers: a pooling task of one row per input token (token_embed, token_classify), or a route that
answers only so. Each input's answer is a matrix of one row per input token (or per chunk of tokens, with late
chunking), so the rows are checked against the request's token count, in every form the answer's form gives
them: each input's rows (JSON rows, a binary form's shapes), base64 sizes, or a raw body's size alone.

A model's pooler may drop its special tokens' rows: BGE-M3 drops the BOS row of its token_embed answer
and the BOS and EOS rows of its token_classify one (whose rows are then single numbers). So the rows each
input lacks (0 to MAX_DROPPED) and the row's width (the hidden size, or the labels) are learned from the
answers: `TokenRows` keeps every (dropped, width) pair that all the answers so far allow, and an answer
that allows none of them is one failed request that says what was expected. A raw body of
Σ rows x width x dtype bytes has both unknown, and a size that changes with every request's tokens: its
first answer may allow two pairs, the next ones tell them apart. Where nothing counts each input's tokens
exactly, one float answer asked at start (engine/row_probe.py) teaches the pair, and every raw body's
size then gives its tokens: size / (width x dtype bytes) rows, plus the rows dropped per input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from poolbench_locust.endpoints.spec import MAX_TOKENS
from poolbench_locust.engine.body import BadResponse
from poolbench_locust.lazyjson import ARRAY

TOKEN_MATRIX = (
    "is a matrix of token rows, not one vector: the model is a token-level one (give --pooling-task token_embed "
    "or token_classify to count its rows)"
)
"""Said of a float answer's matrix where one vector per input was expected: the serving bug once taken for a
speed-up (WIRE.md), or a token-level model asked without --pooling-task."""
MAX_DROPPED = 2
"""Rows a pooler may leave out of each input's answer: its BOS and EOS tokens'."""
BODY_SIZE = "body-size"
"""The token_source of a count worked out from a raw body's size (`TokenRows.tokens_of_size`)."""
BODY_SIZE_WHERE = "the body's size"


def _shown_width(width: int) -> str:
    return "1 value" if width == 1 else f"{width} values"


class TokenRows:
    """What a User class's token-level answers taught of their shape, and the checks against it.

    One per plan (shared by the users of a class in a process); every method is O(rows of the answer)."""

    __slots__ = ("chunk", "shapes")

    def __init__(self, chunk: int | None) -> None:
        self.chunk = chunk
        """--late-chunk-size: one row per chunk of this many tokens (no row is dropped then)."""
        self.shapes: frozenset[tuple[int, int]] | None = None
        """(rows dropped per input, row width) that every answer so far allows; None before the first."""

    def hidden(self) -> int | None:
        """The rows' one width, once the answers have told it; else None."""
        if self.shapes is not None and len(widths := {width for _, width in self.shapes}) == 1:
            return next(iter(widths))
        return None

    # How many rows `tokens` input tokens make.
    def _rows(self, tokens: int, dropped: int) -> int:
        if self.chunk is not None:
            return -(-tokens // self.chunk)
        return tokens - dropped

    def _droppings(self) -> tuple[int, ...]:
        if self.chunk is not None:
            return (0,)
        if self.shapes is not None:
            return tuple(sorted({k for k, _ in self.shapes}))
        return tuple(range(MAX_DROPPED + 1))

    def _fits_total(self, rows: int, inputs: int, tokens: int, dropped: int) -> bool:
        if self.chunk is None:
            return rows == tokens - inputs * dropped
        # Σ ceil(t_i / c) for inputs whose tokens add up to `tokens`: between these two
        return -(-tokens // self.chunk) <= rows <= (tokens + inputs * (self.chunk - 1)) // self.chunk

    def _settle(self, allowed: set[tuple[int, int]], why: str) -> None:
        kept = allowed if self.shapes is None else allowed & self.shapes
        if not kept:
            raise BadResponse(why)
        if self.shapes is None or kept != self.shapes:
            self.shapes = frozenset(kept)

    def _expected(self, tokens: int, inputs: int) -> str:
        """What `tokens` input tokens in `inputs` inputs should have made, in words, after what was learned."""
        if self.chunk is not None:
            return f"one row per chunk of {self.chunk} tokens"
        droppings = self._droppings()
        if droppings == (0,):
            return f"{tokens} (one row per token)"
        if len(droppings) == 1:
            k = droppings[0]
            return (
                f"{tokens - inputs * k} (one row per token, less the {k} special-token "
                f"row{'s' if k > 1 else ''} per input the model's pooler drops, as its earlier answers did)"
            )
        return f"one row per token ({tokens}), or up to {MAX_DROPPED} fewer per input for special tokens a pooler drops"

    def _width_problem(self, width: int) -> str | None:
        if self.shapes is not None and all(w != width for _, w in self.shapes):
            learned = sorted({w for _, w in self.shapes})
            expected = " or ".join(map(str, learned))
            return f"token rows of {_shown_width(width)}, expected {expected} as in earlier answers"
        return None

    def judge_rows(
        self, rows: Sequence[int], width: int, tokens: int | None, where: str, per_input: Sequence[int] = ()
    ) -> int:
        """An answer whose rows per input are known (JSON float, a binary form's shapes): check them against
        the token count (`where` says whose) and each input's exact count where known; return Σ rows."""
        total = sum(rows)
        if (problem := self._width_problem(width)) is not None:
            raise BadResponse(problem)
        allowed = set()
        for k in self._droppings():
            if per_input and any(r != self._rows(t, k) for r, t in zip(rows, per_input, strict=False)):
                continue
            if tokens is not None and not self._fits_total(total, len(rows), tokens, k):
                continue
            allowed.add((k, width))
        if not allowed and per_input:
            for i, (r, t) in enumerate(zip(rows, per_input, strict=False)):
                if all(r != self._rows(t, k) for k in self._droppings()):
                    raise BadResponse(
                        f"embedding {i} has {r} token rows for an input of {t} tokens (the client's count), "
                        f"expected {self._expected(t, 1)}"
                    )
        self._settle(
            allowed,
            f"{total} token rows for {tokens} input tokens ({where}) in {len(rows)} inputs, "
            f"expected {self._expected(tokens or 0, len(rows))}",
        )
        return total

    def judge_size(
        self,
        what: str,
        sizes: Sequence[int],
        inputs: int,
        dtype_bytes: int,
        tokens: int | None,
        where: str,
        per_input: Sequence[int] = (),
    ) -> int | None:
        """Raw token rows whose bytes only are known: one size for a raw body (all the inputs), or
        one per input (base64 strings). Each is rows x width x dtype_bytes. Return Σ rows, or None where
        nothing says how many there should be (no count, or late chunking without each input's count)."""
        total = sum(sizes)
        if total % dtype_bytes:
            raise BadResponse(f"{what} of {total} bytes is not a whole number of {dtype_bytes}-byte values")
        if not per_input and (tokens is None or self.chunk is not None):
            return None
        allowed: set[tuple[int, int]] = set()
        rows_of: dict[int, int] = {}
        for k in self._droppings():
            per = [self._rows(t, k) for t in per_input] if per_input else None
            rows = sum(per) if per is not None else (tokens or 0) - inputs * k
            if rows <= 0 or (tokens is not None and not self._fits_total(rows, inputs, tokens, k)):
                continue
            width, rest = divmod(total // dtype_bytes, rows)
            if rest or not width:
                continue
            if (
                per is not None
                and len(sizes) == len(per)
                and any(size != r * width * dtype_bytes for size, r in zip(sizes, per, strict=True))
            ):
                continue
            allowed.add((k, width))
            rows_of[k] = rows
        self._settle(allowed, self._size_message(what, total, dtype_bytes, tokens, where, inputs, per_input))
        assert self.shapes is not None
        return rows_of[min(k for k, _ in self.shapes if k in rows_of)]

    def tokens_of_size(self, what: str, size: int, inputs: int, dtype_bytes: int) -> tuple[int, int] | None:
        """A raw body's (Σ rows, Σ tokens) from its size alone, once the answers told the rows' one width and
        the rows a pooler drops (the float answer asked at start: engine/row_probe.py). None before they did,
        or with late chunking, whose rows do not say their tokens. A size that is not a whole number of
        rows, fewer rows than inputs, or a count past MAX_TOKENS is a BadResponse that says so."""
        if self.chunk is not None or self.shapes is None or len(self.shapes) != 1:
            return None
        ((dropped, width),) = self.shapes
        row = width * dtype_bytes
        rows, rest = divmod(size, row)
        if rest:
            raise BadResponse(
                f"{what} of {size} bytes is not a whole number of token rows of {_shown_width(width)} x "
                f"{dtype_bytes} = {row} bytes (the width learnt at start from a float answer)"
            )
        if rows < inputs:
            raise BadResponse(f"{what} of {size} bytes holds {rows} token rows for {inputs} inputs, at least one each")
        if (tokens := rows + inputs * dropped) > MAX_TOKENS:
            raise BadResponse(f"{what} of {size} bytes is implausible: more than {MAX_TOKENS} tokens in one request")
        return rows, tokens

    def _size_message(
        self,
        what: str,
        size: int,
        dtype_bytes: int,
        tokens: int | None,
        where: str,
        inputs: int,
        per_input: Sequence[int],
    ) -> str:
        count = sum(per_input) if per_input else tokens
        source = "the client's count" if per_input else where
        if self.shapes is not None and len(self.shapes) == 1:
            ((k, width),) = self.shapes
            rows = sum(self._rows(t, k) for t in per_input) if per_input else (count or 0) - inputs * k
            expected = rows * width * dtype_bytes
            return (
                f"{what} of {size} bytes for {count} input tokens ({source}) in {inputs} inputs, expected "
                f"{rows} token rows x {width} x {dtype_bytes} = {expected} bytes"
            )
        return (
            f"{what} of {size} bytes is not a whole number of token rows for {count} input tokens ({source}) in "
            f"{inputs} inputs, expected {self._expected(count or 0, inputs)}"
        )


def rows_of_json(vectors: Sequence[Any]) -> tuple[list[int], int]:
    """The rows of each input's matrix in a float JSON answer, and their one width; BadResponse when an
    item is not a list of token rows of one width. A flat list of numbers is one number per token (BGE-M3's
    token_classify answers its sparse weights so)."""
    rows: list[int] = []
    width: int | None = None
    for i, matrix in enumerate(vectors):
        if type(matrix) is list and matrix and isinstance(matrix[0], ARRAY):
            for row in matrix:
                if not isinstance(row, ARRAY):
                    raise BadResponse(f"embedding {i} holds a token row that is not a list of numbers")
                if width is None:
                    width = len(row)
                elif len(row) != width:
                    raise BadResponse(f"embedding {i} has a token row of {_shown_width(len(row))}, expected {width}")
            rows.append(len(matrix))
        elif isinstance(matrix, ARRAY) and len(matrix):
            if width is None:
                width = 1
            elif width != 1:
                raise BadResponse(f"embedding {i} has token rows of 1 value, expected {width}")
            rows.append(len(matrix))
        else:
            raise BadResponse(f"embedding {i} is not a non-empty list of token rows")
    return rows, width or 0


def base64_sizes(vectors: Sequence[Any]) -> list[int]:
    """The bytes each base64 string of a token-level answer decodes to, without decoding it."""
    sizes = []
    for i, text in enumerate(vectors):
        if not isinstance(text, str) or len(text) % 4 or not text:
            raise BadResponse(f"embedding {i} is not a base64 string")
        sizes.append(len(text) // 4 * 3 - (text[-2:].count("=")))
    return sizes
