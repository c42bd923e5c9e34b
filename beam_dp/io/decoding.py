"""How the export formats are decoded: Parquet, CSV and JSON lines, and rows to Arrow batches.

The pieces :class:`beam_dp.io.readers.ReadExport` reads a file with (Avro's native decoder is
:mod:`beam_dp.io.avro`): each decoder takes an open file and a :class:`_FileState` and yields
Arrow batches, recording in the state where the file stopped being decodable instead of raising.

**Decoders never keep their exceptions.** Every call into pyarrow, fastavro or ``json`` goes
through :func:`_call`, which drops the decoder's exception (whose message may quote the data)
inside its own frame, so no error raised later carries it as its context. Errors are built here
from the file name, the position (a line, a row group), the field and the rule only.

**Partial files.** A decoder that fails part-way has already yielded the batches decoded before
the failure; those are kept and the rest of the file is skipped (a whole Parquet row group or
run of CSV rows is the smallest part those decoders deliver; JSON lines deliver record by
record).

**One pass, one handle.** CSV and JSON lines are read in one sequential pass over the file's
handle, cut into whole rows or lines by :mod:`beam_dp.io.framing`; each run of CSV rows is
parsed by pyarrow from memory, so no decoder reads the handle itself (pyarrow's streaming CSV
reader reads ahead on a background thread: two of them on one handle gave different records
from run to run).

**Size limits** (:class:`ReadLimits`, defaults below). A CSV row or a JSON line over its limit
is one bad record (dropped and counted with ``on_bad_record='skip'``; the records after it are
read as usual); a CSV header or an Avro block over its limit makes the file undecodable from
there (a header is no record; a block holds many). Errors name the limit and how to raise it.

* ``CSV_MAX_HEADER_BYTES`` (16 MiB): a CSV header row (with any empty lines before it);
* ``CSV_MAX_ROW_BYTES`` (64 MiB): one CSV row, including its line break;
* ``JSONL_MAX_LINE_BYTES`` (64 MiB): one JSON line, including its line break;
* ``AVRO_MAX_BLOCK_BYTES`` (256 MiB): one Avro block (also any one field of the Avro header).

**Identity across batches.** Row formats (Avro, JSON lines) build Arrow columns from Python
values by a fixed rule, not by Arrow's inference over the batch: a column of ints only is
int64, floats only float64, strings only text; any other mix (an id given as ``42`` in one
record and ``"u7"`` in the next, ints with floats, an int beyond int64) becomes text, value by
value, by a rule that looks at that value alone. In the privacy-unit field (``unit_column``)
that text is the value's canonical identity
(:func:`beam_dp.batching.hashing.canonical_id_text`: ``42`` and ``42.0`` give ``"42"``, which
hashes as the integer 42 does), and a value that is no identifier (``42.5``, ``inf``, ``true``)
becomes null, a bad record, just as it is in a typed column. In other fields a whole number is
its decimal text (so a label matches ``"42"``) and another float its ``repr`` (``"42.5"``,
``"inf"``: still parsed, or rejected, as a number later). A value that is neither a scalar nor
a decimal becomes null. So no record's identity depends on the other records of its batch.

**Exact JSON numbers.** ``json`` reads a number written with a point or an exponent as the
nearest double, which past 2**53 is another number (``9007199254740993.0`` would be
``9007199254740992.0``, and the person ``9007199254740993`` two units). In the privacy-unit
field such a number is read from its text exactly (the line is parsed again keeping those
numbers as decimals): a whole number is that integer, as the identity rule reads the same text
in CSV (``9007199254740993.0``, ``9.007199254740993e15`` and ``9007199254740993`` are one
person); a fraction, however close to a whole number, a whole number whose integer text would
be longer than :data:`~beam_dp.batching.hashing.MAX_NUMBER_CHARS` characters (``1e400``), and
any id on a line holding an exponent past 10**18 are no identifier (a bad record), decided
in time linear in the line. Integers are exact already (one longer than Python's limit on
integer text, 4300 digits, makes its line a bad record: not valid JSON). Other fields keep
``json``'s doubles: values are doubles in the pipeline, and this is the double a CSV reader
parses from the same text.
"""

from __future__ import annotations

import decimal
import json
import math
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv

from beam_dp.batching.columns import OnBadRecord
from beam_dp.batching.hashing import MAX_NUMBER_CHARS, canonical_id_text
from beam_dp.errors import BadRecordError
from beam_dp.io.framing import OVERSIZE, csv_header, csv_row_runs, jsonl_lines

