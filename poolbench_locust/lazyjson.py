"""A JSON answer read without building the numbers its checks only count.

orjson.loads made a Python float of every number of a float answer, 65,536 for 64 x 1,024, only for
the checks to count them: two thirds of a large answer's client CPU (issue 22). Here simdjson parses
and validates the whole document into its own tape: the grammar, every number (a bad or overflowing
one, NaN), every string's UTF-8. The document then becomes Python objects, except its arrays that
start with a number: each becomes `Numbers`, a length whose values are read from the tape only when
asked (--check-vectors reads the first vector's).

Verdicts stay orjson's. A body simdjson refuses goes to orjson.loads, whose message is the failure's;
where orjson accepts it after all (an integer past 64 bits, which simdjson refuses), orjson's document
is the answer. What simdjson accepts but orjson would not (a UTF-8 byte-order mark) or would read
differently (a repeated key: orjson keeps the last; a key with a NUL in it) goes to orjson too.

Issue 33 put a faster pass before simdjson: `_jsonscan`, our own C extension, validates the body in
one pass (grammar, every number's form, strings' UTF-8 and escapes) without converting a number of an
array of numbers, which becomes a `Numbers` holding its span of the body (its values are orjson's
reading of that span, on first use). It is conservative: where it is unsure (anything orjson refuses,
and a few bodies orjson accepts: a mixed array, a long integer, a huge exponent, a repeated key, deep
nesting) it says so and simdjson then orjson read the body as above. It is built at install with the
machine's C compiler; where none was found, simdjson alone reads.

The same pass reads the `metadata` header of a `bytes` answer (`offsets`): one object per input there,
whose `end - start` it adds up without building them; where it is unsure, orjson reads the header.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

import orjson
import simdjson

# Declared for mypy, which reads the built module's types from _jsonscan.pyi: None where it was not built
_offsets: Callable[[bytes, type[Any]], tuple[dict[str, Any], int, int] | None] | None
_scan: Callable[[bytes, type[Any]], Any] | None
try:
    from poolbench_locust._jsonscan import Span as _Span
    from poolbench_locust._jsonscan import offsets as _offsets
    from poolbench_locust._jsonscan import scan as _scan
except ImportError:  # built without a C compiler: simdjson alone reads
    _Span = None  # type: ignore[misc, assignment]  # mypy keeps it a class (a variable is no base class)
    _offsets = None
    _scan = None
SCANS = _scan is not None
"""Whether the C pass was built: then it reads float answers of every size faster than orjson (a 1 x 384
answer in 2.9 us against 6.7 us); simdjson alone costs more than orjson on small ones."""
C_PASS = "c"
SIMDJSON = "simdjson"
"""The two validators a large float answer may meet: the C pass, or simdjson where it was not built."""


def validator() -> str:
    """Which validator checks this process's JSON answers: `C_PASS` where `_jsonscan` was built at install,
    else `SIMDJSON` (the same verdicts at about three times the CPU on a large float answer)."""
    return C_PASS if SCANS else SIMDJSON


REUSED_PARSER_BYTES = 64 * 1024 * 1024
"""The largest body parsed with the process's reused parser, whose buffers grow to the largest
document it has read and stay; a larger one gets a parser of its own, freed with it."""
WALK_DEPTH = 32
"""Containers nested deeper than this are converted whole by simdjson (in C): no answer nests so deep,
and a hostile one must not exhaust Python's recursion limit (simdjson allows 1,024 levels)."""
WALK_KEYS = 64
"""Objects with more keys are converted whole by simdjson: its lookup of one key is a linear scan,
so looking up each key of a large hostile object would take quadratic time."""
_BOM = b"\xef\xbb\xbf"
_NUL_ESCAPE = b"\\u0000"
"""simdjson looks a key up as a C string: a key with an escaped NUL in it would be cut there."""

_parser = simdjson.Parser()


if TYPE_CHECKING:
    _Registered = Sequence[Any]  # what Sequence.register(Numbers) below makes it, told to mypy
else:
    _Registered = object


