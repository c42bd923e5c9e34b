"""``on_bad_record`` acts on records in every format; undecodable files are skipped or fail the
same way in every format; no record's content reaches an error, a log line or a metric."""

from __future__ import annotations

import io
import json
import logging
import math
import re
import traceback
from pathlib import Path
from typing import Any

import apache_beam as beam
import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems
from apache_beam.testing.util import assert_that, equal_to

from beam_dp import telemetry
from beam_dp.errors import BadRecordError
from beam_dp.io import ReadExport
from beam_dp.io.readers import _ReadFileFn

SECRET_TEXT = "SECRET-alice@example.com"
SECRET_INT = 2**62 + 12345
SECRETS = (SECRET_TEXT, "alice@example", str(SECRET_INT))
COLUMNS = ["user", "price", "label"]
GOOD = 1000  # good records per good file


def _good_rows(n: int = GOOD, prefix: str = "u") -> list[dict[str, Any]]:
    return [{"user": f"{prefix}{i}", "price": i / 4, "label": "a"} for i in range(n)]


def _secret_rows(n: int) -> list[dict[str, Any]]:
    return [
        {"user": SECRET_TEXT if i % 2 else SECRET_INT, "price": 0.25, "label": SECRET_TEXT}
        for i in range(n)
    ]


# --- writers ------------------------------------------------------------------------------

_AVRO_SCHEMA = {
    "type": "record",
    "name": "Row",
    "fields": [
        {"name": "user", "type": ["null", "string", "long"]},
        {"name": "price", "type": ["null", "double"]},
        {"name": "label", "type": ["null", "string"]},
    ],
}


def _avro_bytes(rows: list[dict[str, Any]], sync_interval: int = 16_000) -> bytes:
    buffer = io.BytesIO()
    fastavro.writer(buffer, _AVRO_SCHEMA, rows, sync_interval=sync_interval)
    return buffer.getvalue()


def _parquet_bytes(table: pa.Table, row_group_size: int = 1 << 20) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=row_group_size, compression="none")
    return buffer.getvalue()


def _csv_text(rows: list[dict[str, Any]]) -> str:
    return "".join(f"{r['user']},{r['price']},{r['label']}\n" for r in rows)


