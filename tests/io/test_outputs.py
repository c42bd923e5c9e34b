"""release.json / release.avro round-trip, atomic output directories, the HTML report."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from beam_dp.accounting import PrivacyBudget
from beam_dp.io import outputs
from beam_dp.io.outputs import (
    MANIFEST_FILE,
    OUTPUT_FILES,
    IncompleteReleaseError,
    atomic_output_dir,
    check_release,
    read_release_avro,
    write_outputs,
)
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
    assert sorted(p.name for p in out.iterdir()) == sorted([*OUTPUT_FILES, MANIFEST_FILE])
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
    assert sorted(p.name for p in landed.iterdir()) == sorted([*OUTPUT_FILES, MANIFEST_FILE])
    assert not (Path.cwd() / "beamdptest:").exists()  # not a local path named like the URL
    assert FileSystems.exists(f"{url}/release.json")
    assert read_release_avro(f"{url}/release.avro") == json.loads(json.dumps(document))
    # --overwrite replaces the files; a second write leaves one of each, no partial files
    write_outputs(document, url)
    assert sorted(p.name for p in landed.iterdir()) == sorted([*OUTPUT_FILES, MANIFEST_FILE])
    assert check_release(url) == "r1"


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


# ------------------------------------------------ publication all or nothing (issue 36)

_KILL_CHILD = """
import json, os, sys
from beam_dp.io import outputs
target, document, kill_at = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
calls = [0]
def dies_at(step):
    def call(*args, **kwargs):
        if calls[0] == kill_at:
            os._exit(9)  # as SIGKILL: no cleanup runs
        calls[0] += 1
        return step(*args, **kwargs)
    return call
os.rename, os.replace, os.remove = dies_at(os.rename), dies_at(os.replace), dies_at(os.remove)
if hasattr(outputs, "_exchange"):
    outputs._exchange = dies_at(outputs._exchange)
outputs.write_outputs(document, target)
print("published")
"""


def _run_document(run_id: str) -> dict[str, object]:
    return {**_document(), "run": {"id": run_id, "released_at": "2026-12-07T00:00:00Z"}}


def _avro_run(path: Path) -> str:
    """The run id in a ``release.avro``'s metadata (read without the manifest check)."""
    import fastavro

    with path.open("rb") as handle:
        return str(json.loads(fastavro.reader(handle).metadata["beam_dp.run"])["id"])


