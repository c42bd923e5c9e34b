"""The jobs choose the identity rule of their privacy unit: ``--unit_ids`` (``[input]
unit_ids`` in a release config), ``normalize`` by default, recorded when ``exact``."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from export_helpers import write_export

from pipelines import election, release


def _argv(pattern: str, out: Path, *extra: str) -> list[str]:
    return ["--input", pattern, "--privacy_unit", "user_id", "--candidate", "vote",
            "--candidates", "a,b", "--epsilon", "1", "--output", str(out), *extra]  # fmt: skip


@pytest.mark.parametrize(("flag", "recorded"), [([], None), (["--unit_ids", "exact"], 1)])
def test_the_unit_id_rule_is_a_job_flag(tmp_path: Path, flag: list[str], recorded: object) -> None:
    rows = [{"user_id": f"{i}.0" if i % 2 else str(i), "vote": "a"} for i in range(40)]
    pattern = write_export(tmp_path / "in", "csv", rows, shards=1)
    with redirect_stdout(io.StringIO()):
        document = election.run(_argv(pattern, tmp_path / "out", *flag))
    (only,) = document["releases"]
    assert only["contribution_bounds"].get("exact_unit_ids") == recorded


def test_a_misspelt_rule_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        election.run(_argv("x.csv", tmp_path / "out", "--unit_ids", "exakt"))
    assert info.value.code == 2
    config = tmp_path / "job.toml"
    config.write_text(
        '[input]\npath = "x.csv"\nprivacy_unit = "u"\nunit_ids = "exakt"\n\n[budget]\n'
        'epsilon = 1.0\n\n[[statistics]]\nname = "v"\ntype = "election"\ncandidate = "c"\n'
        'candidates = ["a", "b"]\n'
    )
    with pytest.raises(ValueError, match="unit_ids"):
        release.run(["--config", str(config), "--output", str(tmp_path / "out")])
