"""An interval that spans most of the public range says so (release.json, release.avro, the
terminal and the report), since it says little more than the bounds the job was given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from export_helpers import write_export

from beam_dp.io.outputs import read_release_avro
from beam_dp.release import WIDE_INTERVAL_SHARE, ReleaseInterval
from pipelines import quantiles


def _interval(lower: float, upper: float) -> ReleaseInterval:
    return ReleaseInterval(
        quantiles=(0.25, 0.75),
        lower=(lower, 40.0),
        upper=(upper, 60.0),
        confidence=0.95,
        method="rank_bracket",
        epsilon=0.3,
        public_range=(0.0, 100.0),
    )


def test_a_wide_interval_is_named_with_its_share_of_the_range() -> None:
    record = _interval(10.0, 90.0).to_dict()
    assert record["share_of_public_range"] == pytest.approx([0.8, 0.2])
    assert "q0.25 80%" in record["note"] and "q0.75" not in record["note"]


def test_narrow_intervals_have_their_shares_and_no_note() -> None:
    record = _interval(30.0, 30.0 + 100 * WIDE_INTERVAL_SHARE).to_dict()  # exactly half: not most
    assert record["share_of_public_range"] == pytest.approx([0.5, 0.2])
    assert "note" not in record


def test_a_public_range_must_be_a_range() -> None:
    with pytest.raises(ValueError, match="public_range"):
        ReleaseInterval((0.5,), (1.0,), (2.0,), 0.95, "rank_bracket", 0.1, public_range=(1, 1))


def test_a_job_on_few_people_says_its_interval_spans_most_of_the_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 12 people, one value each, bounds [0, 1000] and epsilon 0.3: the 95% intervals cannot
    # be narrow, whatever the draw (the rank brackets need more people than there are).
    rows = [{"user": f"u{i}", "v": 500.0 + i} for i in range(12)]
    pattern = write_export(tmp_path / "export", "csv", rows, shards=1)
    out = tmp_path / "out"
    quantiles.run(
        [
            "--input",
            pattern,
            "--privacy_unit",
            "user",
            "--value",
            "v",
            "--quantiles",
            "0.5",
            "--lower",
            "0",
            "--upper",
            "1000",
            "--max_contributions",
            "1",
            "--epsilon",
            "0.3",
            "--output",
            str(out),
        ]
    )
    document = json.loads((out / "release.json").read_text())
    (released,) = document["releases"]
    assert released["interval"]["note"].startswith("intervals spanning most of the public range")
    assert read_release_avro(out / "release.avro") == document
    assert "note: quantiles: intervals spanning most" in capsys.readouterr().out
    assert "intervals spanning most of the public range" in (out / "report.html").read_text()
