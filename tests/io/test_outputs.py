"""release.json / release.avro round-trip, atomic output directories, the HTML report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from beam_dp.accounting import PrivacyBudget
from beam_dp.io.outputs import OUTPUT_FILES, atomic_output_dir, read_release_avro, write_outputs
from beam_dp.release import make_release, release_document


def _document() -> dict[str, object]:
    budget = PrivacyBudget(1.0)
    budget.spend("median_age", mechanism="permute_and_flip", epsilon=0.5)
    budget.spend("top_site", mechanism="exponential", epsilon=0.25)
    releases = [
        make_release(
            name="median_age",
            statistic="median",
            value=41.5,
            mechanism="permute_and_flip",
            epsilon=0.5,
            sensitivity=0.5,
            neighbouring="add_remove",
            monotone=False,
            num_candidates=1001,
            contribution_bounds={"max_contributions_per_unit": 1},
            extra_accuracy={"rank_error": 27.6, "cell_width": 0.1},
        ),
        make_release(
            name="top_site",
            statistic="top_candidates",
            value=["a.com"],
            mechanism="exponential",
            epsilon=0.25,
            sensitivity=1.0,
            neighbouring="add_remove",
            monotone=True,
            num_candidates=100,
            contribution_bounds={"max_candidates_per_unit": 3},
            key="fr",
        ),
    ]
    for release in releases:
        budget.record(release.ledger)
    return release_document(releases, budget.to_json())


def test_json_and_avro_round_trip(tmp_path: Path) -> None:
    document = _document()
    out = Path(write_outputs(document, tmp_path / "out"))
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUT_FILES)
    from_json = json.loads((out / "release.json").read_text())
    assert from_json == json.loads(json.dumps(document))
    assert read_release_avro(out / "release.avro") == from_json
    assert from_json["budget"]["epsilon_spent"] <= from_json["budget"]["epsilon_total"]
    for release in from_json["releases"]:
        for field in (
            "name",
            "statistic",
            "value",
            "mechanism",
            "epsilon",
            "delta",
            "sensitivity",
            "neighbouring",
            "monotone",
            "num_candidates",
            "contribution_bounds",
            "accuracy",
        ):
            assert field in release
        assert "confidence" in release["accuracy"]


def test_failed_job_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "out"
    with pytest.raises(RuntimeError, match="boom"), atomic_output_dir(target) as staging:
        (staging / "release.json").write_text("{}")
        raise RuntimeError("boom")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_report_shows_released_values(tmp_path: Path) -> None:
    out = Path(write_outputs(_document(), tmp_path / "out"))
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "41.5" in page and "a.com" in page and "median_age" in page and "top_site" in page


def test_outputs_land_on_a_registered_remote_filesystem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import scheme_filesystem
    from apache_beam.io.filesystems import FileSystems

    monkeypatch.setenv("BEAM_DP_TEST_FS_ROOT", str(tmp_path / "bucket-root"))
    assert scheme_filesystem.SchemeFileSystem.scheme() == "beamdptest"
    url = "beamdptest://bucket/out"
    document = {**_document(), "run": {"id": "r1", "released_at": "2026-11-27T00:00:00Z"}}
    assert write_outputs(document, url) == url
    landed = tmp_path / "bucket-root" / "bucket" / "out"
    assert sorted(p.name for p in landed.iterdir()) == sorted(OUTPUT_FILES)
    assert not (Path.cwd() / "beamdptest:").exists()  # not a local path named like the URL
    assert FileSystems.exists(f"{url}/release.json")
    assert read_release_avro(f"{url}/release.avro") == json.loads(json.dumps(document))
    # --overwrite replaces the files; a second write leaves one of each, no partial files
    write_outputs(document, url)
    assert sorted(p.name for p in landed.iterdir()) == sorted(OUTPUT_FILES)


def test_release_avro_is_typed_for_polars_and_pyarrow(tmp_path: Path) -> None:
    import fastavro
    import polars as pl
    import pyarrow as pa

    document = {**_document(), "run": {"id": "r1", "released_at": "2026-11-27T00:00:00Z"}}
    out = Path(write_outputs(document, tmp_path / "out"))
    with (out / "release.avro").open("rb") as handle:
        reader = fastavro.reader(handle)
        schema = json.dumps(reader.writer_schema)
        rows = list(reader)
    assert '"map"' not in schema  # no map fields
    frame = pl.read_avro(out / "release.avro")
    assert frame["name"].to_list() == ["median_age", "top_site"]
    assert frame["value_number"].to_list() == [41.5, None]
    assert frame["value_texts"].to_list() == [None, ["a.com"]]
    assert frame["key_text"].to_list() == [None, "fr"]
    assert frame["run_id"].to_list() == ["r1", "r1"]
    table = pa.Table.from_pylist(rows)
    assert table.schema.field("accuracy").type == pa.list_(
        pa.struct([("name", pa.string()), ("value", pa.float64()), ("unit", pa.string())])
    )
    medians = [a["value"] for a in rows[0]["accuracy"] if a["name"] == "rank_error"]  # type: ignore[index]
    assert medians == [27.6]
