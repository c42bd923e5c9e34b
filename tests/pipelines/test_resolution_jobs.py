"""The jobs' quantile defaults: max_contributions auto, the grid from the export's schema."""

from __future__ import annotations

import json
import logging
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_dp.errors import BadRecordError
from pipelines import quantiles, release
from pipelines.job_run import apply_quantile_defaults
from pipelines.statistics import spec_from_config

SECRET = 987_654  # a value of the data: must never reach a log line


def write_parquet(path: Path, column: pa.Array, users: int = 60) -> str:
    n = len(column)
    table = pa.table({"user_id": np.arange(n) % users, "amount": column})
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path / "export-0.parquet")
    return str(path / "*.parquet")


def spec(**entry: Any) -> Any:
    base = {"name": "m", "type": "median", "value": "amount", "lower": 0, "upper": 100}
    return spec_from_config({**base, **entry})


@pytest.fixture()
def integers(tmp_path: Path) -> str:
    values = np.random.default_rng(1).integers(0, 100, 600)
    values[0] = SECRET
    return write_parquet(tmp_path / "int", pa.array(values, pa.int64()))


def test_integer_column_gets_the_integer_grid_and_auto_bound(
    integers: str, caplog: pytest.LogCaptureFixture
) -> None:
    specs = [spec(), spec(name="q", type="quantiles", quantiles=[0.5]), spec(name="a", type="mean")]
    with caplog.at_level(logging.INFO, logger="beam_dp.pipelines"):
        apply_quantile_defaults(
            specs, input_pattern=integers, input_format=None, privacy_unit="user_id"
        )
    assert specs[0].params["resolution"] == "1" and specs[0].params["max_contributions"] == "auto"
    assert specs[1].params["resolution"] == "1"
    # the mean: rows per person chosen privately too, its grid left alone
    assert "resolution" not in specs[2].params and specs[2].params["max_contributions"] == "auto"
    text = caplog.text
    assert "grid on the multiples of 1" in text and "an integer" in text
    assert str(SECRET) not in text and "600" not in text


def test_decimal_float_and_csv_columns(tmp_path: Path) -> None:
    cents = pa.array([Decimal("1.25"), Decimal("3.50")] * 30, pa.decimal128(9, 2))
    decimal = write_parquet(tmp_path / "dec", cents)
    floats = write_parquet(tmp_path / "flt", pa.array(np.linspace(0, 1, 60)))
    csv = tmp_path / "csv"
    csv.mkdir()
    (csv / "export.csv").write_text("user_id,amount\n1,5\n2,7\n")
    for pattern, expected in ((decimal, "0.01"), (floats, None), (str(csv / "*.csv"), None)):
        specs = [spec()]
        apply_quantile_defaults(
            specs, input_pattern=pattern, input_format=None, privacy_unit="user_id"
        )
        assert specs[0].params.get("resolution") == expected


def test_explicit_settings_win_and_record_level_keeps_one(integers: str) -> None:
    specs = [
        spec(grid="uniform"),
        spec(resolution="0.5"),
        spec(max_contributions=3),
        spec(refine=True),
    ]
    apply_quantile_defaults(specs, input_pattern=integers, input_format=None, privacy_unit="u")
    assert "max_contributions" not in specs[3].params  # auto is not wired with refine
    specs[3].check(unit_column="u", relation="add_remove", on_bad_record="skip")
    assert specs[0].params["grid"] == "uniform" and "resolution" not in specs[0].params
    assert specs[1].params["resolution"] == "0.5"
    assert specs[2].params["max_contributions"] == 3
    record_level = [spec()]
    apply_quantile_defaults(
        record_level, input_pattern=integers, input_format=None, privacy_unit=None
    )
    assert "max_contributions" not in record_level[0].params


def test_config_accepts_auto_and_resolution_and_refuses_bad_values() -> None:
    assert spec(max_contributions="auto", bound_share=0.2).params["bound_share"] == 0.2
    assert spec(resolution="0.01").params["resolution"] == "0.01"
    with pytest.raises(ValueError, match="max_contributions"):
        spec(max_contributions="lots")