__all__ = [
    "AVRO_MAX_BLOCK_BYTES",
    "CSV_MAX_HEADER_BYTES",
    "CSV_MAX_ROW_BYTES",
    "JSONL_MAX_LINE_BYTES",
    "ReadLimits",
    "csv_batches",
    "jsonl_rows",
    "parquet_batches",
]

CSV_MAX_HEADER_BYTES = 16 << 20
CSV_MAX_ROW_BYTES = 64 << 20
JSONL_MAX_LINE_BYTES = 64 << 20
AVRO_MAX_BLOCK_BYTES = 256 << 20
_MAX_LIMIT = 1 << 30  # pyarrow parses a run of CSV rows as one block, whose size is an int32
_CSV_READ_BYTES = 4 << 20  # how much of a CSV file is read (and parsed) at a time
_JSONL_READ_BYTES = 1 << 20
_JSON = json.JSONDecoder()
# a line whose privacy-unit id is written with a point or an exponent is read again with this
# one, which keeps such numbers as exact decimals (see jsonl_rows)
_JSON_EXACT = json.JSONDecoder(parse_float=decimal.Decimal)


# --- size limits --------------------------------------------------------------------------


def _size_text(size: int) -> str:
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} bytes"


@dataclass(frozen=True)
class ReadLimits:
    """The largest header, row, line and block the readers accept (see the module docstring).

    Attributes:
        csv_header_bytes: a CSV header row; over it the file cannot be read.
        csv_row_bytes: one CSV row (with its line break); over it the row is a bad record.
        jsonl_line_bytes: one JSON line (with its line break); over it the line is a bad
            record.
        avro_block_bytes: one Avro block, or one field of the Avro header; over it the file is
            undecodable from there.

    Each is a whole number of bytes between 1 and 1 GiB. A reader holds about one row, line or
    block of this size in memory at a time (plus its parsed form).
    """

    csv_header_bytes: int = CSV_MAX_HEADER_BYTES
    csv_row_bytes: int = CSV_MAX_ROW_BYTES
    jsonl_line_bytes: int = JSONL_MAX_LINE_BYTES
    avro_block_bytes: int = AVRO_MAX_BLOCK_BYTES

    def __post_init__(self) -> None:
        for name in ("csv_header_bytes", "csv_row_bytes", "jsonl_line_bytes", "avro_block_bytes"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 1 <= value <= _MAX_LIMIT
            ):
                raise ValueError(
                    f"'{name}' must be an integer number of bytes between 1 and 1 GiB; "
                    f"received {value!r}"
                )


def _limit_text(kind: str, size: int, constant: str, field: str) -> str:
    """``"longer than the CSV row limit of 64 MiB (CSV_MAX_ROW_BYTES; raise it with ...)"``."""
    return (
        f"longer than the {kind} limit of {_size_text(size)} ({constant}; raise it with "
        f"ReadExport(limits=ReadLimits({field}=...)))"
    )


# --- calling decoders without ever keeping their exceptions -------------------------------

_FAILED: Any = object()  # what _call returns when the decoder raised
_END: Any = object()  # the end of an iterator


def _call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)``, or ``_FAILED`` if it raised.

    The decoder's exception (whose message may quote the data) is dropped inside this frame,
    so no error raised later can carry it as its ``__context__``. Memory exhaustion is not a
    property of the file and propagates.
    """
    try:
        return function(*args, **kwargs)
    except MemoryError:
        raise
    except Exception:  # any decoder failure means "could not be decoded"
        pass
    return _FAILED


def _next(iterator: Iterator[Any]) -> Any:
    """The iterator's next item, ``_END`` at its end, ``_FAILED`` if decoding it failed."""
    return _call(next, iterator, _END)


# --- errors -----------------------------------------------------------------------------


def _missing_field_error(path: str, field: str, where: str | None = None) -> BadRecordError:
    if where is None:  # from the file's schema or header: every record lacks it
        return BadRecordError(f"{path}: field '{field}' is missing (rule: the field is required)")
    return BadRecordError(
        f"{path}: field '{field}' is missing on {where} (rule: the field is required; use "
        "on_bad_record='skip' to drop such records)"
    )


def _check_columns(path: str, present: Sequence[str], needed: Sequence[str]) -> None:
    for column in needed:
        if column not in present:
            raise _missing_field_error(path, column)


def _undecodable_error(
    path: str, fmt: str, where: str | None, reason: str | None = None
) -> BadRecordError:
    position = f" at {where}" if where else ""
    because = f": {reason}" if reason else ""
    return BadRecordError(
        f"{path}: could not be decoded as {fmt}{position}{because} (rule: every input file must "
        f"be a valid {fmt} file; use on_bad_record='skip' to skip such files)"
    )