class Numbers(_Registered):
    """A JSON array whose first element is a number, read lazily: its length costs nothing, its values
    (any JSON values: only the first is known to be a number) are built on first use.

    A Sequence by registration, not by subclassing: `isinstance(value, ARRAY)` runs for every vector of
    every answer, and against a subclass of an ABC it goes through ABCMeta's Python-level check."""

    __slots__ = ()

    def __len__(self) -> int:
        raise NotImplementedError

    def values(self) -> list[Any]:
        """The elements as orjson would give them (a nested array as a list)."""
        raise NotImplementedError

    def numbers_only(self) -> bool:
        """Whether every element is a number, without building one."""
        raise NotImplementedError

    def as_int64(self) -> bytes | None:
        """Every element as a native 64-bit integer, 8 bytes each (a packed embedding's range check),
        when every element is a JSON integer; else None."""
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        return self.values()[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values())

    def __contains__(self, value: object) -> bool:
        return value in self.values()

    def __reversed__(self) -> Iterator[Any]:
        backwards: Iterator[Any] = reversed(self.values())  # typeshed's overloads give Any for a list[Any]
        return backwards

    def index(self, value: Any, *args: Any) -> int:
        return self.values().index(value, *args)

    def count(self, value: Any) -> int:
        return self.values().count(value)

    def __repr__(self) -> str:
        return f"Numbers(length={len(self)})"


Sequence.register(Numbers)


if _Span is not None:

    class _SpanNumbers(_Span, Numbers):
        """An array of numbers `_jsonscan` validated: its span of the body and its length (in C). Every
        element is a number (the pass is unsure of arrays that hold anything else)."""

        __slots__ = ()

        def values(self) -> list[Any]:
            if self._values is None:
                self._values = orjson.loads(memoryview(self._data)[self._start : self._end])
            return self._values

        def numbers_only(self) -> bool:
            return True

        # as_int64 is _jsonscan's: read from the span in C, no Python int built


class _TapeNumbers(Numbers):
    """An array simdjson parsed, read from its tape. Valid only during the `loads` call's checks: the
    next document parsed replaces the tape it reads."""

    __slots__ = ("_array", "_length", "_values")

    def __init__(self, array: Any, length: int) -> None:
        self._array = array
        self._length = length
        self._values: list[Any] | None = None

    def values(self) -> list[Any]:
        """The elements as orjson would give them (a nested array as a list)."""
        if self._values is None:
            self._values = self._array.as_list()
            self._array = None  # nothing left that holds the parser's tape
        return self._values

    def __len__(self) -> int:
        return self._length

    def numbers_only(self) -> bool:
        """Whether every element is a number, read in C from simdjson's tape without building one."""
        if self._values is not None:
            return set(map(type, self._values)) <= _NUMBERS
        try:
            buffer = self._array.as_buffer(of_type="d")
        except TypeError:  # simdjson's INCORRECT_TYPE: a null, a boolean, a string or an object
            return False
        # as_buffer flattens a nested array: its values outnumber the elements
        return memoryview(buffer).nbytes == 8 * self._length

    def as_int64(self) -> bytes | None:
        """Every element as a native 64-bit integer, 8 bytes each, read in C from simdjson's tape without
        building one (a packed embedding's range check), when every element is a JSON integer; else None."""
        if self._values is not None or not self._length:
            return None
        try:
            raw = bytes(self._array.as_buffer(of_type="i"))
        except TypeError:  # a float (1.0 too), null, boolean, string or object, or past int64
            return None
        return raw if len(raw) == 8 * self._length else None  # as_buffer flattens a nested array


ARRAY = (list, Numbers)
"""What a JSON array is in a document `loads` returns: `isinstance(value, ARRAY)`."""


def numbers_only(array: Any) -> bool:
    """Whether a JSON array (a list or `Numbers`) holds only numbers (no null, boolean, string or container)."""
    if isinstance(array, Numbers):
        return array.numbers_only()
    return set(map(type, array)) <= _NUMBERS


LITERAL_LOOKS = 64
"""Occurrences of a literal's letter looked at before `may_hold_literal` gives up and says maybe."""


def may_hold_literal(data: bytes) -> bool:
    """Whether a JSON body may hold `null`, `true` or `false`: False only when it holds none.

    Looks for the letters no number has and few keys do, 'u' (null, true) and 'f' (false), with memchr,
    and at the words around each: 5 us on a 690 kB float answer, where `b"null" in data` takes 370 us.
    A body with many of those letters (texts echoed back) is a maybe after LITERAL_LOOKS of each.
    """
    at, looks = data.find(b"u"), 0
    while at >= 0:
        # startswith allocates nothing; at - 1 < 0 starts from the end, too near it for a whole word
        if data.startswith(b"null", at - 1) or data.startswith(b"true", at - 2) or looks == LITERAL_LOOKS:
            return True
        at, looks = data.find(b"u", at + 1), looks + 1
    at, looks = data.find(b"f"), 0
    while at >= 0:
        if data.startswith(b"false", at) or looks == LITERAL_LOOKS:
            return True
        at, looks = data.find(b"f", at + 1), looks + 1
    return False