def test_quantiles_job_defaults_to_auto_and_the_integer_grid(integers: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    quantiles.run(
        ["--input", integers, "--privacy_unit", "user_id", "--epsilon", "2.0",
         "--value", "amount", "--quantiles", "0.5", "--lower", "0", "--upper", "100",
         "--output", str(out)]
    )  # fmt: skip
    (release,) = json.loads((out / "release.json").read_text())["releases"]
    assert release["value"][0] == int(release["value"][0])
    assert release["num_candidates"] == 101
    bounds = release["contribution_bounds"]
    assert bounds["max_contributions_cap"] == 1024
    assert bounds["max_contributions_per_unit"] in [1 << i for i in range(11)]
    accuracy = release["accuracy"]
    assert accuracy["epsilon_bound_choice"] + accuracy["epsilon_statistic"] == pytest.approx(2.0)


def test_quantiles_job_flags(integers: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    quantiles.run(
        ["--input", integers, "--privacy_unit", "user_id", "--epsilon", "2.0",
         "--value", "amount", "--quantiles", "0.5", "--lower", "0", "--upper", "100",
         "--max_contributions", "4", "--resolution", "0.5", "--output", str(out)]
    )  # fmt: skip
    (release,) = json.loads((out / "release.json").read_text())["releases"]
    assert release["num_candidates"] == 201
    assert release["contribution_bounds"]["max_contributions_per_unit"] == 4
    assert "max_contributions_cap" not in release["contribution_bounds"]
    with pytest.raises(SystemExit):
        quantiles.run(
            ["--input", integers, "--privacy_unit", "user_id", "--epsilon", "2.0",
             "--value", "amount", "--quantiles", "0.5", "--lower", "0", "--upper", "100",
             "--max_contributions", "0", "--output", str(tmp_path / "o2")]
        )  # fmt: skip


def test_zcdp_budget_defaults_to_auto_with_the_rho_split(integers: str, tmp_path: Path) -> None:
    """Under zCDP the default is auto too: the statistic's and the choice's rho fit the
    release's rho (a config that ran before the default changed still runs)."""
    config = tmp_path / "release.toml"
    config.write_text(
        f"""
[input]
path = "{integers}"
privacy_unit = "user_id"

[budget]
epsilon = 2.0
delta = 1e-6
composition = "zcdp"

[[statistics]]
name = "m"
type = "median"
value = "amount"
lower = 0
upper = 100
"""
    )
    release.run(["--config", str(config), "--output", str(tmp_path / "out")])
    (entry,) = json.loads((tmp_path / "out" / "release.json").read_text())["releases"]
    assert entry["contribution_bounds"]["max_contributions_cap"] == 1024
    assert entry["num_candidates"] == 101  # the integer grid
    accuracy = entry["accuracy"]
    assert accuracy["rho_bound_choice"] + accuracy["rho_statistic"] <= entry["rho"] * (1 + 1e-12)


def test_an_unreadable_file_fails_or_keeps_the_uniform_grid_with_skip(
    integers: str, tmp_path: Path
) -> None:
    directory = Path(integers).parent
    (directory / "export-1.parquet").write_bytes(b"not a parquet file")
    specs = [spec()]
    apply_quantile_defaults(
        specs, input_pattern=integers, input_format=None, privacy_unit="u", on_bad_record="skip"
    )
    assert "resolution" not in specs[0].params
    with pytest.raises(BadRecordError, match=r"export-1\.parquet"):
        apply_quantile_defaults(
            [spec()], input_pattern=integers, input_format=None, privacy_unit="u"
        )


@pytest.mark.parametrize(
    ("integer_files", "float_files", "expected"), [(3, 1, "1"), (2, 2, None), (1, 3, None)]
)
def test_the_grid_follows_most_files_schemas(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    integer_files: int,
    float_files: int,
    expected: str | None,
) -> None:
    # A float64 shard among int64 ones (pandas writes an integer column with nulls so) no
    # longer sends the whole column to the uniform grid; the majority of files decides.
    folder = tmp_path / "mixed"
    folder.mkdir()
    rng = np.random.default_rng(2)
    for i in range(integer_files + float_files):
        values = rng.integers(0, 100, 40)
        column = pa.array(values, pa.int64() if i < integer_files else pa.float64())
        pq.write_table(
            pa.table({"user_id": np.arange(40), "amount": column}), folder / f"s{i}.parquet"
        )
    specs = [spec()]
    with caplog.at_level(logging.INFO, logger="beam_dp.pipelines"):
        apply_quantile_defaults(
            specs,
            input_pattern=str(folder / "*.parquet"),
            input_format=None,
            privacy_unit="user_id",
        )
    assert specs[0].params.get("resolution") == expected
    if expected is not None:
        assert (
            f"in {integer_files} of {integer_files + float_files} files, float in the rest"
            in caplog.text
        )


def test_a_mean_with_a_public_n_or_its_own_bound_keeps_it(integers: str) -> None:
    specs = [spec(name="a", type="mean", n=600), spec(name="b", type="mean", max_contributions=3)]
    apply_quantile_defaults(
        specs, input_pattern=integers, input_format=None, privacy_unit="user_id"
    )
    assert "max_contributions" not in specs[0].params  # 1: a public n fixes the rows kept
    assert specs[1].params["max_contributions"] == 3
    record_level = [spec(name="c", type="mean")]
    apply_quantile_defaults(
        record_level, input_pattern=integers, input_format=None, privacy_unit=None
    )
    assert "max_contributions" not in record_level[0].params
