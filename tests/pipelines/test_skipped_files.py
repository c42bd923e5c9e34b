"""Files skipped as undecodable under ``--on_bad_record skip`` are named in release.json and in
the terminal summary, not only in a log line (issue 22, item 1)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

from export_helpers import write_export

from beam_dp.io.outputs import read_release_avro
from pipelines import election


def test_a_skipped_file_is_listed_in_the_outputs_and_the_summary(tmp_path: Path) -> None:
    rows = [{"user_id": f"u{i}", "vote": "a" if i % 3 else "b"} for i in range(90)]
    pattern = write_export(tmp_path / "in", "parquet", rows, shards=3)
    broken = sorted((tmp_path / "in").iterdir())[1]
    broken.write_bytes(b"PAR1 this is not a parquet file " * 64)
    argv = ["--input", pattern, "--privacy_unit", "user_id", "--candidate", "vote",
            "--candidates", "a,b", "--epsilon", "1", "--output", str(tmp_path / "out"),
            "--on_bad_record", "skip"]  # fmt: skip
    printed = io.StringIO()
    with redirect_stdout(printed):
        document = election.run(argv)
    assert document["skipped_files"] == [str(broken)]
    written = json.loads((tmp_path / "out" / "release.json").read_text())
    assert written["skipped_files"] == [str(broken)]
    assert read_release_avro(tmp_path / "out" / "release.avro")["skipped_files"] == [str(broken)]
    summary = printed.getvalue()
    assert "skipped as undecodable" in summary and str(broken) in summary
    assert [release["name"] for release in document["releases"]] == ["election"]


def test_without_skip_nothing_is_listed(tmp_path: Path) -> None:
    rows = [{"user_id": f"u{i}", "vote": "a"} for i in range(30)]
    pattern = write_export(tmp_path / "in", "csv", rows, shards=1)
    argv = ["--input", pattern, "--privacy_unit", "user_id", "--candidate", "vote",
            "--candidates", "a,b", "--epsilon", "1", "--output", str(tmp_path / "out")]  # fmt: skip
    with redirect_stdout(io.StringIO()):
        document = election.run(argv)
    assert "skipped_files" not in document
