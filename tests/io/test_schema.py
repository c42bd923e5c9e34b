"""Column resolution from the export's schema (issue 14): footer and header only, no values."""

from __future__ import annotations

import decimal
from fractions import Fraction
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_dp.errors import BadRecordError
from beam_dp.io.schema import (
    ColumnResolution,
    column_resolution,
    combine_resolutions,
    export_resolution,
)

SECRET = 987654321  # a value written to the files; no message may show it


@pytest.fixture
def parquet_file(tmp_path: Path) -> str:
    table = pa.table(
        {
            "delay": pa.array([SECRET, -5], pa.int64()),
            "small": pa.array([1, 2], pa.int16()),
            "price": pa.array(
                [decimal.Decimal("9876543.21"), decimal.Decimal("0.07")], pa.decimal128(9, 2)
            ),
            "whole": pa.array([decimal.Decimal("12"), decimal.Decimal("3")], pa.decimal128(5, 0)),
            "weight": pa.array([0.5, 1.5], pa.float64()),
            "name": pa.array(["a", "b"], pa.string()),
            "code": pa.array([3, 4], pa.int32()).dictionary_encode(),
        }
    )
    path = tmp_path / "export-0.parquet"
    pq.write_table(table, path)
    return str(path)


AVRO_SCHEMA = {
    "type": "record",
    "name": "row",
    "fields": [
        {"name": "delay", "type": "long"},
        {"name": "maybe", "type": ["null", "int"]},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
        {"name": "weight", "type": "double"},
        {"name": "when", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "name", "type": "string"},
        {"name": "either", "type": ["int", "string"]},
    ],
}


@pytest.fixture
def avro_file(tmp_path: Path) -> str:
    records = [
        {
            "delay": SECRET,
            "maybe": None,
            "price": decimal.Decimal("1.25"),
            "weight": 2.0,
            "when": 0,
            "name": "x",
            "either": 1,
        }
    ] * 50
    path = tmp_path / "export-0.avro"
    with open(path, "wb") as handle:
        fastavro.writer(handle, fastavro.parse_schema(AVRO_SCHEMA), records)
    return str(path)


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("delay", ColumnResolution("integer", 0)),
        ("small", ColumnResolution("integer", 0)),
        ("price", ColumnResolution("decimal", 2)),
        ("whole", ColumnResolution("integer", 0)),
        ("weight", ColumnResolution("float")),
        ("name", ColumnResolution("other")),
        ("code", ColumnResolution("integer", 0)),
    ],
)
def test_parquet_footer(parquet_file: str, field: str, expected: ColumnResolution) -> None:
    assert column_resolution(parquet_file, field) == expected


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("delay", ColumnResolution("integer", 0)),
        ("maybe", ColumnResolution("integer", 0)),
        ("price", ColumnResolution("decimal", 2)),
        ("weight", ColumnResolution("float")),
        ("when", ColumnResolution("other")),
        ("name", ColumnResolution("other")),
        ("either", ColumnResolution("other")),
    ],
)
def test_avro_writer_schema(avro_file: str, field: str, expected: ColumnResolution) -> None:
    assert column_resolution(avro_file, field) == expected


def test_resolution_values() -> None:
    assert ColumnResolution("decimal", 2).resolution == Fraction(1, 100)
    assert ColumnResolution("decimal", 2).resolution_text == "0.01"
    assert ColumnResolution("integer", 0).resolution_text == "1"
    assert ColumnResolution("float").resolution is None


def test_avro_records_are_never_decoded(avro_file: str, tmp_path: Path) -> None:
    # Header intact, every block after it garbage: the schema is still read.
    data = Path(avro_file).read_bytes()
    with open(avro_file, "rb") as handle:
        sync = fastavro.reader(handle)._header["sync"]
    header_end = data.index(sync) + 16
    broken = tmp_path / "broken.avro"
    broken.write_bytes(data[:header_end] + b"\xff" * 200)
    assert column_resolution(str(broken), "price") == ColumnResolution("decimal", 2)


def test_parquet_pages_are_never_decoded(parquet_file: str, tmp_path: Path) -> None:
    # Column data overwritten, footer intact: the schema is still read.
    data = bytearray(Path(parquet_file).read_bytes())
    footer = int.from_bytes(data[-8:-4], "little") + 8
    for i in range(4, len(data) - footer):
        data[i] = 0xAB
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(bytes(data))
    assert column_resolution(str(broken), "delay") == ColumnResolution("integer", 0)
    with pytest.raises(Exception):  # noqa: B017 - the data really is unreadable
        pq.read_table(broken)


def test_csv_and_json_lines_have_no_schema(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text(f"delay\n{SECRET}\n")
    assert column_resolution(str(path), "delay") == ColumnResolution("unknown")
    assert column_resolution(str(tmp_path / "absent.jsonl"), "x").kind == "unknown"


def _check_message(error: BaseException, path: str) -> None:
    text = str(error)
    assert path in text and str(SECRET) not in text
    assert error.__cause__ is None
    assert error.__context__ is None or error.__suppress_context__


def test_missing_field_names_the_file_and_field(parquet_file: str, avro_file: str) -> None:
    for path in (parquet_file, avro_file):
        with pytest.raises(BadRecordError, match="field 'delays'") as error:
            column_resolution(path, "delays")
        _check_message(error.value, path)


def test_unreadable_files(tmp_path: Path) -> None:
    for name in ("bad.parquet", "bad.avro"):
        path = tmp_path / name
        path.write_bytes(f"delay\n{SECRET}\n".encode())
        with pytest.raises(BadRecordError) as error:
            column_resolution(str(path), "delay")
        _check_message(error.value, str(path))


def test_format_is_validated(parquet_file: str) -> None:
    with pytest.raises(ValueError, match="'input_format'"):
        column_resolution(parquet_file, "delay", input_format="orc")
    assert column_resolution(parquet_file, "delay", input_format="parquet").kind == "integer"


def test_many_files_combine_to_the_finest_resolution(parquet_file: str, avro_file: str) -> None:
    assert export_resolution([parquet_file, avro_file], "delay") == ColumnResolution("integer", 0)
    both = combine_resolutions([ColumnResolution("integer", 0), ColumnResolution("decimal", 2)])
    assert both == ColumnResolution("decimal", 2)
    mixed = [ColumnResolution("decimal", 1), ColumnResolution("float")]
    assert combine_resolutions(mixed).kind == "float"
    assert combine_resolutions([ColumnResolution("unknown"), *mixed]).kind == "unknown"
    assert combine_resolutions([]).kind == "unknown"
