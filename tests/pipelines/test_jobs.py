"""End-to-end runs of every job on tiny exports, in all four formats."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from export_helpers import write_export

from beam_dp.io.outputs import read_release_avro
from pipelines import best_price, election, quantiles, release, top_candidates

SITES = ["a.com", "b.com", "c.com"]
PARTIES = ["Gyudon Party", "Melon-pan Party"]
LEDGER_FIELDS = (
    "name", "statistic", "value", "mechanism", "epsilon", "delta", "sensitivity",
    "neighbouring", "monotone", "num_candidates", "contribution_bounds", "accuracy",
)  # fmt: skip


def survey_rows(num_users: int = 60, seed: int = 3) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    rows = []
    for user in range(num_users):
        for visit in range(1 + user % 3):
            rows.append(
                {
                    "user_id": f"u{user}",
                    "website": SITES[0] if visit == 0 else SITES[int(rng.integers(3))],
                    "price": round(float(rng.uniform(0.2, 1.5)), 2),
                    "vote": PARTIES[1] if user % 4 else PARTIES[0],
                    "weight": round(float(rng.normal(70, 10)), 1),
                }
            )
    return rows


def check_outputs(out: Path, expected_names: set[str]) -> dict[str, Any]:
    document = json.loads((out / "release.json").read_text())
    assert {r["name"] for r in document["releases"]} == expected_names
    assert read_release_avro(out / "release.avro") == document
    budget = document["budget"]
    assert budget["epsilon_spent"] <= budget["epsilon_total"] * (1 + 1e-12)
    assert budget["delta_spent"] <= budget["delta_total"]
    for record in document["releases"]:
        for field in LEDGER_FIELDS:
            assert field in record, field
        assert record["accuracy"]["confidence"] == 0.95
        assert math.isfinite(record["accuracy"]["score_loss"])
    assert (out / "report.html").exists()
    return document


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("exports")
    rows = survey_rows()
    return {
        fmt: write_export(base / fmt, fmt, rows, shards=3)
        for fmt in ("avro", "parquet", "csv", "jsonl")
    }


FORMATS = ["avro", "parquet", "csv", "jsonl"]
COMMON = ["--privacy_unit", "user_id", "--epsilon", "2.0"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_top_candidates_job(exports: dict[str, str], tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "out"
    top_candidates.run(
        ["--input", exports[fmt], *COMMON, "--candidate", "website",
         "--candidates", ",".join(SITES), "--k", "2", "--output", str(out)]
    )  # fmt: skip
    document = check_outputs(out, {"top_candidates"})
    assert len(document["releases"][0]["value"]) == 2


@pytest.mark.parametrize("fmt", FORMATS)
def test_best_price_job(exports: dict[str, str], tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "out"
    best_price.run(
        ["--input", exports[fmt], *COMMON, "--value", "price", "--prices", "0.05:2.00:0.05",
         "--output", str(out)]
    )  # fmt: skip
    document = check_outputs(out, {"best_price"})
    assert 0.05 <= document["releases"][0]["value"] <= 1.95


@pytest.mark.parametrize("fmt", FORMATS)
def test_election_job(exports: dict[str, str], tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "out"
    election.run(
        ["--input", exports[fmt], *COMMON, "--candidate", "vote",
         "--candidates", ",".join(PARTIES), "--output", str(out)]
    )  # fmt: skip
    document = check_outputs(out, {"election"})
    assert document["releases"][0]["value"] in PARTIES


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantiles_job(exports: dict[str, str], tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "out"
    quantiles.run(
        ["--input", exports[fmt], *COMMON, "--value", "weight", "--quantiles", "0.25,0.75",
         "--lower", "0", "--upper", "200", "--num_points", "2001", "--output", str(out)]
    )  # fmt: skip
    document = check_outputs(out, {"quantiles"})
    low, high = document["releases"][0]["value"]
    assert 0 <= low <= high <= 200
    assert "rank_error" in document["releases"][0]["accuracy"]


def _config(path: Path, pattern: str, epsilon: float = 3.0) -> Path:
    path.write_text(
        f"""
[input]
path = "{pattern}"
privacy_unit = "user_id"

[budget]
epsilon = {epsilon}

[[statistics]]
name = "sites"
type = "top_candidates"
candidate = "website"
candidates = {json.dumps(SITES)}
weight = 1

[[statistics]]
name = "price"
type = "best_price"
value = "price"
prices = "0.05:2.00:0.05"
weight = 1

[[statistics]]
name = "vote"
type = "election"
candidate = "vote"
candidates = {json.dumps(PARTIES)}
epsilon = 0.5

[[statistics]]
name = "median_weight"
type = "median"
value = "weight"
lower = 0.0
upper = 200.0
num_points = 2001
weight = 1

[[statistics]]
name = "mean_weight"
type = "mean"
value = "weight"
lower = 0.0
upper = 200.0
num_points = 2001
weight = 1
"""
    )
    return path


@pytest.mark.parametrize("fmt", FORMATS)
def test_release_job_in_every_format(exports: dict[str, str], tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "out"
    release.run(
        ["--config", str(_config(tmp_path / "job.toml", exports[fmt])), "--output", str(out)]
    )
    document = check_outputs(out, {"sites", "price", "vote", "median_weight", "mean_weight"})
    budget = document["budget"]
    assert budget["epsilon_spent"] == pytest.approx(3.0)
    by_name = {r["name"]: r for r in document["releases"]}
    assert by_name["vote"]["epsilon"] == 0.5
    # the weights split the remaining 2.5 evenly over four statistics
    assert by_name["sites"]["epsilon"] == pytest.approx(0.625)


def test_budget_is_checked_before_any_data_is_read(tmp_path: Path) -> None:
    # The export does not exist: had the job read anything it would fail on the files.
    config = _config(tmp_path / "job.toml", str(tmp_path / "missing-*.avro"), epsilon=0.4)
    with pytest.raises(ValueError, match=r"more than the budget.s epsilon=0\.4") as info:
        release.run(["--config", str(config), "--output", str(tmp_path / "out")])
    assert "missing-" not in str(info.value)
    assert not (tmp_path / "out").exists()
