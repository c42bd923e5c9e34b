"""Avro through the native (polars) reader: BigQuery-style exports, codecs, splits, fallback."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import logging
import struct
import zlib
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems

from beam_dp.batching.hashing import canonical_hash64
from beam_dp.io import avro as avro_io
from beam_dp.io import readers
from beam_dp.io.readers import _ReadFileFn, avro_ranges

UTC = datetime.UTC
SECRET = "s3cr3t-value-7781"

# A BigQuery export's shape: nullable unions everywhere, logical types, a nested record and
# a repeated field next to the columns the job reads.
BIGQUERY_SCHEMA = {
    "type": "record",
    "name": "Root",
    "fields": [
        {"name": "user_id", "type": ["null", "long"]},
        {"name": "email", "type": ["null", "string"]},
        {"name": "amount", "type": ["null", "double"]},
        {"name": "created", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {
            "name": "price",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
            ],
        },
        {
            "name": "address",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Address",
                    "fields": [
                        {"name": "city", "type": ["null", "string"]},
                        {"name": "zip", "type": ["null", "long"]},
                    ],
                },
            ],
        },
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
COLUMNS = ["user_id", "email", "amount", "created", "day", "price"]


def _rows(n: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        rows.append(
            {
                "user_id": None if i % 11 == 5 else i % 37,
                "email": f"u{i % 37}@example.com",
                "amount": i * 0.25,
                "created": datetime.datetime(2024, 1, 1, tzinfo=UTC)
                + datetime.timedelta(microseconds=i),
                "day": datetime.date(2024, 1, 1) + datetime.timedelta(days=i % 30),
                "price": decimal.Decimal(i) / 4,
                "address": None if i % 3 else {"city": SECRET, "zip": i},
                "tags": [SECRET] * (i % 2),
            }
        )
    return rows


def _snappy_literal(data: bytes) -> bytes:
    """A valid snappy stream made of literals only (no compression library needed)."""
    out = bytearray()
    length = len(data)
    while True:  # the uncompressed length as a plain (not zig-zag) varint
        byte = length & 0x7F
        length >>= 7
        out.append(byte | (0x80 if length else 0))
        if not length:
            break
    for start in range(0, len(data), 65536):
        chunk = data[start : start + 65536]
        size = len(chunk) - 1
        if size < 60:
            out.append(size << 2)
        elif size < 256:
            out += bytes([60 << 2, size])
        else:
            out += bytes([61 << 2]) + size.to_bytes(2, "little")
        out += chunk
    return bytes(out)


def _to_snappy(data: bytes) -> bytes:
    """Re-encode a null-codec Avro file with the snappy codec (as BigQuery writes it)."""
    handle = io.BytesIO(data)
    header = avro_io.read_header(handle)
    assert header is not None and header.codec == "null"
    metadata = {"avro.schema": json.dumps(header.schema).encode()}
    metadata["avro.codec"] = b"snappy"
    out = bytearray(avro_io._header_bytes(metadata, header.sync))
    for block in avro_io.iter_blocks(handle, header):
        assert block is not avro_io.FAILED
        count, raw = block
        reader = avro_io._Reader(io.BytesIO(raw))
        assert reader.varint() == count
        size = reader.varint()
        assert size is not None
        body = reader.read(size)
        assert body is not None
        packed = _snappy_literal(body) + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)
        out += avro_io._encode_long(count) + avro_io._encode_long(len(packed)) + packed
        out += header.sync
    return bytes(out)


def _write(path: Path, rows: list[dict[str, Any]], codec: str, sync_interval: int = 16_000) -> None:
    buffer = io.BytesIO()
    fastavro.writer(
        buffer,
        BIGQUERY_SCHEMA,
        rows,
        codec="null" if codec == "snappy" else codec,
        sync_interval=sync_interval,
    )
    data = buffer.getvalue()
    path.write_bytes(_to_snappy(data) if codec == "snappy" else data)


def _metadata(path: Path) -> Any:
    return FileSystems.match([str(path)])[0].metadata_list[0]


def _read(path: Path, columns: list[str], element: Any = None, batch_rows: int = 64) -> pa.Table:
    fn = _ReadFileFn("avro", columns, batch_rows, "fail", identifiers=["user_id"])
    source = element if element is not None else fileio.ReadableFile(_metadata(path))
    batches = [batch for _, batch in fn.process(source)]
    if not batches:
        return pa.table({c: pa.array([]) for c in columns})
    return pa.Table.from_batches(batches)


def _fastavro_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readers, "native_reader_supports", lambda header: False)


@pytest.mark.parametrize("codec", ["null", "deflate", "snappy"])
def test_bigquery_export_reads_natively_and_as_fastavro_does(
    tmp_path: Path,
    codec: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = tmp_path / f"export-{codec}.avro"
    _write(path, _rows(300), codec, sync_interval=2_000)  # several blocks

    with caplog.at_level(logging.INFO, logger="beam_dp.io.readers"):
        native = _read(path, COLUMNS)
    assert "fastavro" not in caplog.text  # the native reader decoded it
    assert native.num_rows == 300

    if codec != "snappy":  # fastavro needs a snappy library this environment does not have
        _fastavro_only(monkeypatch)
        slow = _read(path, COLUMNS)
        for name in COLUMNS:  # fastavro's decimals take the batch's precision, not the schema's
            if not pa.types.is_decimal(native.schema.field(name).type):
                assert native.schema.field(name) == slow.schema.field(name), name
        for name in COLUMNS:
            assert native.column(name).to_pylist() == slow.column(name).to_pylist(), name
    # the identity of a unit does not depend on the reader: same hashes as the Python ints
    hashes, bad = canonical_hash64(native.column("user_id"))
    expected, _ = canonical_hash64(pa.array([r["user_id"] for r in _rows(300)], pa.int64()))
    nulls = sum(r["user_id"] is None for r in _rows(300))
    assert np.array_equal(hashes[~bad], expected[~bad]) and int(bad.sum()) == nulls


def test_split_ranges_read_every_block_exactly_once(tmp_path: Path) -> None:
    path = tmp_path / "big.avro"
    rows = _rows(2_000)
    _write(path, rows, "deflate", sync_interval=500)
    metadata = _metadata(path)
    whole = _read(path, ["user_id", "amount"])

    for split in (97, 1_000, 4_096, metadata.size_in_bytes):
        ranges = list(avro_ranges(metadata, split))
        size = metadata.size_in_bytes
        assert len(ranges) == (1 if size <= split else -(-size // split))
        parts = [_read(path, ["user_id", "amount"], element=r) for r in ranges]
        amounts = sorted(v for part in parts for v in part.column("amount").to_pylist())
        assert amounts == sorted(whole.column("amount").to_pylist()), split
        assert sum(part.num_rows for part in parts) == len(rows)


def test_a_schema_the_native_reader_cannot_decode_falls_back_to_fastavro(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    schema = {
        "type": "record",
        "name": "Row",
        "fields": [
            {"name": "user_id", "type": "long"},
            {"name": "labels", "type": {"type": "map", "values": "string"}},
            {"name": "mixed", "type": ["long", "string"]},
        ],
    }
    rows = [{"user_id": i, "labels": {"k": SECRET}, "mixed": SECRET} for i in range(50)]
    path = tmp_path / "map.avro"
    with path.open("wb") as handle:
        fastavro.writer(handle, schema, rows)
    metadata = _metadata(path)

    with caplog.at_level(logging.INFO, logger="beam_dp.io.readers"):
        table = _read(path, ["user_id"])
        later = _read(path, ["user_id"], element=(metadata, 10, 20))  # not the file's start
    assert table.column("user_id").to_pylist() == list(range(50))
    assert later.num_rows == 0  # only the range that starts the file reads it with fastavro
    lines = [r.getMessage() for r in caplog.records if "fastavro" in r.getMessage()]
    assert len(lines) == 1 and str(path) in lines[0]
    assert SECRET not in caplog.text


def test_native_reader_support_follows_the_schema_and_codec() -> None:
    def header(schema: Any, codec: str = "null") -> avro_io.AvroHeader:
        return avro_io.AvroHeader(schema=schema, codec=codec, sync=b"0" * 16, raw=b"")

    assert avro_io.native_reader_supports(header(BIGQUERY_SCHEMA, "deflate"))
    assert not avro_io.native_reader_supports(header(BIGQUERY_SCHEMA, "zstandard"))
    for bad in (
        {"type": "map", "values": "long"},
        ["long", "string"],
        ["null", "long", "string"],
        ["null", {"type": "array", "items": {"type": "map", "values": "long"}}],
    ):
        schema = {"type": "record", "name": "R", "fields": [{"name": "f", "type": bad}]}
        assert not avro_io.native_reader_supports(header(schema)), bad


def test_a_corrupt_block_keeps_the_records_before_it(tmp_path: Path) -> None:
    path = tmp_path / "cut.avro"
    rows = _rows(200)
    _write(path, rows, "deflate", sync_interval=1)  # about one record per block
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # cut inside the last block(s)

    fn = _ReadFileFn("avro", ["user_id", "amount"], 64, "skip")
    got = [batch for _, batch in fn.process(fileio.ReadableFile(_metadata(path)))]
    amounts = [v for batch in got for v in batch.column("amount").to_pylist()]
    assert 0 < len(amounts) < len(rows)
    assert amounts == [r["amount"] for r in rows[: len(amounts)]]
    with pytest.raises(Exception, match="could not be decoded as avro") as raised:
        list(
            _ReadFileFn("avro", ["user_id"], 64, "fail").process(
                fileio.ReadableFile(_metadata(path))
            )
        )
    assert SECRET not in str(raised.value)
