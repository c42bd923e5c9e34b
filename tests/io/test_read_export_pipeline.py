"""ReadExport in a Beam pipeline (DirectRunner): every copy of a file gives the same records, and
the files skipped under on_bad_record='skip' are reported by name, in the output itself."""

from __future__ import annotations

import hashlib
import io
import logging
import random
from pathlib import Path
from typing import Any

import apache_beam as beam
import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.util import assert_that, equal_to

from beam_dp.io import ReadExport, SkippedFile
from beam_dp.io.avro import read_header

COLUMNS = ["user", "wage"]


def _records(batch: pa.RecordBatch) -> list[tuple[Any, ...]]:
    return list(zip(*(batch.column(c).to_pylist() for c in COLUMNS), strict=True))


def _digest(records: list[tuple[Any, ...]]) -> str:
    """The same records in any order (a file's batches may come in any order)."""
    return hashlib.sha256(repr(sorted(records)).encode()).hexdigest()


def test_every_copy_of_a_csv_file_gives_the_same_records(tmp_path: Path) -> None:
    rng = random.Random(5)
    rows = [(f"u{rng.randrange(4700)}", f"{rng.random() * 30:.4f}") for _ in range(12_000)]
    text = "user,wage,note\n" + "".join(f'{u},{w},"a, ""b""\nc"\n' for u, w in rows)
    assert len(text) > 4 * (1 << 16)  # over four times the old header block
    copies = 8
    for i in range(copies):
        (tmp_path / f"export-{i:02d}.csv").write_text(text)
    with beam.Pipeline() as pipeline:
        digests = (
            pipeline
            | ReadExport(str(tmp_path / "*.csv"), columns=COLUMNS)
            | beam.Map(lambda e: (e[0], _records(e[1])))
            | beam.CombinePerKey(lambda parts: [r for part in parts for r in part])
            | beam.Map(lambda e: _digest(e[1]))
        )
        assert_that(digests, equal_to([_digest(rows)] * copies))


# --- skipped files --------------------------------------------------------------------------

FORMATS = ["csv", "jsonl", "parquet", "avro"]
GOOD = [{"user": f"u{i}", "wage": f"{i / 4}"} for i in range(200)]
GARBAGE = b"\x00\x01garbage \xff\xfe" * 8


def _write_good(path: Path, fmt: str) -> None:
    if fmt == "csv":
        path.write_text("user,wage\n" + "".join(f"{r['user']},{r['wage']}\n" for r in GOOD))
    elif fmt == "jsonl":
        path.write_text(
            "".join(f'{{"user": "{r["user"]}", "wage": "{r["wage"]}"}}\n' for r in GOOD)
        )
    elif fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(GOOD), path)
    else:
        path.write_bytes(_avro(GOOD))


def _avro(rows: list[dict[str, Any]], sync_interval: int = 16_000) -> bytes:
    schema = {
        "type": "record",
        "name": "Row",
        "fields": [{"name": "user", "type": "string"}, {"name": "wage", "type": "string"}],
    }
    buffer = io.BytesIO()
    fastavro.writer(buffer, schema, rows, sync_interval=sync_interval)
    return buffer.getvalue()


def test_files_skipped_under_skip_are_in_the_output_by_name(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    expected: dict[str, list[str]] = {}
    for fmt in FORMATS:  # a good file, a file of garbage and an empty file in each format
        _write_good(tmp_path / f"good.{fmt}", fmt)
        (tmp_path / f"garbage.{fmt}").write_bytes(GARBAGE)
        (tmp_path / f"empty.{fmt}").write_bytes(b"")
        expected[fmt] = [str(tmp_path / f"garbage.{fmt}")]
        if fmt != "jsonl":  # an empty JSON-lines file is a valid, empty input
            expected[fmt].append(str(tmp_path / f"empty.{fmt}"))
    with caplog.at_level(logging.WARNING), beam.Pipeline() as pipeline:
        for fmt in FORMATS:
            read = pipeline | f"Read {fmt}" >> ReadExport(
                str(tmp_path / f"*.{fmt}"),
                columns=COLUMNS,
                on_bad_record="skip",
                report_skipped_files=True,
            )
            rows = (
                read
                | f"Rows {fmt}"
                >> beam.FlatMap(lambda e: [] if isinstance(e, SkippedFile) else [e[1].num_rows])
                | f"Sum {fmt}" >> beam.CombineGlobally(sum)
            )
            skipped = read | f"Skipped {fmt}" >> beam.FlatMap(
                lambda e: [e] if isinstance(e, SkippedFile) else []
            )
            assert_that(rows, equal_to([len(GOOD)]), label=f"rows {fmt}")
            assert_that(
                skipped, equal_to([SkippedFile(n) for n in expected[fmt]]), label=f"skip {fmt}"
            )
        # without report_skipped_files, the output is the (file, batch) pairs alone, as before
        kinds = (
            pipeline
            | "Read csv, no report"
            >> ReadExport(str(tmp_path / "*.csv"), columns=COLUMNS, on_bad_record="skip")
            | beam.Map(lambda e: (type(e).__name__, type(e[1]).__name__, e[0].endswith("d.csv")))
            | beam.Distinct()
        )
        assert_that(kinds, equal_to([("tuple", "RecordBatch", True)]), label="default")
    for fmt in FORMATS:  # the log line stays
        for name in expected[fmt]:
            assert f"undecodable {fmt} file ({name})" in caplog.text


def test_each_avro_range_reports_its_skip_and_distinct_names_the_file_once(
    tmp_path: Path,
) -> None:
    data = bytearray(_avro([{"user": f"u{i}", "wage": str(i)} for i in range(4000)], 2000))
    sync = read_header(io.BytesIO(bytes(data))).sync  # type: ignore[union-attr]
    markers = [i for i in range(len(data)) if data.startswith(sync, i)]
    assert len(markers) > 20
    split = len(data) // 4 + 1
    # break the sync marker after a block in the second and in the fourth range
    for at in (
        next(m for m in markers if m > split + 50),
        next(m for m in markers if m > 3 * split),
    ):
        data[at] ^= 0xFF
    path = tmp_path / "broken.avro"
    path.write_bytes(bytes(data))
    with beam.Pipeline() as pipeline:
        read = pipeline | ReadExport(
            str(path),
            columns=COLUMNS,
            on_bad_record="skip",
            report_skipped_files=True,
            avro_split_bytes=split,
        )
        skipped = read | beam.FlatMap(lambda e: [e.path] if isinstance(e, SkippedFile) else [])
        assert_that(skipped, equal_to([str(path)] * 2), label="one per range")
        assert_that(skipped | beam.Distinct(), equal_to([str(path)]), label="once with Distinct")


def test_report_skipped_files_is_a_boolean() -> None:
    with pytest.raises(ValueError, match="'report_skipped_files' must be True or False"):
        ReadExport("x.csv", columns=["a"], report_skipped_files="yes")  # type: ignore[arg-type]
