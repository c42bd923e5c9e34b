"""Issue 40, item 1: a misspelt column costs nothing where the files' schemas are public.

With a ledger, a job naming a column the export does not have (the privacy unit, a value, a
candidate, a key) fails before the reservation when every file's schema or header is public
(Parquet's footer, Avro's header, a CSV header row): one line naming the column, how it was
named and the nearest field the file has; exit 1; the dataset's budget unchanged. JSON lines
have no schema (a line's keys are its record's): with the export's field names declared by
the operator (``--json_fields``, ``json_fields`` in a config) the columns are checked against
them in the same way; without, the same typo fails once the data is read, charged, as the
README's table says.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from export_helpers import write_export

from beam_dp.errors import BadRecordError
from beam_dp.io.schema import NamedColumn, check_export_columns
from pipelines import budget, election, quantiles, release
from pipelines.common import cli
from pipelines.job_run import check_input_columns, named_columns

DATASET = "panel"
FORMATS = ("parquet", "avro", "csv", "jsonl")


@pytest.fixture(autouse=True)
def _no_ledger_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BEAM_DP_LEDGER_URL", raising=False)


@pytest.fixture
def pipeline_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    original = beam.Pipeline.run

    def recorded(self: beam.Pipeline, *args: Any, **kwargs: Any) -> Any:
        calls.append("run")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(beam.Pipeline, "run", recorded)
    return calls


def _rows() -> list[dict[str, Any]]:
    return [
        {"nr": f"p{i}", "weight": 50.0 + i, "vote": "a" if i % 3 else "b", "region": "north"}
        for i in range(12)
    ]


def _budget(*argv: str) -> dict[str, Any]:
    return budget.run([*argv, "--json"], out=io.StringIO())


def _ledger(tmp_path: Path) -> str:
    url = f"sqlite://{tmp_path / 'ledger' / 'budget.db'}"
    _budget("create", "--ledger", url, "--dataset", DATASET, "--input", f"{tmp_path}/",
            "--epsilon", "10")  # fmt: skip
    return url


def _spent(url: str) -> dict[str, Any]:
    (dataset,) = _budget("show", "--ledger", url, "--dataset", DATASET)["datasets"]
    return {"epsilon": dataset["exact"]["epsilon"], "runs": dataset["open_runs"]}


# (the flag misspelt, the typo, the field meant)
TYPOS = [
    ("privacy_unit", "id", "nr"),
    ("value", "wieght", "weight"),
    ("candidate", "vtoe", "vote"),
    ("key", "regoin", "region"),
]


#: The export's field names, as an operator declares them for JSON lines (``json_fields``).
FIELDS = ["nr", "weight", "vote", "region"]


def _job(
    flag: str, typo: str, pattern: str, tmp_path: Path, url: str, declared: bool = False
) -> Any:
    """The job that names the misspelt column, as a callable (in-process); ``declared``: with
    the export's field names declared (``--json_fields`` / ``json_fields``)."""
    unit = typo if flag == "privacy_unit" else "nr"
    ledger = ["--ledger", url, "--dataset", DATASET, "--output", str(tmp_path / "out")]
    fields = ["--json_fields", ",".join(FIELDS)] if declared else []
    if flag == "candidate" or flag == "privacy_unit":
        argv = ["--input", pattern, "--privacy_unit", unit, "--candidate",
                typo if flag == "candidate" else "vote", "--candidates", "a,b",
                "--epsilon", "1", *fields, *ledger]  # fmt: skip
        return lambda: election.run(argv)
    if flag == "value":
        argv = ["--input", pattern, "--privacy_unit", unit, "--value", typo,
                "--quantiles", "0.5", "--lower", "0", "--upper", "100", "--num_points", "101",
                "--max_contributions", "1", "--epsilon", "1", *fields, *ledger]  # fmt: skip
        return lambda: quantiles.run(argv)
    config = tmp_path / "job.toml"
    declaration = f"json_fields = {json.dumps(FIELDS)}" if declared else ""
    config.write_text(
        f"""
[input]
path = {json.dumps(pattern)}
privacy_unit = "{unit}"
{declaration}

[budget]
epsilon = 1

[[statistics]]
name = "by_region"
type = "election"
candidate = "vote"
candidates = ["a", "b"]
key = "{typo}"
keys = ["north", "south"]
"""
    )
    return lambda: release.run(["--config", str(config), *ledger])


@pytest.mark.parametrize("fmt", ["parquet", "avro", "csv", "jsonl-declared"])
@pytest.mark.parametrize(("flag", "typo", "meant"), TYPOS, ids=[t[0] for t in TYPOS])
def test_a_misspelt_column_charges_nothing(
    tmp_path: Path,
    pipeline_runs: list[str],
    fmt: str,
    flag: str,
    typo: str,
    meant: str,
) -> None:
    declared = fmt == "jsonl-declared"  # JSON lines with the operator's json_fields
    pattern = write_export(tmp_path / "export", fmt.split("-")[0], _rows(), shards=2)
    url = _ledger(tmp_path)
    before = _spent(url)
    with pytest.raises(SystemExit) as exited, redirect_stderr(io.StringIO()) as err:
        cli(_job(flag, typo, pattern, tmp_path, url, declared))
    message = exited.value.code  # a message: Python prints it to stderr and exits 1
    assert isinstance(message, str) and not err.getvalue(), err.getvalue()
    assert len(message.splitlines()) == 1, message
    assert f"field '{typo}' is missing" in message, message
    assert "export-00000" in message, message  # the file named
    if meant == "nr":  # 'id' shares no letter order with 'nr': the fields are listed
        assert "no field is close (its fields: nr, weight, vote, region)" in message, message
    else:
        assert f"nearest is '{meant}'" in message, message
    assert not pipeline_runs  # no data read
    assert _spent(url) == before  # nothing charged, nothing held
    assert _budget("history", "--ledger", url, "--dataset", DATASET)["runs"] == []


