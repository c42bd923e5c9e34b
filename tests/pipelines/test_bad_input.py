"""Bad input ends a job with one message naming file, field and rule, never a value, and
leaves no partial output; with --on_bad_record skip the bad records are dropped and counted."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from export_helpers import write_export

from pipelines import best_price
from pipelines.common import cli

SECRET = 987654.25  # a record's value that must never appear in a message


def _rows(bad: dict[str, object] | None = None) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = [
        {"user_id": f"u{i}", "price": 0.5 + i / 100} for i in range(20)
    ]
    if bad is not None:
        rows.append(bad)
    return rows


def _run(pattern: str, out: Path, *extra: str) -> None:
    argv = ["--input", pattern, "--privacy_unit", "user_id", "--value", "price",
            "--epsilon", "1.0", "--output", str(out), *extra]  # fmt: skip
    cli(lambda: best_price.run(argv))


def _fails(pattern: str, out: Path, *expected: str) -> str:
    with pytest.raises(SystemExit) as info:
        _run(pattern, out)
    message = str(info.value.code)
    for part in expected:
        assert part in message, message
    assert str(SECRET) not in message and "987654" not in message
    assert not out.exists(), "a failed job must leave nothing in its output directory"
    return message


def test_missing_field(tmp_path: Path) -> None:
    pattern = write_export(tmp_path / "in", "csv", [{"user_id": "u1", "cost": SECRET}], shards=1)
    _fails(pattern, tmp_path / "out", "export-00000.csv", "field 'price' is missing", "rule")


def test_wrong_type(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    pq.write_table(
        pa.table({"user_id": ["u1"], "price": [True]}), tmp_path / "in" / "export-00000.parquet"
    )
    _fails(
        str(tmp_path / "in" / "*.parquet"),
        tmp_path / "out",
        "export-00000.parquet",
        "field 'price'",
        "must be numeric",
    )


@pytest.mark.parametrize("fmt", ["avro", "jsonl", "csv"])
def test_nan_fails_or_is_skipped_and_counted(
    tmp_path: Path, fmt: str, caplog: pytest.LogCaptureFixture
) -> None:
    rows = [*_rows({"user_id": "u-bad", "price": math.nan}), {"user_id": "u-x", "price": SECRET}]
    pattern = write_export(tmp_path / "in", fmt, rows, shards=1)
    # No count in the message: how many records broke a rule is data-dependent (issue 8).
    _fails(pattern, tmp_path / "out", "export-00000", "field 'price' must be a number")
    with caplog.at_level(logging.INFO):
        _run(pattern, tmp_path / "out", "--on_bad_record", "skip", "--log_exact_counts")
    document = json.loads((tmp_path / "out" / "release.json").read_text())
    assert document["releases"][0]["name"] == "best_price"
    assert "bad_records_skipped: 1\n" in caplog.text + "\n"
    assert "987654" not in caplog.text


def test_undecodable_file(tmp_path: Path) -> None:
    pattern = write_export(tmp_path / "in", "avro", _rows(), shards=1)
    (tmp_path / "in" / "export-00001.avro").write_bytes(
        b"Obj\x01 not really avro " + str(SECRET).encode()
    )
    _fails(pattern, tmp_path / "out", "export-00001.avro", "could not be decoded as avro")
    _run(pattern, tmp_path / "skipped", "--on_bad_record", "skip")
    assert (tmp_path / "skipped" / "release.json").exists()


def test_empty_input_is_still_a_valid_release(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    schema = {"type": "record", "name": "Row", "fields": [
        {"name": "user_id", "type": "string"}, {"name": "price", "type": "double"}]}  # fmt: skip
    with (tmp_path / "in" / "export-00000.avro").open("wb") as handle:
        fastavro.writer(handle, schema, [])
    _run(str(tmp_path / "in" / "*.avro"), tmp_path / "out")
    document = json.loads((tmp_path / "out" / "release.json").read_text())
    release = document["releases"][0]
    assert 0.01 <= release["value"] <= 1.99  # a price chosen by the mechanism from no data
    assert document["budget"]["epsilon_spent"] == 1.0
