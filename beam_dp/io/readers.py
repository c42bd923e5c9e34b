"""Read data-warehouse exports into (file name, pyarrow RecordBatch) pairs.

Exports come as glob patterns over sharded files (``export-*.avro``), in one of four formats:

* **parquet**: Beam's ``ReadAllFromParquetBatched`` (the fast path: columnar batches, split
  within files);
* **avro**: fastavro, per file, records gathered into batches of ``batch_rows``;
* **csv**: pyarrow's streaming CSV reader, per file; every needed column is read as text and
  numbers are parsed entry by entry later, so one bad entry is one bad record;
* **jsonl**: one JSON object per line, per file, gathered into batches.

The file name travels with each batch so that a bad-input error can name the file, the field
and the rule (never a value). An undecodable file fails the job (``on_bad_record="fail"``) or
is skipped and counted (``"skip"``). A pattern that matches no file is an error; files with no
records are a valid, empty input.
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.csv as pa_csv
from apache_beam.io import fileio
from apache_beam.io.parquetio import ReadAllFromParquetBatched
from apache_beam.metrics.metric import Metrics
from apache_beam.pvalue import PBegin, PCollection

from beam_dp.batching.columns import BadRecordError, OnBadRecord

__all__ = ["FORMATS", "ReadExport", "detect_format"]

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


def _check_columns(path: str, present: Sequence[str], needed: Sequence[str]) -> None:
    for column in needed:
        if column not in present:
            raise BadRecordError(
                f"{path}: field '{column}' is missing (rule: the field is required)"
            )


def _chunked_rows(
    rows: Iterator[dict[str, Any]], columns: Sequence[str], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    chunk: dict[str, list[Any]] = {c: [] for c in columns}
    size = 0
    for row in rows:
        for c in columns:
            chunk[c].append(row.get(c))
        size += 1
        if size == batch_rows:
            yield _to_batch(chunk)
            chunk = {c: [] for c in columns}
            size = 0
    if size:
        yield _to_batch(chunk)


def _to_batch(chunk: dict[str, list[Any]]) -> pa.RecordBatch:
    arrays = {}
    for name, values in chunk.items():
        try:
            arrays[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            # mixed types in one field (a number here, a string there): keep them as text;
            # numeric fields are parsed entry by entry later, so bad entries become bad records
            arrays[name] = pa.array(
                [None if v is None else str(v) for v in values], type=pa.string()
            )
    return pa.RecordBatch.from_pydict(arrays)


class _ReadFileFn(beam.DoFn):
    def __init__(
        self, input_format: str, columns: Sequence[str], batch_rows: int, on_bad_record: OnBadRecord
    ):
        super().__init__()
        self._format = input_format
        self._columns = list(columns)
        self._batch_rows = batch_rows
        self._on_bad_record = on_bad_record
        self._files_skipped = Metrics.counter(_NAMESPACE, "undecodable_files_skipped")

    def _batches(self, path: str, handle: Any) -> Iterator[pa.RecordBatch]:
        if self._format == "avro":
            import fastavro

            reader = fastavro.reader(handle)
            fields = [f["name"] for f in reader.writer_schema.get("fields", [])]  # type: ignore[union-attr]
            _check_columns(path, fields, self._columns)
            yield from _chunked_rows(iter(reader), self._columns, self._batch_rows)  # type: ignore[arg-type]
        elif self._format == "csv":
            header = pa_csv.open_csv(
                handle, read_options=pa_csv.ReadOptions(block_size=1 << 16)
            ).schema.names
            _check_columns(path, header, self._columns)
            handle.seek(0)
            reader = pa_csv.open_csv(
                handle,
                read_options=pa_csv.ReadOptions(block_size=1 << 22),
                convert_options=pa_csv.ConvertOptions(
                    include_columns=self._columns,
                    column_types={c: pa.string() for c in self._columns},
                ),
            )
            yield from reader
        elif self._format == "jsonl":
            text = io.TextIOWrapper(handle, encoding="utf-8")

            def rows() -> Iterator[dict[str, Any]]:
                for number, line in enumerate(text, start=1):
                    if not line.strip():
                        continue
                    value = json.loads(line)
                    if not isinstance(value, dict):
                        raise BadRecordError(
                            f"{path}: line {number} is not a JSON object "
                            "(rule: one object per line)"
                        )
                    for column in self._columns:
                        if column not in value:
                            raise BadRecordError(
                                f"{path}: field '{column}' is missing on line {number} "
                                "(rule: the field is required)"
                            )
                    yield value

            try:
                yield from _chunked_rows(rows(), self._columns, self._batch_rows)
            finally:
                text.detach()  # the caller closes the underlying file
        else:  # pragma: no cover - validated at construction
            raise ValueError(self._format)

    def process(self, readable: fileio.ReadableFile) -> Iterator[tuple[str, pa.RecordBatch]]:
        path = readable.metadata.path
        try:
            with readable.open() as handle:
                for batch in self._batches(path, handle):
                    if batch.num_rows:
                        yield path, batch
        except BadRecordError:
            raise
        except Exception:
            # The decoder's own message may quote the file's content: never pass it on.
            if self._on_bad_record == "skip":
                self._files_skipped.inc()
                _LOG.warning("skipped an undecodable %s file (%s)", self._format, path)
                return
            raise BadRecordError(
                f"{path}: could not be decoded as {self._format} (rule: every input file must be "
                f"a valid {self._format} file; use on_bad_record='skip' to skip such files)"
            ) from None


def _checked_parquet_path(path: str, columns: Sequence[str]) -> str:
    """Read only the file's schema (its footer) and check the needed fields are there."""
    import pyarrow.parquet as pq
    from apache_beam.io.filesystems import FileSystems

    try:
        with FileSystems.open(path) as handle:
            names = pq.read_schema(handle).names
    except Exception:
        raise BadRecordError(
            f"{path}: could not be decoded as parquet (rule: every input file must be a valid "
            "parquet file)"
        ) from None
    _check_columns(path, names, columns)
    return path


