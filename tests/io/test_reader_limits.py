"""The readers' size limits: named, generous, one record at a time.

Issue 22, item 1: a CSV header over 64 KiB (4000 columns) or one row over about 8 MiB, even in
a column the job does not read, was refused as "not a valid csv file", and with
``on_bad_record='skip'`` the rest of the file was dropped. Now a CSV row or a JSON line over
its limit is one bad record (the records after it are read), a header or an Avro block over
its limit makes the file undecodable with an error naming the limit, and the limits are
constants (:mod:`beam_dp.io.decoding`) that :class:`ReadLimits` can raise.
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems

from beam_dp.errors import BadRecordError
from beam_dp.io import ReadExport, SkippedFile, decoding, readers
from beam_dp.io.avro import _encode_long
from beam_dp.io.decoding import ReadLimits
from beam_dp.io.readers import _ReadFileFn

SECRET = "SECRET-alice@example.com"


def _read(
    path: Path,
    columns: list[str],
    on_bad_record: str = "fail",
    limits: ReadLimits | None = None,
) -> tuple[pa.Table | None, list[str]]:
    """One file through the reader's DoFn: (its records, the names it reports as skipped)."""
    fn = _ReadFileFn(
        path.suffix[1:],
        columns,
        4096,
        on_bad_record,  # type: ignore[arg-type]
        limits=limits,
        report_skipped_files=True,
    )
    metadata = FileSystems.match([str(path)])[0].metadata_list[0]
    batches, skipped = [], []
    for item in fn.process(fileio.ReadableFile(metadata)):
        if isinstance(item, SkippedFile):
            skipped.append(item.path)
        else:
            batches.append(item[1])
    return (pa.Table.from_batches(batches) if batches else None), skipped


def _column(table: pa.Table | None, name: str) -> list[Any]:
    return [] if table is None else table.column(name).to_pylist()


def _assert_safe(error: BaseException) -> None:
    """One line, no value, no decoder's exception chained."""
    for text in (str(error), repr(error), *map(str, error.args)):
        assert SECRET not in text
    assert "\n" not in str(error)
    assert error.__cause__ is None and error.__context__ is None


# --- CSV ------------------------------------------------------------------------------------


def test_a_csv_header_of_4000_columns_is_read(tmp_path: Path) -> None:
    names = [f"column_name_{i:04d}" for i in range(4000)]
    header = ",".join(names) + "\n"
    assert len(header) > 64 << 10  # over the old 64 KiB header block
    rows = "".join(",".join([f"a{r}"] + ["x"] * 3998 + [f"z{r}"]) + "\n" for r in range(50))
    path = tmp_path / "wide.csv"
    path.write_text(header + rows)
    table, skipped = _read(path, ["column_name_0000", "column_name_3999"])
    assert _column(table, "column_name_0000") == [f"a{r}" for r in range(50)]
    assert _column(table, "column_name_3999") == [f"z{r}" for r in range(50)]
    assert skipped == []


def test_a_10_mib_row_in_a_column_not_read_is_read(tmp_path: Path) -> None:
    blob = "b" * (10 << 20)  # over the old limit of about 8 MiB
    lines = [f"u{i},{i},{blob if i == 30 else 'short'}\n" for i in range(60)]
    path = tmp_path / "long.csv"
    path.write_text("user,price,blob\n" + "".join(lines))
    table, _ = _read(path, ["user", "price"])
    assert _column(table, "user") == [f"u{i}" for i in range(60)]


def test_a_row_over_the_default_limit_is_one_skipped_record(tmp_path: Path) -> None:
    over = SECRET + "x" * decoding.CSV_MAX_ROW_BYTES  # 64 MiB and a bit, in a column not read
    path = tmp_path / "huge.csv"
    with path.open("w") as out:
        out.write("user,price,blob\n")
        for i in range(100):
            out.write(f"u{i},{i},{over if i == 50 else 'short'}\n")
    table, skipped = _read(path, ["user", "price"], "skip")
    assert _column(table, "user") == [f"u{i}" for i in range(100) if i != 50]
    assert skipped == []  # a bad record, not an undecodable file
    with pytest.raises(BadRecordError) as info:
        _read(path, ["user", "price"], "fail")
    message = str(info.value)
    assert message.startswith(f"{path}: line 52 is longer than the CSV row limit of 64 MiB")
    assert "CSV_MAX_ROW_BYTES" in message and "ReadLimits(csv_row_bytes=...)" in message
    assert "on_bad_record='skip'" in message
    _assert_safe(info.value)


