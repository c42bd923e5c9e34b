"""Event time through the record rules (issue 36, finding 1): text, null and non-numeric event
times are bad records - dropped under ``on_bad_record = "skip"``, named by file and field (never
by value) under ``"fail"`` - and ``--event_time_format iso8601`` reads ISO 8601 text with an
explicit offset."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing import test_stream
from apache_beam.transforms.window import TimestampedValue

from pipelines import stream
from pipelines.cli import cli

SIZE = 60
BASE = 1_800_000_000 // SIZE * SIZE  # 2027-01-15T08:00:00Z, a window boundary
MARKER = "SECRET-MARKER-7f3a"


def _config(tmp_path: Path, on_bad_record: str) -> Path:
    config = tmp_path / "stream.toml"
    config.write_text(
        f'[input]\nprivacy_unit = "user_id"\nformat = "csv"\non_bad_record = "{on_bad_record}"'
        "\n\n[budget]\nepsilon = 2.0\n\n"
        '[[statistics]]\nname = "vote"\ntype = "election"\ncandidate = "vote"\n'
        'candidates = ["a", "b"]\nweight = 1\n'
    )
    return config


def _batch(times: list[Any]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "user_id": [f"u{i}" for i in range(len(times))],
            "vote": ["a"] * len(times),
            "ts": pa.array(times, type=pa.string()),
        }
    )


def _source(batches: list[pa.RecordBatch]) -> Any:
    def build(pipeline: beam.Pipeline) -> Any:
        test = test_stream.TestStream()
        for number, batch in enumerate(batches):
            stamp = BASE + 5 + number
            test = test.add_elements([TimestampedValue((f"shard-{number}.csv", batch), stamp)])
            test = test.advance_watermark_to(stamp + 1)
        return pipeline | test.advance_watermark_to_infinity()

    return build


def _argv(tmp_path: Path, on_bad_record: str, *extra: str) -> list[str]:
    return ["--config", str(_config(tmp_path, on_bad_record)), "--landing", "/data/x/*.csv",
            "--state", str(tmp_path / "state"), "--output", str(tmp_path / "out"),
            "--window_seconds", str(SIZE), "--grant_ahead", "2", "--poll_seconds", "0.1",
            "--event_time", "ts", "--runner", "BundleBasedDirectRunner", *extra]  # fmt: skip


def _windows(document: dict[str, Any]) -> list[str]:
    return sorted({r["event_window"] for r in document["releases"]})


# ----------------------------------------------------------------------------- the reading


def test_seconds_are_numbers_number_text_or_timestamps_and_nothing_else() -> None:
    text = pa.array(["1800000005", " 1.8e9 ", "-5", ".5", None, "", "nan", "inf", "0x10", "1_0",
                     "2027-01-15T08:00:00Z", f"{MARKER}", "1e999"])  # fmt: skip
    got = stream._event_seconds(text, "seconds")
    want = [1800000005.0, 1.8e9, -5.0, 0.5] + [math.nan] * 9
    np.testing.assert_array_equal(got, np.array(want))
    numbers = pa.array([1.5, None, float("nan"), float("inf"), 7.0])
    np.testing.assert_array_equal(
        stream._event_seconds(numbers, "seconds"), [1.5, np.nan, np.nan, np.nan, 7.0]
    )
    assert np.isnan(stream._event_seconds(pa.array([True, False]), "seconds")).all()
    stamps = pa.array([1_800_000_005_250_000, None], type=pa.timestamp("us", tz="UTC"))
    for event_format in stream.EVENT_TIME_FORMATS:
        np.testing.assert_array_equal(
            stream._event_seconds(stamps, event_format), [1_800_000_005.25, np.nan]
        )
    dictionary = pa.array(["1800000005", MARKER]).dictionary_encode()
    np.testing.assert_array_equal(
        stream._event_seconds(dictionary, "seconds"), [1800000005.0, np.nan]
    )
    chunked = pa.chunked_array([dictionary, pa.array(["7", "8"]).dictionary_encode()])
    np.testing.assert_array_equal(
        stream._event_seconds(chunked, "seconds"), [1800000005.0, np.nan, 7.0, 8.0]
    )


def test_iso8601_needs_an_explicit_offset_and_a_real_date() -> None:
    text = pa.array(
        [
            "2027-01-15T08:00:05Z",
            "2027-01-15 09:00:05+01:00",
            "2027-01-15T03:00:05.250-0500",
            "2027-01-15T08:00:05.123456789z",
            "2027-01-15T08:00Z",
            "2027-01-15T08:00:05",  # no offset
            "2027-01-15",
            "2027-02-30T08:00:05Z",  # no such day
            "2027-01-15T08:00:05+24:00",
            "2027-01-15T25:00:05Z",
            "1800000005",  # a number is not ISO text
            None,
            f"2027-01-15T08:00:05Z{MARKER}",
        ]
    )
    got = stream._event_seconds(text, "iso8601")
    want = [BASE + 5, BASE + 5, BASE + 5.25, BASE + 5.123456, BASE] + [math.nan] * 8
    np.testing.assert_array_equal(got, np.array(want, dtype=np.float64))
    assert np.isnan(stream._event_seconds(pa.array([1800000005.0]), "iso8601")).all()


# ----------------------------------------------------------------------------- the job


def test_text_and_null_event_times_are_dropped_under_skip(tmp_path: Path) -> None:
    good = [str(BASE + 5)] * 30
    bad = _batch([*good, "2027-01-15T08:00:05Z", MARKER, None, "nan"])
    document = stream.run(
        _argv(tmp_path, "skip"), source=_source([bad]), now=lambda: BASE
    )  # before: the pipeline died on pyarrow's ArrowInvalid, which quoted the value
    assert len(_windows(document)) == 1
    assert [r["name"] for r in document["releases"]] == ["vote"]


def test_iso8601_event_times_window_the_records(tmp_path: Path) -> None:
    first = _batch(["2027-01-15T08:00:05Z"] * 20 + ["2027-01-15T09:01:05+01:00"] * 20)
    document = stream.run(
        _argv(tmp_path, "fail", "--event_time_format", "iso8601"),
        source=_source([first]),
        now=lambda: BASE,
    )
    assert _windows(document) == [
        "[2027-01-15T08:00:00+00:00, 2027-01-15T08:01:00+00:00)",
        "[2027-01-15T08:01:00+00:00, 2027-01-15T08:02:00+00:00)",
    ]


def test_a_bad_event_time_under_fail_names_file_and_field_never_the_value(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    batch = _batch([str(BASE + 5)] * 10 + [f"{MARKER} 2027-01-15"])
    caplog.set_level(logging.DEBUG)
    with pytest.raises(SystemExit) as ended:
        cli(lambda: stream.run(_argv(tmp_path, "fail"), source=_source([batch]), now=lambda: BASE))
    line = str(ended.value.code)
    assert line.startswith("error: ") and "shard-0.csv" in line and "field 'ts'" in line, line
    captured = capsys.readouterr()
    seen = line + captured.out + captured.err + caplog.text
    assert MARKER not in seen
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.name != "stream.toml":
            assert MARKER.encode() not in path.read_bytes(), path
