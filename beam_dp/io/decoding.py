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
CSV block is the smallest part those decoders deliver; JSON lines deliver record by record).
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
"""

from __future__ import annotations

import decimal
import json
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv

from beam_dp.batching.columns import OnBadRecord
from beam_dp.batching.hashing import canonical_id_text
from beam_dp.errors import BadRecordError

__all__ = ["csv_batches", "jsonl_rows", "parquet_batches"]

_CSV_HEADER_BLOCK = 1 << 16
_CSV_BLOCK = 1 << 22


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


def _undecodable_error(path: str, fmt: str, where: str | None) -> BadRecordError:
    position = f" at {where}" if where else ""
    return BadRecordError(
        f"{path}: could not be decoded as {fmt}{position} (rule: every input file must be a "
        f"valid {fmt} file; use on_bad_record='skip' to skip such files)"
    )


class _FileState:
    """What went wrong while reading one file: public positions and counts, never data."""

    def __init__(self) -> None:
        self.failed = False
        self.where: str | None = None
        self.records_skipped = 0

    def fail(self, where: str | None = None) -> None:
        self.failed = True
        self.where = where


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
    """

    def __init__(self, skip: bool):
        self.skip = skip
        self.skipped = 0
        self.error_line: int | None = None
        self.errored = False

    def __call__(self, row: Any) -> str:
        if self.skip:
            self.skipped += 1
            return "skip"
        self.errored = True
        number = getattr(row, "number", None)
        self.error_line = number if isinstance(number, int) and number > 0 else None
        return "error"


def _skip_all_rows(row: Any) -> str:
    return "skip"


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


def csv_batches(
    path: str, handle: Any, state: _FileState, columns: list[str], on_bad_record: OnBadRecord
) -> Iterator[pa.RecordBatch]:
    """A CSV file's ``columns`` as text (numbers are parsed entry by entry later)."""
    text_columns = pa_csv.ConvertOptions(column_types={c: pa.string() for c in columns})
    header = _call(
        pa_csv.open_csv,
        handle,
        read_options=pa_csv.ReadOptions(block_size=_CSV_HEADER_BLOCK, use_threads=False),
        parse_options=pa_csv.ParseOptions(invalid_row_handler=_skip_all_rows),
        convert_options=text_columns,
    )
    if header is _FAILED or _call(handle.seek, 0) is _FAILED:
        state.fail()
        return
    _check_columns(path, header.schema.names, columns)
    rows = _CsvRowHandler(skip=on_bad_record == "skip")
    reader = _call(
        pa_csv.open_csv,
        handle,
        # one thread: pyarrow then knows each ragged row's line number
        read_options=pa_csv.ReadOptions(block_size=_CSV_BLOCK, use_threads=False),
        parse_options=pa_csv.ParseOptions(invalid_row_handler=rows),
        convert_options=pa_csv.ConvertOptions(
            include_columns=columns,
            column_types={c: pa.string() for c in columns},
        ),
    )
    while True:
        batch = _FAILED if reader is _FAILED else _next(reader)
        state.records_skipped = rows.skipped
        if rows.errored:
            where = f"line {rows.error_line}" if rows.error_line else "a row"
            raise BadRecordError(
                f"{path}: {where} does not have one entry per header field (rule: every "
                "CSV row has the header's fields; use on_bad_record='skip' to drop such "
                "records)"
            )
        if batch is _FAILED:
            state.fail()
            return
        if batch is _END:
            return
        yield batch


def jsonl_rows(
    path: str, handle: Any, state: _FileState, columns: list[str], on_bad_record: OnBadRecord
) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON-lines file that have every one of ``columns``."""
    readline = handle.readline
    number = 0
    while True:
        raw = _call(readline)
        number += 1
        if raw is _FAILED:
            state.fail(f"line {number}")
            return
        if not raw:
            return
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
            value = json.loads(text)
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
        yield value