def _which_release(target: Path, releases: dict[str, dict[str, bytes]]) -> str:
    """``"nothing"`` or the run whose three files ``target`` holds; fails on a mix (Avro
    files carry a random sync marker: theirs is told by the run in their metadata)."""
    if not target.exists():
        return "nothing"
    present = sorted(name for name in OUTPUT_FILES if (target / name).exists())
    assert present == sorted(OUTPUT_FILES), f"{target} holds a partial release: {present}"
    reports = {
        run for run, files in releases.items()
        if (target / "report.html").read_bytes() == files["report.html"]
    }  # fmt: skip
    assert reports, f"{target} holds a report of no run"
    runs = {
        json.loads((target / "release.json").read_text())["run"]["id"],
        _avro_run(target / "release.avro"),
        *(reports if len(reports) == 1 else ()),  # the same page for both: it tells nothing
    }
    assert len(runs) == 1, f"{target} holds a mixed release: {sorted(runs)}"
    return runs.pop()


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_writer_killed_at_any_step_leaves_a_whole_release_or_none(
    tmp_path: Path, overwrite: bool
) -> None:
    """Killed before each rename, replace, remove or exchange in turn: the output holds the
    earlier whole release, the new whole release, or nothing, never a mix."""
    new = _run_document("new")
    releases = {"new": outputs.output_files(new)}
    if overwrite:
        releases["old"] = outputs.output_files(_run_document("old"))
    seen = set()
    for kill_at in range(30):
        target = tmp_path / f"case{kill_at}" / "out"
        if overwrite:
            write_outputs(_run_document("old"), target)
        done = subprocess.run(
            [sys.executable, "-c", _KILL_CHILD, str(target), json.dumps(new), str(kill_at)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode in (0, 9), done.stderr
        state = _which_release(target, releases)
        seen.add(state)
        if state != "nothing":
            assert check_release(target) == state
        if done.returncode == 0:
            assert state == "new"
            break
    else:
        raise AssertionError("the writer never finished")
    assert "new" in seen


def test_a_shared_output_directory_keeps_its_other_files_and_readers_see_no_mix(
    tmp_path: Path,
) -> None:
    """``make run`` keeps its ledger in ``out/``: the folder is not replaced; killed between
    two files, readers refuse the mix (the manifest went first)."""
    target = tmp_path / "out"
    write_outputs(_run_document("old"), target)
    (target / "ledger.db").write_bytes(b"ledger")
    new = _run_document("new")
    done = subprocess.run(
        [sys.executable, "-c", _KILL_CHILD, str(target), json.dumps(new), "1"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 9, done.stderr
    assert (target / "ledger.db").read_bytes() == b"ledger"
    assert not (target / MANIFEST_FILE).exists()
    with pytest.raises(IncompleteReleaseError, match="holds no whole release"):
        check_release(target)
    with pytest.raises(IncompleteReleaseError, match="holds no whole release"):
        read_release_avro(target / "release.avro")
    write_outputs(new, target)
    assert check_release(target) == "new"
    assert (target / "ledger.db").read_bytes() == b"ledger"


def test_readers_refuse_a_release_avro_its_manifest_does_not_name(tmp_path: Path) -> None:
    first = Path(write_outputs(_run_document("r1"), tmp_path / "a"))
    second = Path(write_outputs(_run_document("r2"), tmp_path / "b"))
    (first / "release.avro").write_bytes((second / "release.avro").read_bytes())
    with pytest.raises(IncompleteReleaseError, match=r"release\.avro is not the file"):
        read_release_avro(first / "release.avro")
    with pytest.raises(IncompleteReleaseError, match=r"release\.avro is not the file"):
        check_release(first)
    assert read_release_avro(first / "release.avro", check_manifest=False)["run"]["id"] == "r2"
    (second / MANIFEST_FILE).unlink()
    with pytest.raises(IncompleteReleaseError, match=f"{MANIFEST_FILE} is missing"):
        read_release_avro(second / "release.avro")


def _ended_process_owner() -> str:
    """The owner text of a process of this host that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    started = outputs._start_time(child.pid)
    child.wait()
    return f"{outputs._owner().split('_')[0]}_{child.pid}_{started}"


def test_a_killed_writers_staging_is_removed_by_the_next_write_never_a_live_ones(
    tmp_path: Path,
) -> None:
    target = tmp_path / "out"
    dead = tmp_path / f".out.partial-{_ended_process_owner()}_{'a' * 32}"
    aside = tmp_path / f".out.replaced-{_ended_process_owner()}_{'b' * 32}"
    live = tmp_path / f".out.partial-{outputs._owner()}_{'c' * 32}"
    other_host = tmp_path / f".out.partial-elsewhere_1_1_{'d' * 32}"
    for folder in (dead, aside, live, other_host):
        folder.mkdir()
        (folder / "release.json").write_text("{}")
    write_outputs(_run_document("r1"), target)
    assert not dead.exists() and not aside.exists()
    assert live.exists() and other_host.exists()
    assert check_release(target) == "r1"


def test_the_staging_folder_is_private_until_it_is_published(tmp_path: Path) -> None:
    previous = os.umask(0o002)
    try:
        with atomic_output_dir(tmp_path / "out") as staging:
            assert stat.S_IMODE(staging.stat().st_mode) == 0o700
            (staging / "release.json").write_text("{}")
        assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o775
    finally:
        os.umask(previous)


def test_extra_files_are_published_under_the_same_manifest(tmp_path: Path) -> None:
    """The stream job's ``releases.jsonl`` rides with the three files, all or nothing."""
    target = tmp_path / "out"
    write_outputs(_run_document("r1"), target, extra_files={"releases.jsonl": b"{}\n"})
    assert (target / "releases.jsonl").read_bytes() == b"{}\n"
    assert check_release(target) == "r1"
    (target / "releases.jsonl").write_bytes(b"")
    with pytest.raises(IncompleteReleaseError, match=r"releases\.jsonl is not the file"):
        check_release(target)
    with pytest.raises(ValueError, match=r"'extra_files' may not hold a file named 'report\.html'"):
        write_outputs(_run_document("r2"), target, extra_files={"report.html": b""})


def test_an_output_that_cannot_be_renamed_or_staged_beside_gets_its_files_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mount point (rename(2): EBUSY) and an output whose parent is not writable still get
    a whole release, under the manifest rule, and nothing staged is left."""
    import errno

    target = tmp_path / "out"
    write_outputs(_run_document("r1"), target)
    real_mkdir, real_rename = os.mkdir, os.rename

    def no_sibling(path: object, *args: object) -> None:
        if Path(str(path)).parent == tmp_path:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        real_mkdir(path, *args)  # type: ignore[arg-type]

    def busy(source: object, destination: object) -> None:
        if Path(str(source)) == target:
            raise OSError(errno.EBUSY, "Device or resource busy", str(source))
        real_rename(source, destination)  # type: ignore[arg-type]

    def exchange_busy(first: Path, second: Path) -> bool:
        raise OSError(errno.EBUSY, "Device or resource busy", str(second))

    monkeypatch.setattr(os, "rename", busy)
    monkeypatch.setattr(outputs, "_exchange", exchange_busy)
    write_outputs(_run_document("r2"), target)
    assert check_release(target) == "r2"
    monkeypatch.setattr(os, "mkdir", no_sibling)
    write_outputs(_run_document("r3"), target)
    assert check_release(target) == "r3"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(p.name for p in target.iterdir()) == sorted([*OUTPUT_FILES, MANIFEST_FILE])
