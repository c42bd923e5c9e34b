"""Read data-warehouse exports into (file name, pyarrow RecordBatch) pairs.

Exports come as glob patterns over sharded files (``export-*.avro``), or a list of them, in
four formats, each file read in the format its suffix names (an export may mix them: Parquet
and CSV shards of one table; ``input_format`` is the format of files whose suffix names none),
streaming (memory does not grow with the file's size), files spread over workers:

* **parquet**: pyarrow's ``ParquetFile`` over the Beam filesystem, row group by row group,
  only the needed columns (the others are never decoded);
* **avro**: fastavro, records gathered into batches of ``batch_rows``;
* **csv**: read in one pass, cut into runs of whole rows (quote-aware) and parsed by pyarrow
  from memory; every needed column is read as text and numbers are parsed entry by entry
  later, so one bad entry is one bad record;
* **jsonl**: one JSON object per line, gathered into batches of ``batch_rows``.

Each file (each Avro byte range) is read through its own handle, in order, by one decoder: the
same file gives the same records on every run, whatever its size.

The file name travels with each batch so that a bad-input error can name the file, the field
and the rule (never a value). A pattern that matches no file is an error; files with no records
are a valid, empty input; a file whose schema or header lacks a needed field is an error with
either ``on_bad_record`` (most often a misspelt field name: it must not turn into an empty
input).

**Bad records.** A record that cannot be read (a CSV row with more or fewer entries than the
header, a JSON line that does not parse, is not an object or lacks a needed field, a CSV row
or JSON line over its size limit, :class:`~beam_dp.io.decoding.ReadLimits`) is dropped
with ``on_bad_record="skip"``, and every good record of its file is kept; with ``"fail"`` it
ends the job with a :class:`~beam_dp.errors.BadRecordError` naming the file, the line and the
rule. Rules on values (a null id, a value that is not a finite number) are the encoder's
(:func:`beam_dp.batching.encode_batch`): readers deliver values as they are, ±inf as ±inf
(text ``inf`` in CSV), nothing clamped or dropped.

**Undecodable files.** A file that cannot be decoded (not the format it claims, truncated
Avro, a corrupt Parquet page, text that is not UTF-8 in CSV or JSON lines) is skipped with
``"skip"`` and ends the job with ``"fail"``, the same way in every format; so is a CSV file
whose header, or an Avro file one of whose blocks, is over its size limit. Reading streams, so
a failure can come after part of the file was delivered: **the records decoded before the
failure are kept and the rest of the file is skipped**, in every format (a whole Parquet row
group or run of CSV rows is the smallest part those decoders deliver; Avro and JSON lines
deliver record by record). With ``report_skipped_files=True``, each file skipped in whole or
in part under ``"skip"`` is also reported in the output, as a :class:`SkippedFile` next to the
batches (one per file, or per Avro byte range of it).

**Messages and telemetry.** Every error is built here from the file name, the position (a
line, a row group), the field and the rule, and never chains a decoder's own message (which may
quote the data). Skipping an undecodable file is logged with the file's name (public). How many
records or files were skipped is an exact data-dependent count: it goes to the Beam metrics
``bad_records_skipped`` and ``undecodable_files_skipped`` (and a log line) only when
:func:`beam_dp.telemetry.enable_exact_counts` was called before the pipeline was built.

**Identity across batches.** Avro (read with fastavro) and JSON lines build Arrow columns from
Python values by a fixed rule that looks at each value alone, so no record's identity depends
on the other records of its batch: see :mod:`beam_dp.io.decoding`, which also holds the
Parquet, CSV and JSON-lines decoders.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.coders import VarIntCoder
from apache_beam.io import fileio
from apache_beam.metrics.metric import Metrics
from apache_beam.pvalue import PBegin, PCollection
from apache_beam.runners.portability.flink_runner import FlinkRunner
from apache_beam.transforms.userstate import BagStateSpec

from beam_dp import telemetry
from beam_dp.batching.columns import OnBadRecord
from beam_dp.errors import BadRecordError
from beam_dp.io.avro import (
    FAILED,
    AvroHeader,
    decode_blocks,
    iter_blocks,
    native_reader_supports,
    read_header,
)
from beam_dp.io.decoding import (
    _END,
    _FAILED,
    ReadLimits,
    _call,
    _check_columns,
    _chunked_rows,
    _FileState,
    _limit_text,
    _next,
    _undecodable_error,
    csv_batches,
    jsonl_rows,
    parquet_batches,
)
from beam_dp.io.watch import WatchFiles, watches_in_process

__all__ = [
    "FORMATS",
    "ReadExport",
    "SkippedFile",
    "avro_ranges",
    "detect_format",
    "file_format",
]


@dataclass(frozen=True)
class SkippedFile:
    """A file skipped in whole or in part as undecodable, with ``on_bad_record="skip"``.

    :class:`ReadExport` emits one per skipped file (per skipped Avro byte range: the same file
    may come more than once) when built with ``report_skipped_files=True``. A file's name is
    public; whether it was skipped depends on its contents, as the log line naming it does.

    Attributes:
        path: the file's name, as matched.
    """

    path: str


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
_PARQUET_BATCH_ROWS = 1 << 20  # Parquet's usual row group: one batch per group
_ROW_BATCH_ROWS = 65_536  # formats decoded record by record in Python
_AVRO_SPLIT_BYTES = 64 << 20
_WHOLE_FILE = 1 << 62  # a range end past any file's last block


def _suffix_format(name: str) -> str | None:
    """The format a name's suffix names (compression suffixes ignored), or None."""
    name = name.lower()
    for suffix in _COMPRESSION:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    for suffix, fmt in _SUFFIXES.items():
        if name.endswith(suffix):
            return fmt
    return None


