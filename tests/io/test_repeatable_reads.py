"""The same file gives the same records on every read, at any size, in every format.

Issue 22, item 1: two valid 1.3 MB CSV files were "not valid csv" in 2-4 of 12-20 runs. The
cause: the CSV reader opened a pyarrow streaming reader for the header, seeked the handle back
to 0 and opened a second one, while the first one's read-ahead thread was still reading the
same handle, so the second reader started wherever that thread had left the handle. The files
here are several times larger than every block the readers use (CSV and JSON-lines read sizes,
Avro sync-scan and split bytes, Parquet row groups) and each is read many times; a handle that
is slow to read (as a remote filesystem is) leaves any read-ahead thread time to interleave.
"""

from __future__ import annotations

import io
import json
import random
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io.filesystems import FileSystems

from beam_dp.io import decoding
from beam_dp.io.readers import _ReadFileFn, avro_ranges

COLUMNS = ["user", "wage"]
ROWS = 30_000


def _rows(seed: int = 7, multiline: bool = True) -> list[dict[str, Any]]:
    """Panel-like rows: an id, a wage, and a note column the readers are not asked for (with
    quotes, delimiters and, if ``multiline``, line breaks in CSV)."""
    rng = random.Random(seed)
    notes = ["", "NY", 'said "hi", twice'] + (["line one\nline two"] if multiline else [])
    return [
        {
            "user": f"u{rng.randrange(4700)}",
            "wage": f"{rng.random() * 30:.4f}",
            "note": rng.choice(notes),
        }
        for _ in range(ROWS)
    ]


def _csv_field(value: str) -> str:
    if any(c in value for c in ',"\n\r'):
        return '"' + value.replace('"', '""') + '"'
    return value


def _csv_bytes(rows: list[dict[str, Any]], repeat: int = 1) -> bytes:
    body = "".join(
        ",".join(_csv_field(r[k]) for k in ("user", "wage", "note")) + "\n" for r in rows
    )
    return ("user,wage,note\n" + body * repeat).encode()


def _jsonl_bytes(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _avro_bytes(rows: list[dict[str, Any]]) -> bytes:
    schema = {
        "type": "record",
        "name": "Row",
        "fields": [{"name": k, "type": "string"} for k in ("user", "wage", "note")],
    }
    buffer = io.BytesIO()
    fastavro.writer(buffer, schema, rows, sync_interval=4000)  # blocks of about 4 kB
    return buffer.getvalue()


def _parquet_bytes(rows: list[dict[str, Any]]) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer, row_group_size=1000)
    return buffer.getvalue()


class _Handle(io.RawIOBase):
    """A file handle over bytes that records every read and seek, optionally slow to read.

    A slow read sleeps (releasing the GIL), as a read from a remote filesystem waits: any
    other thread reading the same handle then runs in between.
    """

    def __init__(self, data: bytes, delay: float = 0.0) -> None:
        super().__init__()
        self._file = io.BytesIO(data)
        self._delay = delay
        self.reads: list[tuple[int, int]] = []  # (position, bytes returned)
        self.seeks: list[int] = []
        self.threads: set[int] = set()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        if self._delay:
            time.sleep(self._delay)
        position = self._file.tell()
        data = self._file.read(-1 if size is None else size)
        self.reads.append((position, len(data)))
        self.threads.add(threading.get_ident())
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        position = self._file.seek(offset, whence)
        self.seeks.append(position)
        return position

    def tell(self) -> int:
        return self._file.tell()


class _Readable:
    """What the reader's DoFn is given for one file: its metadata and a way to open it."""

    def __init__(self, name: str, data: bytes, delay: float = 0.0) -> None:
        self.metadata = SimpleNamespace(path=name, size_in_bytes=len(data))
        self._data = data
        self._delay = delay
        self.handles: list[_Handle] = []

    def open(self) -> _Handle:
        handle = _Handle(self._data, self._delay)
        self.handles.append(handle)
        return handle


def _records(fmt: str, element: Any) -> pa.Table:
    """The records the reader's DoFn gives for one file (or Avro range), in order."""
    fn = _ReadFileFn(fmt, COLUMNS, 4096, "fail")
    batches = [batch for _, batch in fn.process(element)]
    return pa.Table.from_batches(batches, schema=_SCHEMA)


