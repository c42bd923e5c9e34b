"""Issue 40, item 2: one export in mixed formats is read by one job.

Each file is read in the format its suffix names (``input_format`` is the format of the files
whose suffix names none); a list of patterns is one input (a file two patterns match is read
once); and one person whose rows sit in a Parquet shard and a CSV shard is bounded as one
person.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.util import assert_that, equal_to

from beam_dp.batching.bounding import ContributionBounds
from beam_dp.batching.columns import num_rows
from beam_dp.beam._contributions import BoundContributions, EncodeBatches
from beam_dp.io import ReadExport
from beam_dp.io.readers import file_format
from pipelines import election, release

PEOPLE = 40


def _mixed(directory: Path) -> None:
    """Every person once in a Parquet shard (integer ids) and once in a CSV shard (``12.0``,
    as pandas writes an integer column with a null), and a suffix-less CSV shard of the same
    people (read as ``input_format`` says)."""
    directory.mkdir(parents=True, exist_ok=True)
    votes = ["a" if i % 3 else "b" for i in range(PEOPLE)]
    pq.write_table(
        pa.table({"nr": list(range(PEOPLE)), "vote": votes}), directory / "part-0.parquet"
    )
    lines = ["nr,vote", *(f"{i}.0,{votes[i]}" for i in range(PEOPLE))]
    (directory / "part-1.csv").write_text("\n".join(lines) + "\n")


def _kept(pattern: str | list[str], input_format: str | None = None) -> list[int]:
    with beam.Pipeline() as pipeline:
        kept = (
            pipeline
            | ReadExport(pattern, columns=["vote"], unit_column="nr", input_format=input_format)
            | EncodeBatches(unit_column="nr")
            | BoundContributions(ContributionBounds(max_contributions_per_unit=1))
            | beam.Map(num_rows)
            | beam.CombineGlobally(sum)
        )
        assert_that(kept, equal_to([PEOPLE]))  # one row per person, from either shard
    return [PEOPLE]


def test_a_person_in_a_parquet_and_a_csv_shard_is_bounded_as_one(tmp_path: Path) -> None:
    _mixed(tmp_path / "x")
    _kept(str(tmp_path / "x" / "part-*"))


def test_a_list_of_patterns_is_one_input_each_file_read_once(tmp_path: Path) -> None:
    _mixed(tmp_path / "x")
    pattern = str(tmp_path / "x" / "part-*")
    _kept([str(tmp_path / "x" / "*.parquet"), str(tmp_path / "x" / "*.csv"), pattern])


def test_input_format_is_the_format_of_the_files_whose_suffix_names_none(
    tmp_path: Path,
) -> None:
    assert file_format("a/part-0.parquet", "csv") == "parquet"
    assert file_format("a/part-0", "csv") == "csv"
    assert file_format("a/part-0.csv.gz") == "csv"
    with pytest.raises(ValueError, match="cannot tell the format of 'a/part-0'"):
        file_format("a/part-0")
    with pytest.raises(ValueError, match="'input_format' must be one of"):
        file_format("a/part-0.csv", "orc")
    _mixed(tmp_path / "x")
    (tmp_path / "x" / "part-1.csv").rename(tmp_path / "x" / "part-1")  # a bare name: csv
    _kept(str(tmp_path / "x" / "part-*"), input_format="csv")


def test_a_job_reads_an_export_in_two_formats(tmp_path: Path) -> None:
    _mixed(tmp_path / "x")
    argv = ["--input", str(tmp_path / "x" / "part-*"), "--privacy_unit", "nr",
            "--candidate", "vote", "--candidates", "a,b", "--epsilon", "1",
            "--output", str(tmp_path / "out")]  # fmt: skip
    with redirect_stdout(io.StringIO()):
        document = election.run(argv)
    assert document["releases"][0]["value"] in ("a", "b")


def test_a_toml_path_takes_a_list(tmp_path: Path) -> None:
    _mixed(tmp_path / "x")
    config = tmp_path / "job.toml"
    config.write_text(
        """
[input]
path = ["x/*.parquet", "x/*.csv"]
privacy_unit = "nr"

[budget]
epsilon = 1

[[statistics]]
name = "vote"
type = "election"
candidate = "vote"
candidates = ["a", "b"]
"""
    )
    with redirect_stdout(io.StringIO()):
        release.run(["--config", str(config), "--output", str(tmp_path / "out")])
    document = json.loads((tmp_path / "out" / "release.json").read_text())
    assert document["releases"][0]["value"] in ("a", "b")
