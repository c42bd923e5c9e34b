"""Reading exports in all four formats, and the bad-input rules."""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam
import fastavro
import numpy as np
import pytest
from apache_beam.testing.util import assert_that, equal_to
from export_helpers import write_export

from beam_dp.batching import VALUE
from beam_dp.beam._contributions import EncodeBatches
from beam_dp.io import ReadExport, detect_format

ROWS = [
    {"user": "u1", "site": "a.com", "price": 0.5},
    {"user": "u2", "site": "b.com", "price": 1.25},
    {"user": "u1", "site": "b.com", "price": 0.75},
]
SECRET_VALUE = 987654.25


def _values(pattern: str, **kwargs: object) -> list[float]:
    out: list[float] = []
    with beam.Pipeline() as pipeline:
        values = (
            pipeline
            | ReadExport(pattern, columns=["user", "price"], **kwargs)  # type: ignore[arg-type]
            | EncodeBatches(unit_column="user", value_column="price", on_bad_record="skip")
            | beam.FlatMap(lambda b: b[VALUE].tolist())
        )
        assert_that(values, equal_to([0.5, 1.25, 0.75]))
    return out


@pytest.mark.parametrize("fmt", ["avro", "parquet", "csv", "jsonl"])
def test_every_format_reads_the_same_values(tmp_path: Path, fmt: str) -> None:
    pattern = write_export(tmp_path / fmt, fmt, ROWS)
    assert detect_format(pattern) == fmt
    _values(pattern)


@pytest.mark.parametrize("fmt", ["avro", "parquet", "csv", "jsonl"])
def test_missing_field_names_file_and_field(tmp_path: Path, fmt: str) -> None:
    rows = [{"user": "u1", "cost": SECRET_VALUE}]
    pattern = write_export(tmp_path / fmt, fmt, rows, shards=1)
    with pytest.raises(Exception, match=r"export-00000\.\w+: field 'price' is missing") as info:
        _values(pattern)
    assert str(SECRET_VALUE) not in str(info.value)


@pytest.mark.parametrize("fmt", ["avro", "parquet", "csv", "jsonl"])
def test_undecodable_file_fails_or_is_skipped(tmp_path: Path, fmt: str) -> None:
    pattern = write_export(tmp_path / fmt, fmt, ROWS)
    bad = tmp_path / fmt / f"export-99999.{pattern.rsplit('.', 1)[1]}"
    bad.write_bytes(b"\x00\x01garbage " + str(SECRET_VALUE).encode() + b"\xff" * 40)
    with pytest.raises(
        Exception, match=rf"export-99999\.{fmt}: could not be decoded as {fmt}"
    ) as info:
        _values(pattern)
    assert str(SECRET_VALUE) not in str(info.value).split("Traceback")[0]
    _values(pattern, on_bad_record="skip")  # every format, Parquet included


def test_pattern_without_files_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"Empty match for pattern .*nothing-"):
        _values(str(tmp_path / "nothing-*.avro"))


def test_empty_files_are_a_valid_empty_input(tmp_path: Path) -> None:
    directory = tmp_path / "empty"
    directory.mkdir()
    schema = {
        "type": "record",
        "name": "Row",
        "fields": [{"name": "user", "type": "string"}, {"name": "price", "type": "double"}],
    }
    with (directory / "export-00000.avro").open("wb") as handle:
        fastavro.writer(handle, schema, [])
    with beam.Pipeline() as pipeline:
        count = (
            pipeline
            | ReadExport(str(directory / "*.avro"), columns=["user", "price"])
            | EncodeBatches(unit_column="user", value_column="price")
            | beam.combiners.Count.Globally()
        )
        assert_that(count, equal_to([0]))


def test_unknown_format_and_bad_parameters() -> None:
    with pytest.raises(ValueError, match="cannot tell the format"):
        detect_format("data.xlsx")
    assert detect_format("a/b/export-*.csv.gz") == "csv"
    with pytest.raises(ValueError, match="'input_format' must be one of"):
        ReadExport("x.avro", columns=["a"], input_format="orc")
    with pytest.raises(ValueError, match="'columns' must name at least one field"):
        ReadExport("x.avro", columns=[])
    assert np.isfinite(SECRET_VALUE)


def test_relative_patterns_are_resolved_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_export(tmp_path / "rel", "parquet", ROWS)
    monkeypatch.chdir(tmp_path)
    _values("rel/export-*.parquet")