def detect_format(file_pattern: str) -> str:
    """The export format implied by the pattern's suffix (compression suffixes ignored)."""
    fmt = _suffix_format(file_pattern)
    if fmt is not None:
        return fmt
    raise ValueError(
        f"cannot tell the format of '{file_pattern}' from its suffix; pass input_format, one "
        f"of {list(FORMATS)}"
    )


def file_format(path: str, input_format: str | None = None) -> str:
    """The format one file is read in: its suffix's, else ``input_format``.

    An export may mix formats (Parquet and CSV shards of one table): each file is read in the
    format its name says (``.parquet``, ``.avro``, ``.csv``, ``.jsonl``... and those with
    ``.gz``...). ``input_format`` is the format of the files whose suffix names none.

    Raises:
        ValueError: an ``input_format`` that is not one of :data:`FORMATS`, or none given for
            a file whose suffix names no format.
    """
    if input_format is not None and input_format not in FORMATS:
        raise ValueError(
            f"'input_format' must be one of {list(FORMATS)}; received {input_format!r}"
        )
    fmt = _suffix_format(path)
    if fmt is not None:
        return fmt
    if input_format is not None:
        return input_format
    raise ValueError(
        f"cannot tell the format of '{path}' from its suffix; pass input_format, one of "
        f"{list(FORMATS)} (it applies to the files whose suffix names no format)"
    )


# --- the reading DoFn ---------------------------------------------------------------------


class _CappedReads:
    """A binary handle on which a read of more than ``limit`` bytes finds the end of the file.

    For the Avro readers: an Avro block's (or a header field's) size comes from the file
    itself, and a corrupt size must not make the reader allocate it (a MemoryError would end
    the job even with ``skip``). The decoder sees a cut file, and ``state`` records the limit
    as the reason (the reader then reports the file as undecodable, naming the limit).
    """

    def __init__(self, handle: Any, limit: int, state: _FileState) -> None:
        self._handle = handle
        self._limit = limit
        self._state = state

    def read(self, size: int | None = -1) -> bytes:
        if size is not None and size > self._limit:
            self._state.reason = "a block is " + _limit_text(
                "Avro block", self._limit, "AVRO_MAX_BLOCK_BYTES", "avro_block_bytes"
            )
            return b""
        data: bytes = self._handle.read(size)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self._handle.seek(offset, whence))

    def tell(self) -> int:
        return int(self._handle.tell())