def test_quoted_rows_over_a_limit_are_each_one_record(tmp_path: Path) -> None:
    # quoted values over the limit, holding line breaks, delimiters and quotes: dropping one
    # must follow its quotes to its real end
    long_value = '"' + ('x\n,"",' * 400) + '"'  # 2.4 kB
    lines = []
    for i in range(300):
        value = long_value if i % 100 == 7 else f'"short\n{i}"'
        lines.append(f"u{i},{value},{i}\n")
    path = tmp_path / "quoted.csv"
    path.write_text("user,note,price\n" + "".join(lines))
    limits = ReadLimits(csv_row_bytes=1000)
    table, _ = _read(path, ["user", "price"], "skip", limits)
    kept = [i for i in range(300) if i % 100 != 7]
    assert _column(table, "user") == [f"u{i}" for i in kept]
    assert _column(table, "price") == [str(i) for i in kept]
    with pytest.raises(BadRecordError, match=r"quoted\.csv: line 9 is longer than the CSV row"):
        _read(path, ["user", "price"], "fail", limits)


def test_a_csv_header_over_its_limit_names_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "wide.csv"
    path.write_text(",".join(f"c{i}" for i in range(400)) + "\n" + ",".join(["1"] * 400) + "\n")
    limits = ReadLimits(csv_header_bytes=1000)
    with pytest.raises(BadRecordError) as info:
        _read(path, ["c0"], "fail", limits)
    assert str(info.value).startswith(
        f"{path}: could not be decoded as csv: its header is longer than the CSV header limit "
        "of 1000 bytes (CSV_MAX_HEADER_BYTES; raise it with "
        "ReadExport(limits=ReadLimits(csv_header_bytes=...)))"
    )
    _assert_safe(info.value)
    table, skipped = _read(path, ["c0"], "skip", limits)
    assert table is None and skipped == [str(path)]


# --- JSON lines -----------------------------------------------------------------------------


def test_a_json_line_over_its_limit_is_one_record(tmp_path: Path) -> None:
    lines = [json.dumps({"user": f"u{i}", "price": i}) + "\n" for i in range(40)]
    lines[20] = json.dumps({"user": SECRET, "price": 1, "blob": "y" * 1000}) + "\n"
    path = tmp_path / "x.jsonl"
    path.write_text("".join(lines))
    limits = ReadLimits(jsonl_line_bytes=500)
    table, skipped = _read(path, ["user", "price"], "skip", limits)
    assert _column(table, "user") == [f"u{i}" for i in range(40) if i != 20]
    assert skipped == []
    with pytest.raises(BadRecordError) as info:
        _read(path, ["user", "price"], "fail", limits)
    assert str(info.value).startswith(
        f"{path}: line 21 is longer than the JSON line limit of 500 bytes (JSONL_MAX_LINE_BYTES"
    )
    _assert_safe(info.value)
    table, _ = _read(path, ["user", "price"])  # within the default limit: read
    assert SECRET in _column(table, "user")


# --- Avro -----------------------------------------------------------------------------------

_SCHEMA = {
    "type": "record",
    "name": "Row",
    "fields": [{"name": "user", "type": "string"}, {"name": "price", "type": "double"}],
}


def _avro(rows: int) -> bytes:
    buffer = io.BytesIO()
    records = [{"user": f"u{i}", "price": float(i)} for i in range(rows)]
    fastavro.writer(buffer, _SCHEMA, records, sync_interval=2000)
    return buffer.getvalue()