def _parquet_batches(element: tuple[str, pa.Table]) -> Iterator[tuple[str, pa.RecordBatch]]:
    path, table = element
    for batch in table.to_batches():
        if batch.num_rows:
            yield path, batch


class ReadExport(beam.PTransform):
    """Read an export (a file pattern) as ``(file name, RecordBatch)`` pairs.

    Args:
        file_pattern: a glob over the export's files (local or any Beam filesystem).
        input_format: ``avro``, ``parquet``, ``csv`` or ``jsonl``; from the suffix if None.
        columns: the fields to read (the others are never decoded into batches).
        batch_rows: rows per batch for the row-oriented formats.
        on_bad_record: what to do with an undecodable file: ``fail`` or ``skip``.
    """

    def __init__(
        self,
        file_pattern: str,
        *,
        columns: Sequence[str],
        input_format: str | None = None,
        batch_rows: int = 65_536,
        on_bad_record: OnBadRecord = "fail",
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
        if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
            raise ValueError(f"'batch_rows' must be an integer >= 1; received {batch_rows!r}")
        # Beam's local filesystem matches absolute paths only; remote patterns have a scheme.
        if "://" not in file_pattern and not os.path.isabs(file_pattern):
            file_pattern = os.path.abspath(file_pattern)
        self._pattern = file_pattern
        self._format = fmt
        self._columns = list(dict.fromkeys(columns))
        self._batch_rows = batch_rows
        self._on_bad_record = on_bad_record

    def expand(self, pbegin: PBegin) -> PCollection:
        matches = pbegin | "MatchFiles" >> fileio.MatchFiles(
            self._pattern, empty_match_treatment=fileio.EmptyMatchTreatment.DISALLOW
        )
        if self._format == "parquet":
            return (
                matches
                | "Paths" >> beam.Map(lambda metadata: metadata.path)
                | "CheckSchema" >> beam.Map(_checked_parquet_path, self._columns)
                | "ReadParquet"
                >> ReadAllFromParquetBatched(columns=self._columns, with_filename=True)
                | "ToBatches" >> beam.FlatMap(_parquet_batches)
            )
        return (
            matches
            | "ReadMatches" >> fileio.ReadMatches()
            | "Decode"
            >> beam.ParDo(
                _ReadFileFn(self._format, self._columns, self._batch_rows, self._on_bad_record)
            )
        )

    def display_data(self) -> dict[str, Any]:
        return {
            "file_pattern": self._pattern,
            "format": self._format,
            "columns": ",".join(self._columns),
        }