class _ReadFileFn(beam.DoFn):
    def __init__(
        self,
        input_format: str | None,
        columns: Sequence[str],
        batch_rows: int | None,
        on_bad_record: OnBadRecord,
        identifiers: Collection[str] = (),
        limits: ReadLimits | None = None,
        report_skipped_files: bool = False,
    ):
        super().__init__()
        self._format = input_format
        self._report_skipped = report_skipped_files
        self._limits = limits or ReadLimits()
        self._columns = list(columns)
        self._identifiers = frozenset(identifiers)
        self._batch_rows = batch_rows
        self._on_bad_record = on_bad_record
        self._exact_counts = telemetry.exact_counts_enabled()
        if self._exact_counts:
            self._records_skipped = Metrics.counter(_NAMESPACE, "bad_records_skipped")
            self._files_skipped = Metrics.counter(_NAMESPACE, "undecodable_files_skipped")

    def _rows(self, fmt: str) -> int:
        """Rows per batch for a file of format ``fmt`` (:class:`ReadExport`'s ``batch_rows``)."""
        if self._batch_rows is not None:
            return self._batch_rows
        return _PARQUET_BATCH_ROWS if fmt == "parquet" else _ROW_BATCH_ROWS

    def _batches(
        self, path: str, handle: Any, state: _FileState, fmt: str
    ) -> Iterator[pa.RecordBatch]:
        if fmt == "parquet":
            yield from parquet_batches(path, handle, state, self._columns, self._rows(fmt))
        elif fmt == "csv":
            yield from csv_batches(
                path, handle, state, self._columns, self._on_bad_record, self._limits
            )
        elif fmt == "avro":
            yield from self._avro(path, handle, state)
        elif fmt == "jsonl":
            rows = jsonl_rows(
                path,
                handle,
                state,
                self._columns,
                self._on_bad_record,
                self._limits,
                identifiers=self._identifiers,
            )
            yield from _chunked_rows(rows, *self._chunking)
        else:  # pragma: no cover - validated at construction
            raise ValueError(fmt)

    @property
    def _chunking(self) -> tuple[list[str], int, frozenset[str]]:
        return self._columns, self._rows("avro"), self._identifiers

    def _avro(
        self, path: str, handle: Any, state: _FileState, start: int = 0, end: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The blocks of ``path`` that begin in ``[start, end)``, decoded natively if it can.

        A file the native reader cannot decode (its codec, a map or a union other than
        ``[null, T]`` anywhere in its schema) is read whole with fastavro by the range that
        starts the file, with one log line naming the file (never a value). Every read of the
        handle is capped at the block limit (:class:`_CappedReads`).
        """
        handle = _CappedReads(handle, self._limits.avro_block_bytes, state)
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
            if count >= self._rows("avro"):
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
            yield from table.to_batches(max_chunksize=self._rows("avro"))
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

    def process(self, element: fileio.ReadableFile | tuple[Any, int, int]) -> Iterator[Any]:
        """Read a whole file, or (Avro) the blocks beginning in a ``(metadata, start, end)``
        byte range of one.

        Yields ``(file name, RecordBatch)`` pairs, and a :class:`SkippedFile` if (part of) the
        file was skipped as undecodable and skipped files are reported.
        """
        start, end = 0, None
        if isinstance(element, tuple):
            metadata, start, end = element
            readable = fileio.ReadableFile(metadata)
        else:
            readable = element
        path = readable.metadata.path
        fmt = file_format(path, self._format)
        state = _FileState()
        handle = _call(readable.open)
        if handle is _FAILED:
            state.fail()
        else:
            unexpected = False
            try:
                if isinstance(element, tuple) and fmt == "avro":
                    batches = self._avro(path, handle, state, start, end)
                else:
                    batches = self._batches(path, handle, state, fmt)
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
            if state.reason is not None and not state.failed:  # a limit cut the file short
                state.fail(state.where)
        self._report(path, state, fmt)
        if state.failed and self._report_skipped:  # (with 'fail', _report raised)
            yield SkippedFile(path)

    def _report(self, path: str, state: _FileState, fmt: str) -> None:
        if state.failed and self._on_bad_record == "fail":
            raise _undecodable_error(path, fmt, state.where, state.reason)
        if state.failed:
            _LOG.warning(
                "skipped the rest of an undecodable %s file (%s); records decoded before the "
                "failure are kept",
                fmt,
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


def _file_ranges(
    metadata: Any, split_bytes: int, input_format: str | None
) -> Iterator[tuple[Any, int, int]]:
    """An export of mixed formats: an Avro file's byte ranges (:func:`avro_ranges`), any other
    file whole, as one ``(metadata, 0, end)`` range."""
    if file_format(metadata.path, input_format) == "avro":
        yield from avro_ranges(metadata, split_bytes)
    else:
        yield metadata, 0, _WHOLE_FILE


def _first(items: Any) -> Any:
    """One of the metadata the patterns matched for one path (all alike)."""
    return next(iter(items))


def reads_by_file_key(pipeline: beam.Pipeline) -> bool:
    """Whether a bounded export is read as a keyed step, one bundle per file: on Flink
    (:class:`_ReadKeyedFileFn`)."""
    return isinstance(getattr(pipeline, "runner", None), FlinkRunner)


def _keyed_by_source(source: Any) -> tuple[str, Any]:
    """``(key, source)`` for a file's metadata or an Avro range ``(metadata, start, end)``."""
    if isinstance(source, tuple):
        return f"{source[0].path}@{source[1]}", source
    return str(source.path), source


#: Never written: its presence makes the read a keyed stage with state (_ReadKeyedFileFn).
_BY_FILE = BagStateSpec("by_file", VarIntCoder())
_BY_FILE_STATE = beam.DoFn.StateParam(_BY_FILE)


class _ReadKeyedFileFn(beam.DoFn):
    """Read one ``(key, file metadata or Avro range)`` with ``read_fn``: a keyed step with
    (unused) state.

    Flink's batch runner hands a stage's whole share of the input to the SDK worker as one
    bundle and keeps that bundle's output on the TaskManager's heap until the bundle ends; a
    keyed stage with state runs one bundle per key instead, so it holds one file's batches at a
    time, whatever the export's size (``benchmarks/SCALE.md``). The state is never read or
    written.
    """

    def __init__(self, read_fn: _ReadFileFn) -> None:
        super().__init__()
        self._read_fn = read_fn

    def setup(self) -> None:
        self._read_fn.setup()

    def start_bundle(self) -> None:
        self._read_fn.start_bundle()

    def finish_bundle(self) -> None:
        self._read_fn.finish_bundle()

    def teardown(self) -> None:
        self._read_fn.teardown()

    def process(self, element: tuple[str, Any], by_file: Any = _BY_FILE_STATE) -> Iterator[Any]:
        del by_file
        source = element[1]
        yield from self._read_fn.process(
            source if isinstance(source, tuple) else fileio.ReadableFile(source)
        )


class ReadExport(beam.PTransform):
    """Read an export (a file pattern) as ``(file name, RecordBatch)`` pairs.

    See the module docstring for the bad-record and undecodable-file rules. With
    ``report_skipped_files=True`` the output also holds a :class:`SkippedFile` per skipped
    file (per Avro range), which the caller separates from the batches::

        read = pipeline | ReadExport(
            "export-*.csv", columns=["user", "age"], on_bad_record="skip",
            report_skipped_files=True,
        )
        rows = read | beam.Filter(lambda e: not isinstance(e, SkippedFile))
        skipped = (
            read
            | beam.FlatMap(lambda e: [e.path] if isinstance(e, SkippedFile) else [])
            | beam.Distinct()
        )

    (One output, not a tagged second one: Beam's Dask runner hands every output of a
    multi-output step to every consumer.)

    Args:
        file_pattern: a glob over the export's files (local or any Beam filesystem), or a list
            of globs (each must match a file; a file several match is read once).
        input_format: ``avro``, ``parquet``, ``csv`` or ``jsonl``: the format of the files
            whose suffix names none (:func:`file_format`); every other file is read in the
            format its suffix names, so one export may mix formats.
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
        limits: the largest CSV header, CSV row, JSON line and Avro block read
            (:class:`~beam_dp.io.decoding.ReadLimits`; the defaults are the module constants
            ``CSV_MAX_HEADER_BYTES``, ``CSV_MAX_ROW_BYTES``, ``JSONL_MAX_LINE_BYTES`` and
            ``AVRO_MAX_BLOCK_BYTES``).
        report_skipped_files: also emit a :class:`SkippedFile` for each file (each Avro range)
            skipped as undecodable; by default the output is the batches only.
        watch_interval: seconds between two matches of the pattern: the export is then watched
            for new files (``fileio.MatchContinuously``; on Beam's BundleBasedDirectRunner,
            which cannot run it, :class:`beam_dp.io.watch.WatchFiles` with the same rules: each
            file read once, timestamped by its match time) and the output is unbounded; None
            (default) reads the files matched once (bounded).
        watch_until: with ``watch_interval``, the Unix time after which no new file is matched
            (the stream then ends); None: watch until the job is stopped.

    **Privacy**: no record's value reaches an error, a log line or a metric; exact counts of
    skipped records and files are reported only behind
    :func:`beam_dp.telemetry.enable_exact_counts` (read when the transform is built). The
    names of skipped files are public (file names are), as in the log line that names each.
    """

    def __init__(
        self,
        file_pattern: str | Sequence[str],
        *,
        columns: Sequence[str],
        input_format: str | None = None,
        batch_rows: int | None = None,
        on_bad_record: OnBadRecord = "fail",
        unit_column: str | None = None,
        avro_split_bytes: int = _AVRO_SPLIT_BYTES,
        limits: ReadLimits | None = None,
        report_skipped_files: bool = False,
        watch_interval: float | None = None,
        watch_until: float | None = None,
    ):
        super().__init__()
        if watch_interval is not None and not (
            isinstance(watch_interval, (int, float))
            and not isinstance(watch_interval, bool)
            and 0 < watch_interval < 86_400
        ):
            raise ValueError(
                "'watch_interval' must be seconds in (0, 86400) or None; received "
                f"{watch_interval!r}"
            )
        if watch_until is not None and watch_interval is None:
            raise ValueError("'watch_until' needs 'watch_interval' (a watched export)")
        self._watch = (watch_interval, watch_until)
        patterns = [file_pattern] if isinstance(file_pattern, str) else list(file_pattern)
        if not patterns or not all(isinstance(p, str) and p for p in patterns):
            raise ValueError(
                "'file_pattern' must be a pattern or a non-empty list of patterns; received "
                f"{file_pattern!r}"
            )
        if len(patterns) > 1 and watch_interval is not None:
            raise ValueError("a watched export ('watch_interval') takes one pattern, not a list")
        if input_format is not None and input_format not in FORMATS:
            raise ValueError(
                f"'input_format' must be one of {list(FORMATS)}; received {input_format!r}"
            )
        # One format for every file when every pattern's suffix names the same (the
        # export's files then all have it); else each file's own (file_format).
        named = {_suffix_format(pattern) for pattern in patterns}
        fmt = named.pop() if len(named) == 1 else None
        if on_bad_record not in ("fail", "skip"):
            raise ValueError(
                f"'on_bad_record' must be 'fail' or 'skip'; received {on_bad_record!r}"
            )
        if not columns:
            raise ValueError("'columns' must name at least one field to read")
        if batch_rows is not None and (
            isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1
        ):
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
        if limits is not None and not isinstance(limits, ReadLimits):
            raise ValueError(f"'limits' must be a ReadLimits or None; received {limits!r}")
        if not isinstance(report_skipped_files, bool):
            raise ValueError(
                f"'report_skipped_files' must be True or False; received {report_skipped_files!r}"
            )
        # Beam's local filesystem matches absolute paths only; remote patterns have a scheme.
        self._patterns = [
            pattern if "://" in pattern or os.path.isabs(pattern) else os.path.abspath(pattern)
            for pattern in patterns
        ]
        self._format = fmt  # every file's, when the patterns say it; else None: each file's
        self._input_format = input_format
        if unit_column is not None and (not isinstance(unit_column, str) or not unit_column):
            raise ValueError(
                f"'unit_column' must be a field name or None; received {unit_column!r}"
            )
        self._columns = list(dict.fromkeys([*([unit_column] if unit_column else []), *columns]))
        self._batch_rows = batch_rows
        self._on_bad_record = on_bad_record
        self._read_fn = _ReadFileFn(
            input_format,
            self._columns,
            batch_rows,
            on_bad_record,
            identifiers=[unit_column] if unit_column else [],
            limits=limits,
            report_skipped_files=report_skipped_files,
        )

    def expand(self, pbegin: PBegin) -> PCollection:
        interval, until = self._watch
        disallow = fileio.EmptyMatchTreatment.DISALLOW
        if interval is None and len(self._patterns) == 1:
            files = pbegin | "MatchFiles" >> fileio.MatchFiles(
                self._patterns[0], empty_match_treatment=disallow
            )
        elif interval is None:
            # each pattern must match a file; a file two patterns match is read once
            files = (
                pbegin
                | "Patterns" >> beam.Create(self._patterns)
                | "MatchFiles" >> fileio.MatchAll(empty_match_treatment=disallow)
                | "ByPath" >> beam.Map(lambda metadata: (metadata.path, metadata))
                | "OnceEach" >> beam.CombinePerKey(_first)
                | "Files" >> beam.Values()
            )
        elif watches_in_process(pbegin.pipeline):
            # Beam's BundleBasedDirectRunner runs no splittable DoFn in streaming mode: the
            # job's own watcher, with MatchContinuously's rules (beam_dp.io.watch)
            files = pbegin | "WatchFiles" >> WatchFiles(
                self._patterns[0],
                interval=float(interval),
                until=None if until is None else float(until),
            )
        else:
            watch = fileio.MatchContinuously(
                self._patterns[0],
                interval=float(interval),
                has_deduplication=True,
                **({} if until is None else {"stop_timestamp": float(until)}),
            )
            files = pbegin | "WatchFiles" >> watch
        sources = files
        if self._format == "avro":
            sources = files | "SplitAvro" >> beam.FlatMap(avro_ranges, self._split_bytes)
        elif self._format is None:  # formats mixed: Avro files in ranges, others whole
            sources = files | "SplitAvro" >> beam.FlatMap(
                _file_ranges, self._split_bytes, self._input_format
            )
        if interval is None and reads_by_file_key(pbegin.pipeline):
            # One bundle per file (per Avro range) on Flink's batch runner: _ReadKeyedFileFn.
            keyed = sources | "KeyBySource" >> beam.Map(_keyed_by_source)
            decoded_by_source: PCollection = keyed | "Decode" >> beam.ParDo(
                _ReadKeyedFileFn(self._read_fn)
            ).with_input_types(beam.typehints.Tuple[str, Any])
            return decoded_by_source
        # spread the files (ranges) over workers: matching runs on one
        inputs = sources | "SpreadFiles" >> beam.Reshuffle()
        if self._format not in ("avro", None):
            inputs = inputs | "ReadMatches" >> fileio.ReadMatches()
        decoded: PCollection = inputs | "Decode" >> beam.ParDo(self._read_fn)
        return decoded

    def display_data(self) -> dict[str, Any]:
        return {
            "file_pattern": ", ".join(self._patterns),
            "format": self._format or "each file's suffix",
            "columns": ",".join(self._columns),
        }