def _oversize_record_error(path: str, where: str, limit_text: str) -> BadRecordError:
    return BadRecordError(
        f"{path}: {where} is {limit_text} (rule: every record must fit the reader's limits; use "
        "on_bad_record='skip' to drop such records)"
    )


class _FileState:
    """What went wrong while reading one file: public positions, limits and counts, never data.

    Attributes:
        failed: the file (or the rest of it) could not be decoded.
        where: the position of that failure, if known (``"line 12"``, ``"row group 3"``).
        reason: why, if it is a public rule (a size limit), for the error message.
        records_skipped: bad records skipped in this file (an exact count: not private).
    """

    def __init__(self) -> None:
        self.failed = False
        self.where: str | None = None
        self.reason: str | None = None
        self.records_skipped = 0

    def fail(self, where: str | None = None, reason: str | None = None) -> None:
        self.failed = True
        self.where = where
        if reason is not None:
            self.reason = reason


# --- row formats to Arrow batches ---------------------------------------------------------


def _mixed_text(value: Any, identifier: bool) -> str | None:
    """The text of one value of a column that mixes Python types (see the module docstring).

    It looks at the value alone. In an identifier column it is the value's canonical identity
    (None, a bad record, for what is no identifier: a float that is not a whole number, a
    boolean); in another column a number stays a parsable number (``repr`` of a float that is
    not a whole number, of ``inf`` or ``nan``) and a label keeps the text it would match.
    """
    if value is None:
        return None
    if isinstance(value, uuid.UUID):  # fastavro's reading of Avro's uuid strings
        return str(value)
    if identifier:
        return canonical_id_text(value)
    if isinstance(value, (float, decimal.Decimal)):
        text = canonical_id_text(value)  # whole numbers as ints, so labels match "42"
        if text is not None:
            return text
        return repr(value) if isinstance(value, float) else str(value)
    if isinstance(value, (bool, int, str, bytes)):
        return canonical_id_text(value)
    return None  # a list, a mapping, a date...: neither an identifier nor a number


def _column_array(values: list[Any], identifier: bool) -> pa.Array:
    kinds = {type(value) for value in values if value is not None}
    if not kinds:
        return pa.nulls(len(values))
    if len(kinds) == 1:
        (kind,) = kinds
        if kind is int:
            array = _call(pa.array, values, type=pa.int64())
            if array is not _FAILED:  # beyond int64: the canonical text of each value instead
                return array
        elif kind is float:
            return pa.array(values, type=pa.float64())
        elif kind is str:
            array = _call(pa.array, values, type=pa.string())
            if array is not _FAILED:  # else a lone surrogate (JSON escape \ud800): value by value
                return array
        elif kind is bytes:
            return pa.array(values, type=pa.binary())
        elif kind is bool:
            return pa.array(values, type=pa.bool_())
        elif kind is not uuid.UUID:
            array = _call(pa.array, values)
            if array is not _FAILED:
                return array
    return pa.array([_utf8(_mixed_text(value, identifier)) for value in values], type=pa.string())


def _utf8(text: str | None) -> str | None:
    """The text, or None (a bad record) if it cannot be UTF-8 (a lone surrogate)."""
    if text is None or text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return text


def _to_batch(chunk: dict[str, list[Any]], identifiers: Collection[str] = ()) -> pa.RecordBatch:
    """Arrow columns from Python values by the fixed rule of the module docstring.

    Args:
        chunk: values by column name.
        identifiers: the columns that hold privacy-unit identifiers.
    """
    return pa.RecordBatch.from_pydict(
        {name: _column_array(values, name in identifiers) for name, values in chunk.items()}
    )


def _chunked_rows(
    rows: Iterator[dict[str, Any]],
    columns: Sequence[str],
    batch_rows: int,
    identifiers: Collection[str] = (),
) -> Iterator[pa.RecordBatch]:
    chunk: dict[str, list[Any]] = {c: [] for c in columns}
    size = 0
    for row in rows:
        for c in columns:
            chunk[c].append(row.get(c))
        size += 1
        if size == batch_rows:
            yield _to_batch(chunk, identifiers)
            chunk = {c: [] for c in columns}
            size = 0
    if size:
        yield _to_batch(chunk, identifiers)


class _CsvRowHandler:
    """pyarrow's ``invalid_row_handler``: skips (and counts) or stops at a ragged row.

    It never looks at the row's text and never raises (pyarrow would print the exception).
    ``offset`` is the number of rows before the run being parsed (the header is row 1; empty
    lines are no rows), so that a row's number in the file is ``offset`` plus its number in
    the run.
    """

    def __init__(self, skip: bool):
        self.skip = skip
        self.skipped = 0
        self.offset = 1
        self.error_line: int | None = None
        self.errored = False

    def __call__(self, row: Any) -> str:
        if self.skip:
            self.skipped += 1
            return "skip"
        self.errored = True
        number = getattr(row, "number", None)
        self.error_line = self.offset + number if isinstance(number, int) and number > 0 else None
        return "error"


