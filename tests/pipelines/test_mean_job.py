"""Issue 40, item 3: ``pipelines.mean`` is a job like the others, run here on sample_data."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from pipelines import mean
from pipelines.common import cli

SAMPLE = str(Path(__file__).resolve().parents[2] / "sample_data" / "survey" / "export-*.avro")
FLAGS = ["--input", SAMPLE, "--privacy_unit", "user_id", "--value", "weight_kg",
         "--lower", "20", "--upper", "200", "--epsilon", "1"]  # fmt: skip


def test_the_mean_job_releases_a_mean_on_the_sample_data(tmp_path: Path) -> None:
    printed = io.StringIO()
    with redirect_stdout(printed):
        document = mean.run([*FLAGS, "--output", str(tmp_path / "out")])
    (released,) = document["releases"]
    assert released["name"] == "mean" and released["statistic"] == "mean", released
    assert 20 <= released["value"] <= 200
    bounds = released["contribution_bounds"]  # the default: chosen privately (auto)
    assert bounds["max_contributions_cap"] >= bounds["max_contributions_per_unit"] >= 1, bounds
    assert released["accuracy"]["epsilon_bound_choice"] == pytest.approx(0.1)
    assert document["budget"]["epsilon_spent"] == 1.0
    on_disk = json.loads((tmp_path / "out" / "release.json").read_text())
    assert on_disk["releases"][0]["value"] == released["value"]
    assert "mean" in printed.getvalue() and "budget" in printed.getvalue()


def test_the_mean_jobs_flags_reach_the_statistic(tmp_path: Path) -> None:
    argv = [*FLAGS, "--relation", "replace", "--n", "1000", "--resolution", "0.5",
            "--max_contributions", "2", "--name", "weight",
            "--output", str(tmp_path / "o")]  # fmt: skip
    with redirect_stdout(io.StringIO()):
        document = mean.run(argv)
    (released,) = document["releases"]
    assert released["name"] == "weight"
    assert (released["value"] * 2) == int(released["value"] * 2)  # a multiple of 0.5
    assert released["contribution_bounds"]["max_contributions_per_unit"] == 2


def test_a_misspelt_mean_flag_names_the_nearest(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        cli(lambda: mean.run([*FLAGS, "--num_point", "10", "--output", str(tmp_path / "o")]))
    assert "--num_points" in str(exited.value.code)