def _jsonl_text(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _truncated_avro() -> tuple[bytes, int]:
    """Good records in blocks of their own, then records holding the secret, cut inside the
    last block: (file bytes, records decodable before the cut)."""
    rows = _good_rows(300, "t") + _secret_rows(3)
    data = _avro_bytes(rows, sync_interval=1)  # one record per block
    cut = data.rindex(SECRET_TEXT.encode()) + 6  # inside the last record, after its id
    assert SECRET_TEXT.encode() in data[:cut]
    return data[:cut], len(rows) - 1


def _corrupt_parquet() -> tuple[bytes, int]:
    """Row group 0 is good, row group 1 (holding the secret) has a broken page header:
    (file bytes, rows of row group 0)."""
    good = pa.Table.from_pylist(
        [{"user": f"p{i}", "price": i / 4, "label": "a"} for i in range(500)]
    )
    bad = pa.Table.from_pylist(
        [{"user": SECRET_TEXT, "price": 0.5, "label": SECRET_TEXT} for _ in range(500)]
    )
    data = bytearray(_parquet_bytes(pa.concat_tables([good, bad]), row_group_size=500))
    offset = pq.ParquetFile(io.BytesIO(bytes(data))).metadata.row_group(1).column(0)
    start = offset.data_page_offset
    data[start : start + 8] = b"\xff" * 8
    assert SECRET_TEXT.encode() in data
    return bytes(data), 500


# (format, file name, file bytes, good records that survive with skip, error pattern with fail)
Case = tuple[str, str, bytes, int, str]


def _malformed_cases() -> list[Case]:
    secret_line = f"{SECRET_TEXT},{SECRET_INT},{SECRET_TEXT}"
    ragged = (
        "user,price,label\n"
        + _csv_text(_good_rows(400, "r"))
        + f"{secret_line},{SECRET_TEXT}\n"  # one entry too many (line 402)
        + _csv_text(_good_rows(300, "s"))
        + f"{SECRET_TEXT},{SECRET_INT}\n"  # one entry short
        + _csv_text(_good_rows(300, "v"))
    ).encode()
    non_utf8_csv = ("user,price,label\n" + _csv_text(_good_rows(5, "w"))).encode() + (
        SECRET_TEXT.encode() + b"\xff\xfe,1.0,a\n"
    )
    bad_json = (
        _jsonl_text(_good_rows(200, "j"))
        + '{"user": "' + SECRET_TEXT + '", "price": ' + str(SECRET_INT) + "\n"  # line 201
        + "\n"  # blank lines are no records
        + json.dumps([SECRET_TEXT, SECRET_INT]) + "\n"  # not an object
        + json.dumps({"user": SECRET_TEXT, "label": SECRET_TEXT}) + "\n"  # no 'price'
        + json.dumps(SECRET_TEXT) + "\n"
        + _jsonl_text(_good_rows(300, "k"))
    ).encode()  # fmt: skip
    non_utf8_json = (
        _jsonl_text(_good_rows(7, "n")).encode()
        + b'{"user": "'
        + SECRET_TEXT.encode()
        + b'\xff", "price": 1.0, "label": "a"}\n'
        + _jsonl_text(_good_rows(5, "m")).encode()
    )
    avro, avro_kept = _truncated_avro()
    parquet, parquet_kept = _corrupt_parquet()
    garbage = b"\x00\x01garbage " + SECRET_TEXT.encode() + str(SECRET_INT).encode() + b"\xff" * 40
    undecodable = r"could not be decoded as {}"
    return [
        ("csv", "ragged.csv", ragged, 1000, r"ragged\.csv: line 402 does not have one entry"),
        ("csv", "latin.csv", non_utf8_csv, 0, undecodable.format("csv")),
        ("csv", "garbage.csv", garbage, 0, undecodable.format("csv")),
        ("jsonl", "lines.jsonl", bad_json, 500, r"lines\.jsonl: line 201 is not valid JSON"),
        ("jsonl", "latin.jsonl", non_utf8_json, 7, undecodable.format("jsonl") + " at line 8"),
        ("avro", "cut.avro", avro, avro_kept, undecodable.format("avro")),
        ("avro", "garbage.avro", garbage, 0, undecodable.format("avro")),
        ("parquet", "page.parquet", parquet, parquet_kept, "parquet at row group 1"),
        ("parquet", "garbage.parquet", garbage, 0, undecodable.format("parquet")),
    ]


def _write_good(directory: Path, fmt: str) -> None:
    rows = _good_rows()
    path = directory / f"good.{fmt}"
    if fmt == "csv":
        path.write_text("user,price,label\n" + _csv_text(rows))
    elif fmt == "jsonl":
        path.write_text(_jsonl_text(rows))
    elif fmt == "avro":
        path.write_bytes(_avro_bytes(rows))
    else:
        path.write_bytes(_parquet_bytes(pa.Table.from_pylist(rows)))


# --- running ------------------------------------------------------------------------------


def _run(pattern: str, on_bad_record: str, expected_rows: int | None = None) -> Any:
    """Read the export through a real pipeline; check the row count; return the result."""
    pipeline = beam.Pipeline()
    rows = (
        pipeline
        | ReadExport(pattern, columns=COLUMNS, on_bad_record=on_bad_record, batch_rows=256)  # type: ignore[arg-type]
        | beam.Map(lambda element: element[1].num_rows)
        | beam.CombineGlobally(sum)
    )
    if expected_rows is not None:
        assert_that(rows, equal_to([expected_rows]))
    result = pipeline.run()
    result.wait_until_finish()
    return result


def _read_file(
    path: Path, on_bad_record: str, columns: list[str] = COLUMNS, batch_rows: int = 256
) -> list[pa.RecordBatch]:
    """One file through the reader's DoFn, without a pipeline."""
    fmt = path.suffix[1:]
    fn = _ReadFileFn(fmt, columns, batch_rows, on_bad_record)  # type: ignore[arg-type]
    metadata = FileSystems.match([str(path)])[0].metadata_list[0]
    return [batch for _, batch in fn.process(fileio.ReadableFile(metadata))]


def _chain_text(error: BaseException) -> str:
    """Everything an exception carries: messages, reprs, causes, contexts, the traceback."""
    parts: list[str] = ["".join(traceback.format_exception(error))]
    seen: set[int] = set()
    stack: list[BaseException | None] = [error]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        parts += [str(current), repr(current), repr(current.args)]
        stack += [current.__cause__, current.__context__]
    return "\n".join(parts)


def _metrics_text(result: Any) -> str:
    query = result.metrics().query()
    return "\n".join(
        f"{item.key.step} {item.key.metric.namespace} {item.key.metric.name} {item.committed}"
        for kind in query.values()
        for item in kind
    )


def _reader_counters(result: Any) -> dict[str, int]:
    return {
        c.key.metric.name: c.committed
        for c in result.metrics().query()["counters"]
        if c.key.metric.namespace == "beam_dp"
    }


def _assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


# --- the secret audit ---------------------------------------------------------------------

CASES = _malformed_cases()


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_fail_names_file_and_rule_and_never_a_value(
    tmp_path: Path, case: Case, caplog: pytest.LogCaptureFixture
) -> None:
    fmt, name, data, _, pattern = case
    (tmp_path / name).write_bytes(data)
    with caplog.at_level(logging.DEBUG), pytest.raises(Exception) as info:
        _run(str(tmp_path / f"*.{fmt}"), "fail")
    error = info.value
    assert isinstance(error, BadRecordError), type(error)
    message = str(error).split(" [while running")[0]
    assert "\n" not in message
    assert name in message
    assert re.search(pattern, message), message
    _assert_no_secret(_chain_text(error))
    _assert_no_secret(caplog.text)


@pytest.mark.parametrize("exact", [False, True], ids=["default", "exact-counts"])
@pytest.mark.parametrize("fmt", ["csv", "jsonl", "avro", "parquet"])
def test_skip_keeps_every_good_record_and_never_shows_a_value(
    tmp_path: Path, fmt: str, exact: bool, caplog: pytest.LogCaptureFixture
) -> None:
    cases = [c for c in CASES if c[0] == fmt]
    _write_good(tmp_path, fmt)
    for _, name, data, _, _ in cases:
        (tmp_path / name).write_bytes(data)
    expected = GOOD + sum(c[3] for c in cases)
    if exact:
        telemetry.enable_exact_counts()
    try:
        with caplog.at_level(logging.DEBUG):
            result = _run(str(tmp_path / f"*.{fmt}"), "skip", expected)
    finally:
        telemetry.disable_exact_counts()
    _assert_no_secret(caplog.text)
    _assert_no_secret(_metrics_text(result))
    undecodable = [c for c in cases if c[1] not in ("ragged.csv", "lines.jsonl")]
    for _, name, _, _, _ in undecodable:  # a skipped file is named (file names are public)
        assert name in caplog.text
    counters = _reader_counters(result)
    if not exact:
        assert counters == {}, "exact counts are reported only behind the operator switch"
        assert "bad record(s)" not in caplog.text
        return
    bad_records = {"csv": 2, "jsonl": 4}.get(fmt, 0)
    assert counters.get("bad_records_skipped", 0) == bad_records
    assert counters.get("undecodable_files_skipped", 0) == len(undecodable)


# --- record-level skip, file by file ------------------------------------------------------


def test_one_ragged_row_drops_one_record_not_the_file(tmp_path: Path) -> None:
    rows = _good_rows()
    text = "user,price,label\n" + _csv_text(rows[:500]) + "x,1\n" + _csv_text(rows[500:])
    (tmp_path / "only.csv").write_text(text)
    _run(str(tmp_path / "*.csv"), "skip", GOOD)


def test_one_bad_json_line_drops_one_record_not_the_file(tmp_path: Path) -> None:
    rows = _good_rows()
    text = _jsonl_text(rows[:500]) + "{not json\n" + _jsonl_text(rows[500:])
    (tmp_path / "only.jsonl").write_text(text)
    _run(str(tmp_path / "*.jsonl"), "skip", GOOD)


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        ("[1, 2]", r"line 3 is not a JSON object"),
        ('{"user": "u", "label": "a"}', r"field 'price' is missing on line 3"),
        ("{", r"line 3 is not valid JSON"),
    ],
)
def test_fail_on_a_bad_json_line_names_the_line(tmp_path: Path, line: str, pattern: str) -> None:
    rows = _good_rows(4)
    path = tmp_path / "x.jsonl"
    path.write_text(_jsonl_text(rows[:2]) + line + "\n" + _jsonl_text(rows[2:]))
    with pytest.raises(BadRecordError, match=pattern) as info:
        _read_file(path, "fail")
    assert info.value.__context__ is None and info.value.__cause__ is None
    assert sum(batch.num_rows for batch in _read_file(path, "skip")) == 4