# --- one bad record: fail, or skip and count ----------------------------------------------


def _bad_record(error: BadRecordError, state: _FileState, on_bad_record: OnBadRecord) -> None:
    if on_bad_record == "fail":
        raise error
    state.records_skipped += 1


# --- the formats --------------------------------------------------------------------------


def parquet_batches(
    path: str, handle: Any, state: _FileState, columns: list[str], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """A Parquet file's ``columns``, row group by row group (the others are never decoded)."""
    import pyarrow.parquet as pq

    parquet = _call(pq.ParquetFile, handle)
    schema = _FAILED if parquet is _FAILED else _call(lambda: parquet.schema_arrow)
    if schema is _FAILED:
        state.fail()
        return
    _check_columns(path, schema.names, columns)
    for group in range(parquet.num_row_groups):
        batches = _call(
            parquet.iter_batches,
            batch_size=batch_rows,
            row_groups=[group],
            columns=columns,
        )
        while True:
            batch = _FAILED if batches is _FAILED else _next(batches)
            if batch is _FAILED:
                state.fail(f"row group {group}")
                return
            if batch is _END:
                break
            yield batch


def _csv_names(header: bytes) -> list[str]:
    """The field names of a CSV header row (parsed alone, from memory)."""
    table = pa_csv.read_csv(
        pa.BufferReader(header),
        read_options=pa_csv.ReadOptions(use_threads=False, block_size=len(header) + 1),
        parse_options=pa_csv.ParseOptions(newlines_in_values=True),
    )
    return list(table.schema.names)


def _csv_run(run: bytes, names: list[str], columns: list[str], rows: _CsvRowHandler) -> pa.Table:
    """The ``columns`` of a run of whole CSV rows (no header), as text, parsed from memory."""
    return pa_csv.read_csv(
        pa.BufferReader(run),
        # one block, one thread: the run holds whole rows, and pyarrow then knows each ragged
        # row's number
        read_options=pa_csv.ReadOptions(
            column_names=names, use_threads=False, block_size=len(run) + 1
        ),
        parse_options=pa_csv.ParseOptions(newlines_in_values=True, invalid_row_handler=rows),
        convert_options=pa_csv.ConvertOptions(
            include_columns=columns,
            column_types={c: pa.string() for c in columns},
        ),
    )


def csv_batches(
    path: str,
    handle: Any,
    state: _FileState,
    columns: list[str],
    on_bad_record: OnBadRecord,
    limits: ReadLimits | None = None,
    read_bytes: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """A CSV file's ``columns`` as text (numbers are parsed entry by entry later).

    The file is read once, in order, ``read_bytes`` at a time, and cut into runs of whole rows
    (:func:`beam_dp.io.framing.csv_row_runs`) that pyarrow parses from memory.
    """
    limits = limits or ReadLimits()
    block = min(read_bytes or _CSV_READ_BYTES, limits.csv_row_bytes)
    header = _call(csv_header, handle.read, block, limits.csv_header_bytes)
    if header is _FAILED or header.row is None:
        if header is not _FAILED and header.over_limit:
            state.reason = "its header is " + _limit_text(
                "CSV header", limits.csv_header_bytes, "CSV_MAX_HEADER_BYTES", "csv_header_bytes"
            )
        state.fail()
        return
    names = _call(_csv_names, header.row)
    if names is _FAILED:
        state.fail()
        return
    _check_columns(path, names, columns)
    rows = _CsvRowHandler(skip=on_bad_record == "skip")
    runs = csv_row_runs(handle.read, block, limits.csv_row_bytes, header.rest)
    while True:
        run = _next(runs)
        if run is _FAILED:  # reading the file failed
            state.fail()
            return
        if run is _END:
            return
        if run is OVERSIZE:
            rows.offset += 1
            too_long = _limit_text(
                "CSV row", limits.csv_row_bytes, "CSV_MAX_ROW_BYTES", "csv_row_bytes"
            )
            _bad_record(
                _oversize_record_error(path, f"line {rows.offset}", too_long),
                state,
                on_bad_record,
            )
            continue
        skipped = rows.skipped
        table = _call(_csv_run, run, names, columns, rows)
        state.records_skipped += rows.skipped - skipped
        if rows.errored:
            where = f"line {rows.error_line}" if rows.error_line else "a row"
            raise BadRecordError(
                f"{path}: {where} does not have one entry per header field (rule: every "
                "CSV row has the header's fields; use on_bad_record='skip' to drop such "
                "records)"
            )
        if table is _FAILED:
            state.fail()
            return
        rows.offset += table.num_rows + rows.skipped - skipped
        yield from table.to_batches()


def _exact_id(number: decimal.Decimal) -> int | float:
    """A JSON number with a point or an exponent in the privacy-unit field, read exactly.

    A whole number whose integer text has at most :data:`MAX_NUMBER_CHARS` characters is
    that integer (``9007199254740993.0`` and ``9.007199254740993e15`` are 9007199254740993,
    as the identity rule reads the same text in CSV); any other number (a fraction, however
    close to a whole number; a whole number past the limit, ``1e400``) is NaN: no identifier,
    a bad record. The length is checked from the exponent before any integer is built, so
    the work is bounded by the token's length.
    """
    if number.is_zero():
        return 0
    if number.is_signed() + number.adjusted() + 1 > MAX_NUMBER_CHARS:
        return math.nan  # its integer text would be too long (or it is no whole number)
    if number.adjusted() < 0 or number != number.to_integral_value():
        return math.nan
    return int(number)


def _read_ids_exactly(text: str, row: dict[str, Any], identifiers: Collection[str]) -> None:
    """Put in ``row`` the exact value of each privacy-unit id written with a point or an
    exponent (``json`` gave a double): the line is parsed again, keeping such numbers as
    exact decimals, and each is read by :func:`_exact_id`. If that parse fails (an exponent
    past 10**18 anywhere in the line) those ids are NaN: no identifier, a bad record."""
    rounded = [c for c in identifiers if type(row.get(c)) is float]
    if not rounded:
        return
    try:
        exact = _JSON_EXACT.decode(text)
    except (ValueError, ArithmeticError, RecursionError):
        exact = {}
    for column in rounded:
        value = exact.get(column, math.nan)
        row[column] = _exact_id(value) if type(value) is decimal.Decimal else value


def jsonl_rows(
    path: str,
    handle: Any,
    state: _FileState,
    columns: list[str],
    on_bad_record: OnBadRecord,
    limits: ReadLimits | None = None,
    read_bytes: int | None = None,
    identifiers: Collection[str] = (),
) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON-lines file that have every one of ``columns``.

    The file is read once, in order, ``read_bytes`` at a time, and cut into lines by
    :func:`beam_dp.io.framing.jsonl_lines`. Numbers are what ``json`` gives (an int, or
    the double nearest a number with a point or an exponent), except in the ``identifiers``
    fields (privacy-unit ids), where a number with a point or an exponent is read exactly
    (:func:`_exact_id`): ``9007199254740993.0`` is the person ``9007199254740993``, as the
    same text in CSV, not the double ``9007199254740992.0``.
    """
    limits = limits or ReadLimits()
    limit = limits.jsonl_line_bytes
    lines = jsonl_lines(handle.read, min(read_bytes or _JSONL_READ_BYTES, limit), limit)
    number = 0
    while True:
        raw = _next(lines)
        number += 1
        if raw is _FAILED:
            state.fail(f"line {number}")
            return
        if raw is _END:
            return
        if raw is OVERSIZE:
            too_long = _limit_text("JSON line", limit, "JSONL_MAX_LINE_BYTES", "jsonl_line_bytes")
            _bad_record(
                _oversize_record_error(path, f"line {number}", too_long), state, on_bad_record
            )
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is None:  # text that is not UTF-8: the file is not JSON lines
            state.fail(f"line {number}")
            return
        if number == 1 and text.startswith("\ufeff"):
            text = text[1:]
        if not text.strip():
            continue
        try:
            value = _JSON.decode(text)
        except (ValueError, RecursionError):
            value = _FAILED
        if value is _FAILED:
            _bad_record(
                BadRecordError(
                    f"{path}: line {number} is not valid JSON (rule: one JSON object per "
                    "line; use on_bad_record='skip' to drop such records)"
                ),
                state,
                on_bad_record,
            )
            continue
        if not isinstance(value, dict):
            _bad_record(
                BadRecordError(
                    f"{path}: line {number} is not a JSON object (rule: one JSON object per "
                    "line; use on_bad_record='skip' to drop such records)"
                ),
                state,
                on_bad_record,
            )
            continue
        missing = next((c for c in columns if c not in value), None)
        if missing is not None:
            _bad_record(_missing_field_error(path, missing, f"line {number}"), state, on_bad_record)
            continue
        _read_ids_exactly(text, value, identifiers)
        yield value
