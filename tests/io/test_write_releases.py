"""``WriteReleases`` (issue 24): a pipeline's releases written as release.json, release.avro
and report.html by Beam's own sinks, on a local folder and on a registered remote scheme; the
overwrite rule is checked before the pipeline runs."""

from __future__ import annotations

import json
from pathlib import Path

import apache_beam as beam
import fastavro
import pyarrow as pa
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_dp import PrivateMedian, TopCandidates, WriteReleases
from beam_dp.io.outputs import OUTPUT_FILES

ROWS = [{"u": i, "c": "a" if i % 3 else "b", "v": float(i % 10)} for i in range(300)]


def _write(output: str, **options: object) -> None:
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        table = pipeline | beam.Create([pa.Table.from_pylist(ROWS)])
        top = table | "top" >> TopCandidates.Globally(
            candidate_column="c", candidates=["a", "b"], unit_column="u", epsilon=1.0
        )
        median = table | "median" >> PrivateMedian.Globally(
            value_column="v", lower=0.0, upper=10.0, unit_column="u", epsilon=1.0
        )
        _ = (top, median) | beam.Flatten() | WriteReleases(output, **options)  # type: ignore[arg-type]


def _check(folder: Path) -> None:
    assert sorted(p.name for p in folder.iterdir()) == sorted(OUTPUT_FILES)
    document = json.loads((folder / "release.json").read_text(encoding="utf-8"))
    assert [r["name"] for r in document["releases"]] == ["median", "top_candidates"]
    with open(folder / "release.avro", "rb") as handle:
        assert [r["name"] for r in fastavro.reader(handle)] == ["median", "top_candidates"]
    page = (folder / "report.html").read_text(encoding="utf-8")
    assert "top_candidates" in page and "median" in page


def test_the_three_files_land_in_a_local_folder_and_are_not_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _write(str(out))
    _check(out)
    with pytest.raises(ValueError, match=r"already holds release\.json"):
        WriteReleases(str(out))
    _write(str(out), overwrite=True)
    _check(out)


def test_the_files_land_on_a_registered_remote_filesystem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import scheme_filesystem

    monkeypatch.setenv("BEAM_DP_TEST_FS_ROOT", str(tmp_path / "bucket-root"))
    assert scheme_filesystem.SchemeFileSystem.scheme() == "beamdptest"
    _write("beamdptest://bucket/out")
    _check(tmp_path / "bucket-root" / "bucket" / "out")
    with pytest.raises(ValueError, match="already holds"):
        WriteReleases("beamdptest://bucket/out")
