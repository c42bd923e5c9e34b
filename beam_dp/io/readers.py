"""Read data-warehouse exports into (file name, pyarrow RecordBatch) pairs.

Exports come as glob patterns over sharded files (``export-*.avro``), in one of four formats,
each read per file, streaming (memory does not grow with the file's size), files spread over
workers:

* **parquet**: pyarrow's ``ParquetFile`` over the Beam filesystem, row group by row group,
  only the needed columns (the others are never decoded);
* **avro**: fastavro, records gathered into batches of ``batch_rows``;
* **csv**: pyarrow's streaming CSV reader; every needed column is read as text and numbers are
  parsed entry by entry later, so one bad entry is one bad record;
* **jsonl**: one JSON object per line, gathered into batches of ``batch_rows``.

The file name travels with each batch so that a bad-input error can name the file, the field
and the rule (never a value). A pattern that matches no file is an error; files with no records
are a valid, empty input; a file whose schema or header lacks a needed field is an error with
either ``on_bad_record`` (most often a misspelt field name: it must not turn into an empty
input).

**Bad records.** A record that cannot be read (a CSV row with more or fewer entries than the
header, a JSON line that does not parse, is not an object or lacks a needed field) is dropped
with ``on_bad_record="skip"``, and every good record of its file is kept; with ``"fail"`` it
ends the job with a :class:`~beam_dp.errors.BadRecordError` naming the file, the line and the
rule. Rules on values (a null id, a value that is not a finite number) are the encoder's
(:func:`beam_dp.batching.encode_batch`): readers deliver values as they are, ±inf as ±inf
(text ``inf`` in CSV), nothing clamped or dropped.

**Undecodable files.** A file that cannot be decoded (not the format it claims, truncated
Avro, a corrupt Parquet page, text that is not UTF-8 in CSV or JSON lines) is skipped with
``"skip"`` and ends the job with ``"fail"``, the same way in every format. Reading streams, so
a failure can come after part of the file was delivered: **the records decoded before the
failure are kept and the rest of the file is skipped**, in every format (a whole Parquet row
group or CSV block is the smallest part those decoders deliver; Avro and JSON lines deliver
record by record).

**Messages and telemetry.** Every error is built here from the file name, the position (a
line, a row group), the field and the rule, and never chains a decoder's own message (which may
quote the data). Skipping an undecodable file is logged with the file's name (public). How many
records or files were skipped is an exact data-dependent count: it goes to the Beam metrics
``bad_records_skipped`` and ``undecodable_files_skipped`` (and a log line) only when
:func:`beam_dp.telemetry.enable_exact_counts` was called before the pipeline was built.

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
import io
import json
import logging
import os
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.csv as pa_csv
from apache_beam.io import fileio
from apache_beam.metrics.metric import Metrics
from apache_beam.pvalue import PBegin, PCollection

from beam_dp import telemetry
from beam_dp.batching.columns import OnBadRecord
from beam_dp.batching.hashing import canonical_id_text
from beam_dp.errors import BadRecordError
from beam_dp.io.avro import (
    FAILED,
    AvroHeader,
    decode_blocks,
    iter_blocks,
    native_reader_supports,
    read_header,
)

__all__ = ["FORMATS", "ReadExport", "avro_ranges", "detect_format"]

FORMATS = ("avro", "parquet", "csv", "jsonl")
_SUFFIXES = {
    ".avro": "avro",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".tsv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
}
_COMPRESSION = (".gz", ".bz2", ".zst", ".deflate")
_LOG = logging.getLogger(__name__)
_NAMESPACE = "beam_dp"
_CSV_HEADER_BLOCK = 1 << 16
_CSV_BLOCK = 1 << 22
_PARQUET_BATCH_ROWS = 1 << 20  # Parquet's usual row group: one batch per group
_ROW_BATCH_ROWS = 65_536  # formats decoded record by record in Python
_AVRO_SPLIT_BYTES = 64 << 20
_WHOLE_FILE = 1 << 62  # a range end past any file's last block


def detect_format(file_pattern: str) -> str:
    """The export format implied by the pattern's suffix (compression suffixes ignored)."""
    name = file_pattern.lower()
    for suffix in _COMPRESSION:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    for suffix, fmt in _SUFFIXES.items():
        if name.endswith(suffix):
            return fmt
    raise ValueError(
        f"cannot tell the format of '{file_pattern}' from its suffix; pass input_format, one "
        f"of {list(FORMATS)}"
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


# --- the reading DoFn ---------------------------------------------------------------------


class _ReadFileFn(beam.DoFn):
    def __init__(
        self,
        input_format: str,
        columns: Sequence[str],
        batch_rows: int,
        on_bad_record: OnBadRecord,
        identifiers: Collection[str] = (),
    ):
        super().__init__()
        self._format = input_format
        self._columns = list(columns)
        self._identifiers = frozenset(identifiers)
        self._batch_rows = batch_rows
        self._on_bad_record = on_bad_record
        self._exact_counts = telemetry.exact_counts_enabled()
        if self._exact_counts:
            self._records_skipped = Metrics.counter(_NAMESPACE, "bad_records_skipped")
            self._files_skipped = Metrics.counter(_NAMESPACE, "undecodable_files_skipped")

    # one bad record: fail, or skip and count
    def _bad_record(self, error: BadRecordError, state: _FileState) -> None:
        if self._on_bad_record == "fail":
            raise error
        state.records_skipped += 1

    def _batches(self, path: str, handle: Any, state: _FileState) -> Iterator[pa.RecordBatch]:
        if self._format == "parquet":
            yield from self._parquet(path, handle, state)
        elif self._format == "csv":
            yield from self._csv(path, handle, state)
        elif self._format == "avro":
            yield from self._avro(path, handle, state)
        elif self._format == "jsonl":
            yield from _chunked_rows(self._jsonl_rows(path, handle, state), *self._chunking)
        else:  # pragma: no cover - validated at construction
            raise ValueError(self._format)

    @property
    def _chunking(self) -> tuple[list[str], int, frozenset[str]]:
        return self._columns, self._batch_rows, self._identifiers

    def _parquet(self, path: str, handle: Any, state: _FileState) -> Iterator[pa.RecordBatch]:
        import pyarrow.parquet as pq

        parquet = _call(pq.ParquetFile, handle)
        schema = _FAILED if parquet is _FAILED else _call(lambda: parquet.schema_arrow)
        if schema is _FAILED:
            state.fail()
            return
        _check_columns(path, schema.names, self._columns)
        for group in range(parquet.num_row_groups):
            batches = _call(
                parquet.iter_batches,
                batch_size=self._batch_rows,
                row_groups=[group],
                columns=self._columns,
            )
            while True:
                batch = _FAILED if batches is _FAILED else _next(batches)
                if batch is _FAILED:
                    state.fail(f"row group {group}")
                    return
                if batch is _END:
                    break
                yield batch

    def _csv(self, path: str, handle: Any, state: _FileState) -> Iterator[pa.RecordBatch]:
        text_columns = pa_csv.ConvertOptions(column_types={c: pa.string() for c in self._columns})
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
        _check_columns(path, header.schema.names, self._columns)
        rows = _CsvRowHandler(skip=self._on_bad_record == "skip")
        reader = _call(
            pa_csv.open_csv,
            handle,
            # one thread: pyarrow then knows each ragged row's line number
            read_options=pa_csv.ReadOptions(block_size=_CSV_BLOCK, use_threads=False),
            parse_options=pa_csv.ParseOptions(invalid_row_handler=rows),
            convert_options=pa_csv.ConvertOptions(
                include_columns=self._columns,
                column_types={c: pa.string() for c in self._columns},
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

    def _avro(
        self, path: str, handle: Any, state: _FileState, start: int = 0, end: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The blocks of ``path`` that begin in ``[start, end)``, decoded natively if it can.

        A file the native reader cannot decode (its codec, a map or a union other than
        ``[null, T]`` anywhere in its schema) is read whole with fastavro by the range that
        starts the file, with one log line naming the file (never a value).
        """
        header = _call(read_header, handle)
        if header is _FAILED or header is None:
            if start == 0:
                state.fail()
            return
        _check_columns(path, header.field_names(), self._columns)
        if not native_reader_supports(header):
            if start == 0:
                _LOG.info(
                    "%s: read with fastavro (the native Avro reader does not decode its codec "
                    "%r or a type in its schema)",
                    path,
                    header.codec,
                )
                if _call(handle.seek, 0) is _FAILED:
                    state.fail()
                    return
                yield from _chunked_rows(self._avro_rows(path, handle, state), *self._chunking)
            return
        pending: list[bytes] = []
        count = 0
        for block in iter_blocks(handle, header, start, end):
            if block is FAILED:
                yield from self._avro_decode(path, header, pending, state)
                state.fail()
                return
            pending.append(block[1])
            count += block[0]
            if count >= self._batch_rows:
                yield from self._avro_decode(path, header, pending, state)
                if state.failed:
                    return
                pending, count = [], 0
        if pending:
            yield from self._avro_decode(path, header, pending, state)

    def _avro_decode(
        self, path: str, header: AvroHeader, blocks: list[bytes], state: _FileState
    ) -> Iterator[pa.RecordBatch]:
        """Decode a run of blocks natively; if that fails, with fastavro up to the failure."""
        if not blocks:
            return
        table = decode_blocks(header, blocks, self._columns)
        if table is not FAILED:
            yield from table.to_batches(max_chunksize=self._batch_rows)
            return
        # keep the records decoded before the failure, as the fastavro path does
        run = io.BytesIO(b"".join([header.raw, *blocks]))
        yield from _chunked_rows(self._avro_rows(path, run, state), *self._chunking)

    def _avro_rows(self, path: str, handle: Any, state: _FileState) -> Iterator[dict[str, Any]]:
        import fastavro

        reader = _call(fastavro.reader, handle)
        if reader is _FAILED:
            state.fail()
            return
        schema = reader.writer_schema
        fields = schema.get("fields", []) if isinstance(schema, dict) else []
        names = [str(f.get("name")) for f in fields if isinstance(f, dict)]
        _check_columns(path, names, self._columns)
        while True:
            record = _next(reader)
            if record is _FAILED:
                state.fail()
                return
            if record is _END:
                return
            yield record

    def _jsonl_rows(self, path: str, handle: Any, state: _FileState) -> Iterator[dict[str, Any]]:
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
                self._bad_record(
                    BadRecordError(
                        f"{path}: line {number} is not valid JSON (rule: one JSON object per "
                        "line; use on_bad_record='skip' to drop such records)"
                    ),
                    state,
                )
                continue
            if not isinstance(value, dict):
                self._bad_record(
                    BadRecordError(
                        f"{path}: line {number} is not a JSON object (rule: one JSON object per "
                        "line; use on_bad_record='skip' to drop such records)"
                    ),
                    state,
                )
                continue
            missing = next((c for c in self._columns if c not in value), None)
            if missing is not None:
                self._bad_record(_missing_field_error(path, missing, f"line {number}"), state)
                continue
            yield value

    def process(
        self, element: fileio.ReadableFile | tuple[Any, int, int]
    ) -> Iterator[tuple[str, pa.RecordBatch]]:
        """Read a whole file, or (Avro) the blocks beginning in a ``(metadata, start, end)``
        byte range of one."""
        start, end = 0, None
        if isinstance(element, tuple):
            metadata, start, end = element
            readable = fileio.ReadableFile(metadata)
        else:
            readable = element
        path = readable.metadata.path
        state = _FileState()
        handle = _call(readable.open)
        if handle is _FAILED:
            state.fail()
        else:
            unexpected = False
            try:
                if isinstance(element, tuple):
                    batches = self._avro(path, handle, state, start, end)
                else:
                    batches = self._batches(path, handle, state)
                for batch in batches:
                    if batch.num_rows:
                        yield path, batch
            except BadRecordError:
                raise
            except MemoryError:
                raise
            except Exception:  # a decoder failure outside _call: same rule
                unexpected = True
            finally:
                _call(handle.close)
            if unexpected:  # raised below, outside the handler: no decoder message as context
                state.fail(state.where)
        self._report(path, state)

    def _report(self, path: str, state: _FileState) -> None:
        if state.failed and self._on_bad_record == "fail":
            raise _undecodable_error(path, self._format, state.where)
        if state.failed:
            _LOG.warning(
                "skipped the rest of an undecodable %s file (%s); records decoded before the "
                "failure are kept",
                self._format,
                path,
            )
        if not self._exact_counts:
            return
        if state.failed:
            self._files_skipped.inc()
        if state.records_skipped:
            self._records_skipped.inc(state.records_skipped)
            _LOG.info(
                "%s: skipped %d bad record(s) (exact count, not private)",
                path,
                state.records_skipped,
            )


def avro_ranges(metadata: Any, split_bytes: int) -> Iterator[tuple[Any, int, int]]:
    """``(metadata, start, end)`` byte ranges of about ``split_bytes`` covering one file.

    Each range reads the Avro blocks that begin inside it; a compressed file (``.gz``...) is
    one range, as it cannot be read from the middle.
    """
    size = int(getattr(metadata, "size_in_bytes", 0) or 0)
    if size <= split_bytes or metadata.path.lower().endswith(_COMPRESSION):
        yield metadata, 0, _WHOLE_FILE
        return
    for start in range(0, size, split_bytes):
        yield metadata, start, min(start + split_bytes, size)


class ReadExport(beam.PTransform):
    """Read an export (a file pattern) as ``(file name, RecordBatch)`` pairs.

    See the module docstring for the bad-record and undecodable-file rules.

    Args:
        file_pattern: a glob over the export's files (local or any Beam filesystem).
        input_format: ``avro``, ``parquet``, ``csv`` or ``jsonl``; from the suffix if None.
        columns: the fields to read (the others are never decoded into batches).
        batch_rows: rows per batch (at most) for Parquet, Avro and JSON lines; by default a
            Parquet row group (up to 2^20 rows) and 65,536 rows for the other formats (fewer,
            larger batches cost less in Beam's data plane and in the shuffle).
        avro_split_bytes: Avro files larger than this are read in byte ranges of this size
            by different workers, split at block (sync marker) boundaries.
        on_bad_record: ``fail`` or ``skip`` a bad record or an undecodable file.
        unit_column: the privacy-unit field, if any (read even if not in ``columns``). In an
            Avro or JSON-lines batch that mixes types, its values become their canonical
            identity and a value that is no identifier (``42.5``, ``true``) becomes null, a bad
            record, as it is in a typed column; other fields keep numbers parsable.

    **Privacy**: no record's value reaches an error, a log line or a metric; exact counts of
    skipped records and files are reported only behind
    :func:`beam_dp.telemetry.enable_exact_counts` (read when the transform is built).
    """

    def __init__(
        self,
        file_pattern: str,
        *,
        columns: Sequence[str],
        input_format: str | None = None,
        batch_rows: int | None = None,
        on_bad_record: OnBadRecord = "fail",
        unit_column: str | None = None,
        avro_split_bytes: int = _AVRO_SPLIT_BYTES,
    ):
        super().__init__()
        fmt = input_format if input_format is not None else detect_format(file_pattern)
        if fmt not in FORMATS:
            raise ValueError(f"'input_format' must be one of {list(FORMATS)}; received {fmt!r}")
        if on_bad_record not in ("fail", "skip"):
            raise ValueError(
                f"'on_bad_record' must be 'fail' or 'skip'; received {on_bad_record!r}"
            )
        if not columns:
            raise ValueError("'columns' must name at least one field to read")
        if batch_rows is None:
            batch_rows = _PARQUET_BATCH_ROWS if fmt == "parquet" else _ROW_BATCH_ROWS
        if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
            raise ValueError(f"'batch_rows' must be an integer >= 1; received {batch_rows!r}")
        if (
            isinstance(avro_split_bytes, bool)
            or not isinstance(avro_split_bytes, int)
            or avro_split_bytes < 1
        ):
            raise ValueError(
                f"'avro_split_bytes' must be an integer >= 1; received {avro_split_bytes!r}"
            )
        self._split_bytes = avro_split_bytes
        # Beam's local filesystem matches absolute paths only; remote patterns have a scheme.
        if "://" not in file_pattern and not os.path.isabs(file_pattern):
            file_pattern = os.path.abspath(file_pattern)
        self._pattern = file_pattern
        self._format = fmt
        if unit_column is not None and (not isinstance(unit_column, str) or not unit_column):
            raise ValueError(
                f"'unit_column' must be a field name or None; received {unit_column!r}"
            )
        self._columns = list(dict.fromkeys([*([unit_column] if unit_column else []), *columns]))
        self._batch_rows = batch_rows
        self._on_bad_record = on_bad_record
        self._read_fn = _ReadFileFn(
            fmt,
            self._columns,
            batch_rows,
            on_bad_record,
            identifiers=[unit_column] if unit_column else [],
        )

    def expand(self, pbegin: PBegin) -> PCollection:
        files = pbegin | "MatchFiles" >> fileio.MatchFiles(
            self._pattern, empty_match_treatment=fileio.EmptyMatchTreatment.DISALLOW
        )
        if self._format == "avro":
            return (
                files
                | "SplitAvro" >> beam.FlatMap(avro_ranges, self._split_bytes)
                # spread the ranges over workers (matching runs on one)
                | "SpreadFiles" >> beam.Reshuffle()
                | "Decode" >> beam.ParDo(self._read_fn)
            )
        return (
            files
            # spread the files over workers (matching runs on one)
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadMatches" >> fileio.ReadMatches()
            | "Decode" >> beam.ParDo(self._read_fn)
        )

    def display_data(self) -> dict[str, Any]:
        return {
            "file_pattern": self._pattern,
            "format": self._format,
            "columns": ",".join(self._columns),
        }