@pytest.mark.parametrize("native", [True, False], ids=["native", "fastavro"])
def test_an_avro_block_claiming_a_huge_size_is_undecodable_not_out_of_memory(
    tmp_path: Path, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not native:
        monkeypatch.setattr(readers, "native_reader_supports", lambda header: False)
    # good blocks, then a block whose size field claims 2**50 bytes (a corrupt file)
    path = tmp_path / "cut.avro"
    path.write_bytes(_avro(500) + _encode_long(1) + _encode_long(2**50) + b"\x00" * 64)
    table, skipped = _read(path, ["user", "price"], "skip")
    assert _column(table, "user") == [f"u{i}" for i in range(500)]
    assert skipped == [str(path)]
    with pytest.raises(BadRecordError) as info:
        _read(path, ["user", "price"], "fail")
    assert str(info.value).startswith(
        f"{path}: could not be decoded as avro: a block is longer than the Avro block limit of "
        "256 MiB (AVRO_MAX_BLOCK_BYTES"
    )
    _assert_safe(info.value)


def test_an_avro_block_over_a_lowered_limit_names_it(tmp_path: Path) -> None:
    path = tmp_path / "x.avro"
    path.write_bytes(_avro(500))  # blocks of about 2 kB
    table, _ = _read(path, ["user"], limits=ReadLimits(avro_block_bytes=1 << 20))
    assert len(_column(table, "user")) == 500
    with pytest.raises(BadRecordError, match="a block is longer than the Avro block limit of 100"):
        _read(path, ["user"], limits=ReadLimits(avro_block_bytes=100))


# --- the limits' own rules ------------------------------------------------------------------


def test_limits_are_named_constants_with_generous_defaults() -> None:
    assert ReadLimits() == ReadLimits(
        csv_header_bytes=decoding.CSV_MAX_HEADER_BYTES,
        csv_row_bytes=decoding.CSV_MAX_ROW_BYTES,
        jsonl_line_bytes=decoding.JSONL_MAX_LINE_BYTES,
        avro_block_bytes=decoding.AVRO_MAX_BLOCK_BYTES,
    )
    assert decoding.CSV_MAX_HEADER_BYTES == 16 << 20
    assert decoding.CSV_MAX_ROW_BYTES == decoding.JSONL_MAX_LINE_BYTES == 64 << 20
    assert decoding.AVRO_MAX_BLOCK_BYTES == 256 << 20


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "1", (1 << 30) + 1])
@pytest.mark.parametrize(
    "field", ["csv_header_bytes", "csv_row_bytes", "jsonl_line_bytes", "avro_block_bytes"]
)
def test_a_bad_limit_is_refused_naming_it(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=rf"'{field}' must be an integer number of bytes"):
        ReadLimits(**{field: value})


def test_read_export_refuses_limits_of_another_type() -> None:
    with pytest.raises(ValueError, match="'limits' must be a ReadLimits or None"):
        ReadExport("x.csv", columns=["a"], limits={"csv_row_bytes": 10})  # type: ignore[arg-type]


# --- no value in any message or log line ----------------------------------------------------


def _over_limit_files(directory: Path) -> list[tuple[Path, ReadLimits]]:
    """A file in each format with a record (or header, or block) over a small limit, holding
    the secret, between good records."""
    csv_row = directory / "row.csv"
    csv_row.write_text(f"user,price\nu1,1\n{SECRET}{'x' * 200},2\nu3,3\n")
    csv_header = directory / "header.csv"
    csv_header.write_text(f"user,price,{SECRET}{'y' * 200}\nu1,1,z\n")
    jsonl = directory / "line.jsonl"
    jsonl.write_text(
        '{"user": "u1", "price": 1}\n'
        + json.dumps({"user": SECRET + "x" * 200, "price": 2})
        + '\n{"user": "u3", "price": 3}\n'
    )
    avro = directory / "block.avro"
    buffer = io.BytesIO()
    records = [{"user": SECRET, "price": float(i)} for i in range(50)]
    fastavro.writer(buffer, _SCHEMA, records, sync_interval=10_000)
    avro.write_bytes(buffer.getvalue())
    small = ReadLimits(csv_header_bytes=100, csv_row_bytes=100, jsonl_line_bytes=100)
    return [
        (csv_row, small),
        (csv_header, small),
        (jsonl, small),
        (avro, ReadLimits(avro_block_bytes=100)),
    ]


def test_no_value_reaches_a_message_or_a_log_line_at_any_limit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from beam_dp import telemetry

    for path, limits in _over_limit_files(tmp_path):
        with pytest.raises(BadRecordError) as info:
            _read(path, ["user", "price"], "fail", limits)
        assert "limit of 100 bytes" in str(info.value)
        _assert_safe(info.value)
        telemetry.enable_exact_counts()
        try:
            with caplog.at_level(logging.DEBUG):
                _read(path, ["user", "price"], "skip", limits)
        finally:
            telemetry.disable_exact_counts()
        assert SECRET not in caplog.text