_SCHEMA = pa.schema([(c, pa.string()) for c in COLUMNS])


def _expected(rows: list[dict[str, Any]], repeat: int = 1) -> pa.Table:
    return pa.Table.from_pylist([{c: r[c] for c in COLUMNS} for r in rows] * repeat, _SCHEMA)


# --- CSV: one pass, one thread, at the default sizes ---------------------------------------


def test_a_csv_file_is_read_once_in_order_on_one_thread() -> None:
    rows = _rows()
    data = _csv_bytes(rows)
    assert len(data) > 8 * (1 << 16)  # several times the old header block
    readable = _Readable("x.csv", data)
    assert _records("csv", readable).equals(_expected(rows))
    (handle,) = readable.handles
    assert handle.seeks == []  # no second pass
    position = 0
    for start, size in handle.reads:  # each byte once, in order
        assert start == position
        position += size
    assert position == len(data)
    assert handle.threads == {threading.get_ident()}  # no read-ahead thread


def test_a_large_csv_file_on_a_slow_filesystem_gives_the_same_records_every_time() -> None:
    rows = _rows(multiline=False)  # (line breaks in values: the next test)
    data = _csv_bytes(rows, repeat=20)  # about 15 MB: over three times the 4 MiB read size
    assert len(data) > 3 * decoding._CSV_READ_BYTES
    expected = _expected(rows, repeat=20)
    for _ in range(6):
        assert _records("csv", _Readable("x.csv", data, delay=0.002)).equals(expected)


def test_line_breaks_in_quoted_values_across_read_blocks_are_read_as_values() -> None:
    # pyarrow's chunker cut blocks at any line break (newlines_in_values=False): a quoted
    # value with a line break across a 4 MiB block boundary made the file "not valid csv"
    rows = _rows()
    data = _csv_bytes(rows, repeat=12)  # about 9 MB: over two 4 MiB blocks
    assert len(data) > 2 * decoding._CSV_READ_BYTES
    got = _records("csv", _Readable("x.csv", data))
    assert got.equals(_expected(rows, repeat=12))


# --- every format, with small blocks, many reads -------------------------------------------


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """CSV and JSON-lines read 64 KiB at a time, so that a 2 MB file spans many blocks."""
    monkeypatch.setattr(decoding, "_CSV_READ_BYTES", 1 << 16)
    monkeypatch.setattr(decoding, "_JSONL_READ_BYTES", 1 << 16)


# (rows, reads) per format: formats decoded in Python are read fewer times
_SIZES = {"csv": (ROWS, 25), "parquet": (ROWS, 25), "avro": (ROWS, 8), "jsonl": (10_000, 8)}


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet", "avro"])
def test_every_format_gives_the_same_records_on_every_read(fmt: str) -> None:
    count, reads = _SIZES[fmt]
    rows = _rows()[:count]
    writer = {
        "csv": _csv_bytes,
        "jsonl": _jsonl_bytes,
        "parquet": _parquet_bytes,
        "avro": _avro_bytes,
    }[fmt]
    data = writer(rows)
    if fmt == "parquet":  # many row groups
        assert pq.ParquetFile(io.BytesIO(data)).num_row_groups >= 8
    else:  # many read blocks, Avro blocks and sync-marker scans
        assert len(data) > 8 * (1 << 16)
    expected = _expected(rows)
    for attempt in range(reads):
        delay = 0.0005 if attempt % 4 == 0 else 0.0  # some reads slow, as remote ones are
        assert _records(fmt, _Readable(f"x.{fmt}", data, delay)).equals(expected)


def test_avro_byte_ranges_read_every_block_once_on_every_read(tmp_path: Path) -> None:
    rows = _rows()
    data = _avro_bytes(rows)
    assert len(data) > 8 * (1 << 16)  # several times the sync-marker scan
    path = tmp_path / "x.avro"
    path.write_bytes(data)
    metadata = FileSystems.match([str(path)])[0].metadata_list[0]
    ranges = list(avro_ranges(metadata, 50_021))  # ranges that start inside blocks
    assert len(ranges) > 8
    expected = _expected(rows)
    for _ in range(10):
        got = pa.concat_tables([_records("avro", element) for element in ranges])
        assert got.equals(expected)
