"""Cutting a text export's byte stream into whole rows (CSV) or lines (JSON lines).

The readers read each file **in one sequential pass on one handle**, in blocks of a fixed size,
and cut the stream here into runs of whole records before any decoder sees them. So

* no decoder reads the file itself (no read-ahead thread shares the handle, no second pass);
* a record's bytes never straddle two decoder calls, whatever the block size;
* a record longer than its limit is found here, before it is buffered whole, and dropped as
  **one** record (:data:`OVERSIZE` in its place): the records after it are read as usual.

**CSV rows** follow the grammar of pyarrow's CSV parser with its default options (delimiter
``,``, quote ``"``, a doubled quote inside a quoted field is a quote, no escape character): a
quote opens a quoted field only at the start of a field (after a delimiter, a line break or at
the start of a row), and inside a quoted field a line break is part of the value. ``\\n``,
``\\r\\n`` and a lone ``\\r`` end a row. A row's size counts its bytes up to and including its
line break (a ``\\r\\n`` counts as the ``\\r`` and an empty row).

**JSON lines** end at ``\\n`` (JSON text cannot hold a raw line break; a ``\\r`` before it is
whitespace to JSON). A line's size counts its bytes up to and including the ``\\n``.

Nothing here looks at what a record says; it only finds where records end. The CSV scan is
vectorised (numpy): it runs at C speed however many fields are quoted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

__all__ = ["OVERSIZE", "CsvHeader", "csv_header", "csv_row_runs", "jsonl_lines"]


class _Oversize:
    """The place of one record that was over its size limit (its bytes were dropped)."""

    def __repr__(self) -> str:
        return "OVERSIZE"


OVERSIZE = _Oversize()

Read = Callable[[int], bytes]

_QUOTE = 0x22
_COMMA = 0x2C
_LF = 0x0A
_CR = 0x0D


class _CsvScanner:
    """Finds the line breaks that end CSV rows, block by block, at C speed (numpy).

    A run of consecutive quotes acts on the quoting state as a whole: inside a quoted field a
    run of even length is doubled quotes (still quoted) and one of odd length ends with the
    closing quote; outside, a run at a field's start opens a quoted field (then the rest of the
    run is as inside), and anywhere else its quotes are literal. So each run is the identity
    (even length), a flip (odd, at a field's start) or a reset to "not quoted" (odd,
    elsewhere), and the state after every run is the parity of the flips since the last reset:
    a cumulative sum. A line break outside a quoted field ends a row. A run at the end of a
    block waits for the next block (its length is not known yet).
    """

    def __init__(self) -> None:
        self._quoted = False
        self._before = _LF  # the byte before the unscanned data: a row start at first
        self._carry = b""  # quotes that end the last block, not yet scanned

    def row_ends(self, block: bytes) -> tuple[int, int]:
        """The indices in ``block`` just after its first and its last row-ending line break
        (-1, -1 if none ends a row); the state moves to the end of ``block``."""
        held = len(self._carry)
        data = self._carry + block if held else block
        end = len(data)
        if end and data[end - 1] == _QUOTE:
            end = len(data.rstrip(b'"'))
        self._carry = data[end:]
        if not end:
            return -1, -1
        view = np.frombuffer(data, dtype=np.uint8, count=end)
        breaks = np.flatnonzero((view == _LF) | (view == _CR))
        quotes = np.flatnonzero(view == _QUOTE)
        if quotes.size:
            first_in_run = np.ones(quotes.size, dtype=bool)
            first_in_run[1:] = quotes[1:] != quotes[:-1] + 1
            starts = quotes[first_in_run]
            lengths = np.diff(np.append(np.flatnonzero(first_in_run), quotes.size))
            before = view[np.maximum(starts - 1, 0)]
            before[starts == 0] = self._before
            at_field_start = (before == _COMMA) | (before == _LF) | (before == _CR)
            odd = (lengths & 1) == 1
            flips = np.cumsum(odd & at_field_start)
            base = np.maximum.accumulate(np.where(odd & ~at_field_start, flips, -int(self._quoted)))
            quoted_after = ((flips - base) & 1) == 1
            run = np.searchsorted(starts, breaks) - 1  # the last run before each break
            quoted_at = np.where(run >= 0, quoted_after[np.maximum(run, 0)], self._quoted)
            breaks = breaks[~quoted_at]
            self._quoted = bool(quoted_after[-1])
        elif self._quoted:
            breaks = breaks[:0]
        self._before = data[end - 1]
        if not breaks.size:
            return -1, -1
        return int(breaks[0]) + 1 - held, int(breaks[-1]) + 1 - held


def _check_block(block_bytes: int, limit: int) -> None:
    if not 0 < block_bytes <= limit:
        raise ValueError("'block_bytes' must be > 0 and <= the limit on one record")


@dataclass(frozen=True)
class CsvHeader:
    """A CSV file's header row, as cut from the start of the stream.

    Attributes:
        row: the header's bytes (with any empty lines before it), or ``None`` if the header
            is over its limit or the file is empty.
        over_limit: True if the header is longer than the limit.
        rest: the bytes read after the header (the start of the first data row).
    """

    row: bytes | None
    over_limit: bool
    rest: bytes


def csv_header(read: Read, block_bytes: int, max_bytes: int) -> CsvHeader:
    """Read the first non-empty CSV row (the header) from the start of a stream.

    Args:
        read: the stream's ``read``.
        block_bytes: how much to read at a time.
        max_bytes: the header's size limit (empty lines before it count).
    """
    kept: list[bytes] = []  # the bytes of the header and the empty lines before it
    size = 0
    scanner = _CsvScanner()
    while True:
        block = read(min(block_bytes, max_bytes + 1 - size))
        if not block:  # a file that is one header without a line break, or empty
            row = b"".join(kept)
            return CsvHeader(row if row.strip(b"\r\n") else None, False, b"")
        position = 0
        while position < len(block):
            end, _ = scanner.row_ends(block[position:] if position else block)
            if end < 0:
                kept.append(block[position:])
                size += len(block) - position
                break
            kept.append(block[position : position + end])
            size += end
            position += end
            if size > max_bytes:
                return CsvHeader(None, True, b"")
            row = b"".join(kept)
            if row.strip(b"\r\n"):
                return CsvHeader(row, False, block[position:])
            scanner = _CsvScanner()  # the empty line ended a row: a row starts here
        if size > max_bytes:
            return CsvHeader(None, True, b"")


def csv_row_runs(
    read: Read, block_bytes: int, max_row_bytes: int, start: bytes = b""
) -> Iterator[bytes | _Oversize]:
    """The CSV rows of a stream, as runs of whole rows (about a block each).

    Each item is either a run of whole rows (bytes that begin at a row start and end right
    after a row's line break, or at the end of the stream) or :data:`OVERSIZE`, in the place
    of one row longer than ``max_row_bytes`` (that row's bytes are never buffered whole).

    Args:
        read: the stream's ``read``, positioned at a row start.
        block_bytes: how much to read at a time; at most ``max_row_bytes``, so that a row
            within one block is never over the limit and only rows that cross a block boundary
            need counting.
        max_row_bytes: the limit on one row's size.
        start: bytes already read from the stream (they come first).
    """
    _check_block(block_bytes, max_row_bytes)
    scanner = _CsvScanner()
    pending: list[bytes] = []  # the bytes of the row not yet ended
    pending_size = 0
    dropping = False  # inside a row over the limit: its bytes are dropped
    block = start or read(block_bytes)
    while block:
        first, last = scanner.row_ends(block)
        if first < 0:  # the whole block belongs to the current row
            if not dropping:
                pending.append(block)
                pending_size += len(block)
                if pending_size > max_row_bytes:
                    yield OVERSIZE
                    pending, pending_size, dropping = [], 0, True
        else:
            begin = 0
            if dropping:  # the row over the limit ends here
                begin, dropping = first, False
            elif pending_size + first > max_row_bytes:
                yield OVERSIZE
                begin = first
            run = b"".join([*pending, block[:last]]) if begin == 0 else block[begin:last]
            if run:
                yield run
            pending = [block[last:]] if last < len(block) else []
            pending_size = len(block) - last
        block = read(block_bytes)
    if pending and not dropping:
        yield b"".join(pending)


def jsonl_lines(read: Read, block_bytes: int, max_line_bytes: int) -> Iterator[bytes | _Oversize]:
    """The lines of a stream, each with its ``\\n`` (the last one may lack it).

    A line longer than ``max_line_bytes`` is :data:`OVERSIZE` in its place (its bytes are
    never buffered whole). ``block_bytes`` is at most ``max_line_bytes``, as in
    :func:`csv_row_runs`.
    """
    _check_block(block_bytes, max_line_bytes)
    pending: list[bytes] = []
    pending_size = 0
    dropping = False
    while True:
        block = read(block_bytes)
        if not block:
            break
        begin = 0
        while True:
            end = block.find(b"\n", begin) + 1
            if end == 0:
                break
            if dropping:
                dropping = False
            elif pending_size + end - begin > max_line_bytes:
                yield OVERSIZE
            elif pending:
                yield b"".join([*pending, block[begin:end]])
            else:
                yield block[begin:end]
            pending, pending_size, begin = [], 0, end
        if dropping or begin == len(block):
            continue
        pending.append(block[begin:])
        pending_size += len(block) - begin
        if pending_size > max_line_bytes:
            yield OVERSIZE
            pending, pending_size, dropping = [], 0, True
    if pending and not dropping:
        yield b"".join(pending)