def test_a_file_without_a_needed_field_fails_even_with_skip(tmp_path: Path) -> None:
    # most often a misspelt field name: it must not become an empty input released at exit 0
    (tmp_path / "x.csv").write_text("user,cost,label\nu1,1.0,a\n")
    with pytest.raises(BadRecordError, match=r"x\.csv: field 'price' is missing"):
        _run(str(tmp_path / "*.csv"), "skip")


def test_parquet_stream_keeps_memory_to_a_row_group(tmp_path: Path) -> None:
    # many row groups, small batches: every batch comes from one row group, in order
    table = pa.Table.from_pylist(_good_rows(3000))
    (tmp_path / "x.parquet").write_bytes(_parquet_bytes(table, row_group_size=700))
    batches = _read_file(tmp_path / "x.parquet", "fail", columns=["user"])
    assert [b.num_rows for b in batches] == [256, 256, 188] * 4 + [200]
    assert all(b.schema.names == ["user"] for b in batches)


# --- infinity is delivered as it is -------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "avro", "parquet"])
def test_infinity_is_delivered_not_clamped_or_dropped(tmp_path: Path, fmt: str) -> None:
    rows = [
        {"user": "u1", "price": math.inf, "label": "a"},
        {"user": "u2", "price": -math.inf, "label": "a"},
        {"user": "u3", "price": 1.5, "label": "a"},
    ]
    if fmt == "csv":
        (tmp_path / "x.csv").write_text("user,price,label\n" + _csv_text(rows))
    elif fmt == "jsonl":
        (tmp_path / "x.jsonl").write_text(_jsonl_text(rows))  # Infinity / -Infinity
    elif fmt == "avro":
        (tmp_path / "x.avro").write_bytes(_avro_bytes(rows))
    else:
        (tmp_path / "x.parquet").write_bytes(_parquet_bytes(pa.Table.from_pylist(rows)))
    with beam.Pipeline() as pipeline:
        prices = (
            pipeline
            | ReadExport(str(tmp_path / f"*.{fmt}"), columns=["user", "price"])
            | beam.FlatMap(lambda element: element[1].column("price").to_pylist())
        )
        if fmt == "csv":  # text; the encoder's number rule rejects text infinities
            assert_that(prices, equal_to(["inf", "-inf", "1.5"]))
        else:
            assert_that(prices, equal_to([math.inf, -math.inf, 1.5]))


def test_a_lone_surrogate_is_one_null_not_an_undecodable_file(tmp_path: Path) -> None:
    # valid JSON, but no UTF-8 text: that value becomes null (a bad record for the encoder)
    path = tmp_path / "x.jsonl"
    path.write_text(_jsonl_text(_good_rows(3)) + '{"user": "\\ud800", "price": 1, "label": "a"}\n')
    (batch,) = _read_file(path, "fail")
    assert batch.column("user").to_pylist() == ["u0", "u1", "u2", None]