@pytest.mark.parametrize(("flag", "typo", "meant"), TYPOS[:2], ids=[t[0] for t in TYPOS[:2]])
def test_json_lines_keys_are_data_so_the_typo_fails_once_read_and_charged(
    tmp_path: Path, pipeline_runs: list[str], flag: str, typo: str, meant: str
) -> None:
    pattern = write_export(tmp_path / "export", "jsonl", _rows(), shards=2)
    url = _ledger(tmp_path)
    with pytest.raises(BadRecordError, match=f"'{typo}' is missing"):
        _job(flag, typo, pattern, tmp_path, url)()
    assert pipeline_runs  # the lines were read: the run is charged, as the README says
    assert _spent(url)["runs"][0]["charged"] is True


def test_a_later_file_whose_schema_lacks_the_column_is_named(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "x").mkdir()
    first, second = tmp_path / "x" / "a.parquet", tmp_path / "x" / "b.parquet"
    pq.write_table(pa.table({"nr": [1], "weight": [2.0]}), first)
    pq.write_table(pa.table({"nr": [1], "wieght": [2.0]}), second)
    columns = [NamedColumn("nr", "unit"), NamedColumn("weight", "value", "--value")]
    with pytest.raises(BadRecordError) as raised:
        check_export_columns([str(first), str(second)], columns)
    assert str(raised.value).startswith(
        f"{second}: field 'weight' is missing from the file's schema (rule: --value is required)"
    )
    assert "nearest is 'wieght'" in str(raised.value)


@pytest.mark.parametrize(
    ("role", "table", "rule"),
    [
        ("unit", {"nr": [True]}, "privacy unit"),
        ("value", {"nr": ["2026-01-01"]}, None),  # text holding numbers: checked when read
        ("event_iso8601", {"nr": [1.5]}, "ISO 8601"),
    ],
)
def test_a_declared_type_its_role_cannot_use_is_named(
    tmp_path: Path, role: Any, table: dict[str, list[Any]], rule: str | None
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "a.parquet"
    pq.write_table(pa.table(table), path)
    if rule is None:
        check_export_columns([str(path)], [NamedColumn("nr", role)])
        return
    with pytest.raises(BadRecordError, match=rule):
        check_export_columns([str(path)], [NamedColumn("nr", role)])


def test_json_lines_are_not_opened_before_the_charge(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text('{"nr": 1}\n')
    path.chmod(0)  # opening it would fail
    try:
        check_export_columns([str(path)], [NamedColumn("id", "unit")])
    finally:
        path.chmod(0o600)


@pytest.mark.parametrize("fmt", ["parquet", "avro", "csv"])
def test_a_streams_misspelt_event_time_is_named_from_its_landing_files(
    tmp_path: Path, fmt: str
) -> None:
    """What the stream job calls with its landing files before a window is granted."""
    rows = [{**row, "at": 1_800_000_000.0 + i} for i, row in enumerate(_rows())]
    pattern = write_export(tmp_path / "landing", fmt, rows, shards=2)
    columns = named_columns([], "nr", event_time="ta", event_time_format="seconds")
    with pytest.raises(BadRecordError) as raised:
        check_input_columns(pattern, columns, input_format=None, on_bad_record="fail")
    assert "field 'ta' is missing" in str(raised.value)
    assert "(rule: --event_time is required); the nearest is 'at'" in str(raised.value)
    check_input_columns(  # the right name passes; nothing landed yet passes too
        pattern, named_columns([], "nr", event_time="at"), input_format=None, on_bad_record="fail"
    )
    check_input_columns(
        str(tmp_path / "empty" / "*"), columns, input_format=None, on_bad_record="fail"
    )


def test_declared_json_fields_read_no_line(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text('{"nr": 1}\n')
    path.chmod(0)  # opening it would fail
    try:
        check_export_columns([str(path)], [NamedColumn("nr", "unit")], json_fields=["nr"])
        with pytest.raises(BadRecordError, match="'id' is missing from the file's declared"):
            check_export_columns([str(path)], [NamedColumn("id", "unit")], json_fields=["nr"])
    finally:
        path.chmod(0o600)


@pytest.mark.parametrize("given", ["nr,,weight", "nr,nr", ","])
def test_json_fields_must_be_distinct_names(tmp_path: Path, given: str) -> None:
    pattern = write_export(tmp_path / "export", "jsonl", _rows(), shards=1)
    argv = ["--input", pattern, "--privacy_unit", "nr", "--candidate", "vote",
            "--candidates", "a,b", "--epsilon", "1", "--json_fields", given,
            "--output", str(tmp_path / "out")]  # fmt: skip
    with pytest.raises(SystemExit), redirect_stderr(io.StringIO()) as err:
        election.run(argv)
    assert "--json_fields: must list distinct field names" in err.getvalue()
    assert not (tmp_path / "out").exists()
