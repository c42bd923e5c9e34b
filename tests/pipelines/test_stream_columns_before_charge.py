"""The stream job checks every named column against the shards already landed before it grants
or charges a window (a misspelt column costs nothing), as the batch jobs do."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest

from beam_dp import BadRecordError
from beam_dp.ledger import open_ledger
from pipelines import budget, stream


def _config(tmp_path: Path, unit: str, value: str) -> Path:
    config = tmp_path / "stream.toml"
    config.write_text(
        f'[input]\nprivacy_unit = "{unit}"\nformat = "csv"\n\n[budget]\nepsilon = 2.0\n\n'
        f'[[statistics]]\nname = "weight"\ntype = "median"\nvalue = "{value}"\nlower = 0.0\n'
        "upper = 200.0\nnum_points = 201\nmax_contributions = 1\n"
    )
    return config


@pytest.mark.parametrize(
    ("unit", "value", "extra", "named", "nearest"),
    [
        ("user", "weight", (), "user", "user_id"),
        ("user_id", "wieght", (), "wieght", "weight"),
        ("user_id", "weight", ("--event_time", "tss"), "tss", "ts"),
    ],
)
def test_a_misspelt_column_in_a_stream_charges_nothing(
    tmp_path: Path, unit: str, value: str, extra: tuple[str, ...], named: str, nearest: str
) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    table = pa.table({"user_id": ["u1", "u2"], "weight": [50.0, 60.0], "ts": [1.0, 2.0]})
    pa_csv.write_csv(table, landing / "shard-0.csv")
    url = f"sqlite://{tmp_path / 'budget.db'}"
    budget.run(["create", "--ledger", url, "--dataset", "people", "--input", str(landing),
                "--epsilon", "2"], out=io.StringIO())  # fmt: skip
    argv = ["--config", str(_config(tmp_path, unit, value)), "--landing", f"{landing}/*.csv",
            "--state", str(tmp_path / "state"), "--output", str(tmp_path / "out"),
            "--window_seconds", "60", "--ledger", url, "--dataset", "people",
            "--runner", "FlinkRunner", *extra]  # fmt: skip
    with pytest.raises(BadRecordError) as raised:
        stream.run(argv)
    message = str(raised.value)
    assert f"'{named}'" in message and f"'{nearest}'" in message, message
    with open_ledger(url) as ledger:
        runs, _ = ledger.history("people")
    assert runs == []
    assert not (tmp_path / "state" / "windows").exists()


@pytest.mark.parametrize("landed", [True, False], ids=["shard-landed", "nothing-landed-yet"])
@pytest.mark.parametrize(
    ("unit", "value", "extra", "named", "nearest"),
    [
        ("user", "weight", (), "user", "user_id"),
        ("user_id", "wieght", (), "wieght", "weight"),
        ("user_id", "weight", ("--event_time", "tss"), "tss", "ts"),
    ],
)
def test_json_lines_with_declared_fields_charge_nothing_on_a_typo(
    tmp_path: Path,
    landed: bool,
    unit: str,
    value: str,
    extra: tuple[str, ...],
    named: str,
    nearest: str,
) -> None:
    # JSON lines have no schema: the operator's json_fields stand for one, and are checked
    # before any grant, even before the first shard lands.
    landing = tmp_path / "landing"
    landing.mkdir()
    if landed:
        (landing / "shard-0.jsonl").write_text('{"user_id": "u1", "weight": 50.0, "ts": 1.0}\n')
    url = f"sqlite://{tmp_path / 'budget.db'}"
    budget.run(["create", "--ledger", url, "--dataset", "people", "--input", str(landing),
                "--epsilon", "2"], out=io.StringIO())  # fmt: skip
    config = _config(tmp_path, unit, value)
    config.write_text(
        config.read_text().replace(
            'format = "csv"', 'format = "jsonl"\njson_fields = ["user_id", "weight", "ts"]'
        )
    )
    argv = ["--config", str(config), "--landing", f"{landing}/*.jsonl",
            "--state", str(tmp_path / "state"), "--output", str(tmp_path / "out"),
            "--window_seconds", "60", "--ledger", url, "--dataset", "people",
            "--runner", "FlinkRunner", *extra]  # fmt: skip
    with pytest.raises(BadRecordError) as raised:
        stream.run(argv)
    message = str(raised.value)
    assert f"'{named}'" in message and f"'{nearest}'" in message, message
    assert "declared fields (json_fields)" in message, message
    with open_ledger(url) as ledger:
        runs, _ = ledger.history("people")
    assert runs == []
    assert not (tmp_path / "state" / "windows").exists()