class Offsets:
    """The `data` list of a `bytes` answer's metadata as `_jsonscan.offsets` read it: its length, its first
    object, and `described`, the sum of `end - start` over every object (each checked, none but the first
    built). Only the first can be indexed: what needs every object (token-level shapes) reads with orjson."""

    __slots__ = ("_count", "_first", "described")

    def __init__(self, first: list[Any], count: int, described: int) -> None:
        self._first = first
        self._count = count
        self.described = described

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> Any:
        if index not in (0, -self._count):
            raise IndexError(f"only the first of the {self._count} objects was read")
        return self._first[0]

    def __repr__(self) -> str:
        return f"Offsets(count={self._count}, described={self.described})"


def offsets(text: bytes) -> dict[str, Any] | None:
    """A `bytes` answer's metadata with its top-level `data` list as `Offsets`, or None where the C pass is
    unsure of it (or was not built): orjson then reads it whole, and its verdict and messages stand.

    vLLM writes one object of about 100 bytes per input there; orjson built a dict of each (16 us for 64 inputs,
    a tenth of such a request's client CPU) only for the checks to add up their `end - start` (4 us here).
    """
    if _offsets is None or (read := _offsets(text, _SpanNumbers)) is None:
        return None
    doc, count, described = read
    doc["data"] = Offsets(doc["data"], count, described)
    return doc


class _Unsure(Exception):
    """simdjson and orjson may read this document differently: orjson's reading counts."""


def loads(data: bytes) -> Any:
    """The document in `data`, as orjson.loads gives it but with `Numbers` for arrays that start with a number.

    Raises orjson.JSONDecodeError (with orjson's message) where orjson.loads would.
    """
    # the pass reads bytes only (a body is bytes); None: it is unsure, and simdjson then orjson decide
    if _scan is not None and type(data) is bytes and (doc := _scan(data, _SpanNumbers)) is not None:
        return doc
    # A one-byte search is memchr's, 15 times faster on 700 kB than the search of the escape among the digits
    if data.startswith(_BOM) or (b"\\" in data and _NUL_ESCAPE in data):
        return orjson.loads(data)
    try:
        doc = _parse(data)
        return _python(doc, 0) if type(doc) in _PROXIES else doc
    # simdjson refuses with ValueError (UnicodeDecodeError for bad UTF-8), RuntimeError (an integer past
    # 64 bits), MemoryError (past its capacity): orjson decides, and says why
    except (ValueError, RuntimeError, MemoryError, _Unsure):
        return orjson.loads(data)


def _parse(data: bytes) -> Any:
    global _parser
    if len(data) > REUSED_PARSER_BYTES:
        return simdjson.Parser().parse(data)
    try:
        return _parser.parse(data)
    except RuntimeError:  # perhaps a proxy of the last document still lives (a traceback held it): a new parser
        _parser = simdjson.Parser()
        return _parser.parse(data)


_OBJECT_PROXY = simdjson.Object
_PROXIES = frozenset({simdjson.Array, simdjson.Object})
_NUMBERS = frozenset({float, int})


def _python(value: Any, depth: int) -> Any:
    """A proxy of simdjson's as Python objects, arrays that start with a number as `Numbers`."""
    if type(value) is _OBJECT_PROXY:
        if depth > WALK_DEPTH or len(value) > WALK_KEYS:
            return value.as_dict()
        keys = list(value)
        result = {}
        for key in keys:
            item = value[key]
            result[key] = _python(item, depth + 1) if type(item) in _PROXIES else item
        if len(result) != len(keys):  # simdjson's lookup finds the first of a repeated key, orjson keeps the last
            raise _Unsure
        return result
    if depth > WALK_DEPTH:
        return value.as_list()
    length = len(value)
    if length and type(value[0]) in _NUMBERS:  # bool is neither
        return _TapeNumbers(value, length)
    return [_python(item, depth + 1) if type(item) in _PROXIES else item for item in value]
