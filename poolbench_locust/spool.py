"""A list of records kept on disk, not in memory: what a long run keeps for every second (the history's
samples, the JSON result's blocks) without the process growing with it.

An hour at one entry a second is thousands of dicts of some kB each (a sample of the pooling table, a
block's histograms): held as Python objects they would grow a process by several MB a minute. A
`SpooledList` keeps each record pickled in an unlinked temporary file (the page cache holds it, not
the process), and only its place in memory: two machine integers in an `array`, 12 bytes an entry.
Reading a record reads and unpickles it; a record that is replaced or deleted leaves dead bytes,
and the file is rewritten with the live ones alone when the dead ones outweigh them, so the disk
used stays within twice what is kept. The file is opened on the first record and closed with the
list (or the process): a list never written holds no file.

Pickle, not JSON: a record comes back as it went in (int keys stay ints), and the file is this
process's own, never read from elsewhere.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from array import array
from typing import IO, Any

NONE = -1
"""The place of an entry that is None (no record written)."""
COMPACT_ABOVE = 1 << 20
"""Dead bytes below this never make the file be rewritten, whatever the share (a short run writes it once)."""


def _places(capacity: int) -> tuple[array[int], array[int]]:
    """Offsets and sizes of `capacity` entries, zeros: 8 and 4 bytes each (a record is far below 2 GiB)."""
    return array("q", bytes(8 * capacity)), array("i", bytes(4 * capacity))


def _open() -> IO[bytes]:
    # Open as long as the list lives (closed by clear, a compaction, or the list's end): no `with`.
    return tempfile.TemporaryFile(prefix="poolbench-spool-")


class SpooledList:
    """A list of picklable records (or None) on disk: append, read, replace and delete by index, as a
    list; `len` and `clear`. Each entry costs 12 bytes of memory, whatever its record's size; with a
    `capacity`, the places of that many entries are made at once, so the list's memory does not grow
    while it fills up to it (past it, it grows as a list does)."""

    def __init__(self, capacity: int = 0) -> None:
        self._file: IO[bytes] | None = None
        self._capacity = max(capacity, 0)
        self._offsets, self._sizes = _places(self._capacity)
        self._len = 0
        """Entries in use: the arrays' first _len places (the rest is room made in advance)."""
        self._end = 0
        self._live = 0

    def __len__(self) -> int:
        return self._len

    def _index(self, index: int) -> int:
        i = index + self._len if index < 0 else index
        if not 0 <= i < self._len:
            raise IndexError("SpooledList index out of range")
        return i

    def _write(self, record: Any) -> tuple[int, int]:
        if record is None:
            return NONE, 0
        data = pickle.dumps(record, pickle.HIGHEST_PROTOCOL)
        if self._file is None:
            self._file = _open()
        os.pwrite(self._file.fileno(), data, self._end)
        offset = self._end
        self._end += len(data)
        self._live += len(data)
        return offset, len(data)

    def _read(self, offset: int, size: int) -> Any:
        if offset == NONE:
            return None
        assert self._file is not None
        return pickle.loads(os.pread(self._file.fileno(), size, offset))

    def append(self, record: Any) -> None:
        offset, size = self._write(record)
        if self._len < len(self._offsets):
            self._offsets[self._len], self._sizes[self._len] = offset, size
        else:
            self._offsets.append(offset)
            self._sizes.append(size)
        self._len += 1

    def __getitem__(self, index: int) -> Any:
        i = self._index(index)
        return self._read(self._offsets[i], self._sizes[i])

    def __setitem__(self, index: int, record: Any) -> None:
        i = self._index(index)
        self._live -= self._sizes[i]
        self._offsets[i], self._sizes[i] = self._write(record)
        self._compact_if_mostly_dead()

    def __delitem__(self, index: int) -> None:
        i, n = self._index(index), self._len
        self._live -= self._sizes[i]
        # The later places move down one, within the arrays' room (the same length: no reallocation).
        self._offsets[i : n - 1] = self._offsets[i + 1 : n]
        self._sizes[i : n - 1] = self._sizes[i + 1 : n]
        self._len -= 1
        self._compact_if_mostly_dead()

    def _compact_if_mostly_dead(self) -> None:
        """Rewrite the live records into a new file once the dead ones outweigh them: record by record,
        so the process never holds more than one."""
        dead = self._end - self._live
        if self._file is None or dead <= max(self._live, COMPACT_ABOVE):
            return
        old, self._file, self._end, self._live = self._file, None, 0, 0
        try:
            for i in range(self._len):
                offset, size = self._offsets[i], self._sizes[i]
                if offset != NONE:
                    data = os.pread(old.fileno(), size, offset)
                    if self._file is None:
                        self._file = _open()
                    os.pwrite(self._file.fileno(), data, self._end)
                    self._offsets[i] = self._end
                    self._end += size
                    self._live += size
        finally:
            old.close()

    def clear(self) -> None:
        """No entries, and no file (a later record opens a new one); the room made in advance stays."""
        self._offsets, self._sizes = _places(self._capacity)
        self._len = self._end = self._live = 0
        if self._file is not None:
            self._file.close()
            self._file = None

    def disk_bytes(self) -> int:
        """Bytes of the file, dead records included (at most about twice the live ones, or COMPACT_ABOVE)."""
        return self._end
