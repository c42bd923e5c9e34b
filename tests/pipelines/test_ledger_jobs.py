"""Jobs charged to a persistent ledger, end to end (issue 9): the real job entry points,
in-process, on tiny CSV exports, with a real SQLite ledger in tmp_path.

"Before reading any data" is proved two ways: ``beam.Pipeline.run`` is recorded (a refused job
must not run a pipeline), and a refused rerun points at an export holding a ragged CSV row,
which fails the job loudly (``BadRecordError``) as soon as it is read (shown by
``test_a_failure_that_depends_on_the_data_stays_charged``).
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import sqlite3
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from export_helpers import write_export

from beam_dp.errors import BadRecordError
from beam_dp.ledger import (
    BudgetExceededError,
    LedgerCorruptError,
    LedgerError,
    LedgerUnavailableError,
    open_ledger,
)
from pipelines import budget, election, quantiles, release
from pipelines.common import cli

sys.path.insert(0, str(Path(__file__).parent))  # the spawned workers' module, by name
import ledger_job_workers

DATASET = "survey_users"


# ------------------------------------------------------------------------------ helpers


@pytest.fixture(autouse=True)
def _no_ledger_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BEAM_DP_LEDGER_URL", raising=False)


@pytest.fixture
def pipeline_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call of ``beam.Pipeline.run`` in this process (a job reads data only there)."""
    calls: list[str] = []
    original = beam.Pipeline.run

    def recorded(self: beam.Pipeline, *args: Any, **kwargs: Any) -> Any:
        calls.append("run")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(beam.Pipeline, "run", recorded)
    return calls


def _rows() -> list[dict[str, Any]]:
    return [
        {"user_id": f"u{i}", "weight": 50.0 + i, "vote": "a" if i % 3 else "b"} for i in range(24)
    ]


def _export(directory: Path) -> str:
    return write_export(directory, "csv", _rows(), shards=1)


def _poison(pattern: str) -> None:
    """Append a ragged row (one field too many): reading it fails with on_bad_record=fail."""
    path = Path(pattern.replace("*", "00000"))
    path.write_text(path.read_text() + "u-bad,60.0,a,extra\n")


@pytest.fixture
def export(tmp_path: Path) -> str:
    return _export(tmp_path / "export")


@pytest.fixture
def poisoned(tmp_path: Path) -> str:
    pattern = _export(tmp_path / "poisoned")
    _poison(pattern)
    return pattern


def _budget(*argv: str) -> dict[str, Any]:
    out = io.StringIO()
    return budget.run([*argv, "--json"], out=out)


def _budget_text(*argv: str) -> str:
    out = io.StringIO()
    budget.run(list(argv), out=out)
    return out.getvalue()


def _ledger(tmp_path: Path, epsilon: str = "1.0") -> str:
    url = f"sqlite://{tmp_path / 'ledger' / 'budget.db'}"
    _budget("create", "--ledger", url, "--dataset", DATASET, "--input", f"{tmp_path}/",
            "--epsilon", epsilon)  # fmt: skip
    return url


def _show(url: str) -> dict[str, Any]:
    (dataset,) = _budget("show", "--ledger", url, "--dataset", DATASET)["datasets"]
    return dataset


def _history(url: str) -> list[dict[str, Any]]:
    return _budget("history", "--ledger", url, "--dataset", DATASET)["runs"]


def _election(pattern: str, output: Path, epsilon: str, *extra: str) -> list[str]:
    return ["--input", pattern, "--privacy_unit", "user_id", "--candidate", "vote",
            "--candidates", "a,b", "--epsilon", epsilon, "--output", str(output),
            *extra]  # fmt: skip


def _quantiles(pattern: str, output: Path, epsilon: str, *extra: str) -> list[str]:
    return ["--input", pattern, "--privacy_unit", "user_id", "--value", "weight",
            "--quantiles", "0.5", "--lower", "0", "--upper", "200", "--num_points", "201",
            "--epsilon", epsilon, "--output", str(output), *extra]  # fmt: skip


def _release_config(path: Path, pattern: str, epsilon: str) -> Path:
    path.write_text(
        f"""
[input]
path = "{pattern}"
privacy_unit = "user_id"

[budget]
epsilon = {epsilon}

[[statistics]]
name = "vote"
type = "election"
candidate = "vote"
candidates = ["a", "b"]
"""
    )
    return path


# ------------------------------------------------- 1. a spent dataset refuses the rerun


def test_a_rerun_the_dataset_cannot_afford_is_refused_before_reading_data(
    tmp_path: Path, export: str, pipeline_runs: list[str]
) -> None:
    url = _ledger(tmp_path)
    config = _release_config(tmp_path / "nightly.toml", export, "0.6")
    out = tmp_path / "out"
    argv = ["--config", str(config), "--output", str(out), "--overwrite",
            "--ledger", url, "--dataset", DATASET]  # fmt: skip
    document = release.run(argv)
    assert pipeline_runs, "the spy records a job that reads its data"
    record = document["budget"]["ledger"]
    assert record["dataset"] == DATASET and record["ledger"] == url
    assert record["reserved"]["exact"] == {"epsilon": "3/5", "delta": "0"}
    assert json.loads((out / "release.json").read_text())["budget"]["ledger"] == record
    first_release = (out / "release.json").read_bytes()

    # The same job the next night; its export now fails loudly if anything reads it.
    _poison(export)
    ran = len(pipeline_runs)
    with pytest.raises(SystemExit) as refused:
        cli(lambda: release.run(argv))
    message = str(refused.value.code)
    assert message.startswith(f"error: dataset '{DATASET}' cannot afford this run")
    assert "asks epsilon=0.6" in message and "there is epsilon=0.4, delta=0 left" in message
    assert "no data was read" in message and "\n" not in message
    assert len(pipeline_runs) == ran, "the refused job ran its pipeline"
    assert (out / "release.json").read_bytes() == first_release, "--output was touched"

    shown = _show(url)
    assert shown["epsilon"]["committed"] == 0.6 and shown["epsilon"]["reserved"] == 0.0
    assert shown["exact"]["epsilon"]["committed"] == "3/5"
    assert shown["exact"]["epsilon"]["reserved"] == "0"
    assert shown["open_runs"] == []
    (run,) = _history(url)  # the refusal reserved nothing
    assert run["run"] == record["run"] and run["state"] == "committed"
    assert run["job"] == "pipelines.release" and run["config_digest"].startswith("sha256:")
    assert run["statistics"] == ["vote"]
    assert run["output_location"] == str(out)


# ----------------------------------------------------------- 2. --output and --overwrite


def test_an_output_holding_a_release_needs_overwrite_which_the_ledger_records(
    tmp_path: Path, export: str, pipeline_runs: list[str]
) -> None:
    url = _ledger(tmp_path)
    out = tmp_path / "out"
    ledger_flags = ["--ledger", url, "--dataset", DATASET]
    quantiles.run(_quantiles(export, out, "0.6", *ledger_flags))
    first_release = (out / "release.json").read_bytes()
    ran = len(pipeline_runs)

    with pytest.raises(ValueError, match=r"already holds a release; give --overwrite"):
        quantiles.run(_quantiles(export, out, "0.3", *ledger_flags))
    assert len(pipeline_runs) == ran
    assert (out / "release.json").read_bytes() == first_release
    (first,) = _history(url)  # nothing was reserved for the refused run
    assert _show(url)["exact"]["epsilon"] == {
        "total": "1", "committed": "3/5", "reserved": "0", "remaining": "2/5"
    }  # fmt: skip

    document = quantiles.run(_quantiles(export, out, "0.3", *ledger_flags, "--overwrite"))
    assert len(pipeline_runs) > ran
    assert json.loads((out / "release.json").read_text()) == document
    first_after, second = _history(url)
    assert first_after == first, "the overwritten run's record stays as it was"
    assert second["run"] == document["budget"]["ledger"]["run"]
    assert second["state"] == "committed" and second["overwrite"] is True
    assert second["overwrites"] == [first["run"]]
    assert first["output_location"] == second["output_location"] == str(out)
    # The release (and its report) carries the dataset's record: its budget and earlier runs.
    record = document["budget"]["ledger"]
    assert [run["run"] for run in record["earlier_runs"]] == [first["run"]]
    assert record["earlier_runs"][0]["shown_state"] == "committed"
    assert "left of epsilon=1" in record["dataset_budget"]
    assert "earlier_runs" in (out / "report.html").read_text(encoding="utf-8")
    shown = _show(url)
    assert shown["exact"]["epsilon"]["committed"] == "9/10"  # 0.6 + 0.3: both stay spent
    assert shown["epsilon"]["committed"] == 0.9 and shown["epsilon"]["reserved"] == 0.0
    table = _budget_text("history", "--ledger", url, "--dataset", DATASET)
    assert f"(overwrote run {first['run']})" in table


# -------------------------------------------- 3. what a failed job's reservation becomes


def test_a_job_that_fails_before_its_pipeline_runs_gives_its_reservation_back(
    tmp_path: Path, export: str, pipeline_runs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _ledger(tmp_path)
    # A failure after the reservation, before the ledger recorded the start: the job's scratch
    # directory for releases cannot be made (the location was checked writable before).
    from pipelines import execute

    def unwritable(options: Any, prefix: str) -> Any:
        if prefix == "beam_dp_releases":
            raise OSError(28, "No space left on device")
        return original(options, prefix)

    original = execute._new_scratch
    monkeypatch.setattr(execute, "_new_scratch", unwritable)
    argv = _election(export, tmp_path / "out", "0.6", "--ledger", url, "--dataset", DATASET)
    with pytest.raises(OSError):
        election.run(argv)
    assert pipeline_runs == [] and not (tmp_path / "out").exists()
    (run,) = _history(url)
    assert run["state"] == "returned" and run["charged"] is False, run
    assert run["started_at"] is None
    shown = _show(url)
    assert shown["exact"]["epsilon"] == {
        "total": "1", "committed": "0", "reserved": "0", "remaining": "1"
    }  # fmt: skip
    assert shown["open_runs"] == []


def test_an_unwritable_temp_location_fails_before_the_reservation(
    tmp_path: Path, export: str, pipeline_runs: list[str]
) -> None:
    url = _ledger(tmp_path)
    (tmp_path / "a-file").write_text("not a directory")
    argv = _election(export, tmp_path / "out", "0.6", "--ledger", url, "--dataset", DATASET,
                     "--temp_location", str(tmp_path / "a-file" / "tmp"))  # fmt: skip
    with pytest.raises(SystemExit) as info:
        cli(lambda: election.run(argv))
    message = str(info.value.code)
    assert "cannot write the job's temporary location" in message and "\n" not in message
    assert pipeline_runs == [] and not (tmp_path / "out").exists()
    assert _history(url) == []


def test_a_job_whose_pipeline_raised_stays_charged(
    tmp_path: Path, export: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whatever pipeline.run raises, the job cannot know that no record was read: charged.
    url = _ledger(tmp_path)

    def broken(self: beam.Pipeline, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the runner failed")

    monkeypatch.setattr(beam.Pipeline, "run", broken)
    argv = _election(export, tmp_path / "out", "0.6", "--ledger", url, "--dataset", DATASET)
    with pytest.raises(RuntimeError, match="the runner failed"):
        election.run(argv)
    (run,) = _history(url)
    assert run["state"] == "abandoned" and run["charged"] is True, run
    assert run["note"] == "the job failed after it began reading data"


def test_a_failure_that_depends_on_the_data_stays_charged(
    tmp_path: Path, poisoned: str, pipeline_runs: list[str]
) -> None:
    url = _ledger(tmp_path)
    argv = _election(poisoned, tmp_path / "out", "0.6", "--on_bad_record", "fail",
                     "--ledger", url, "--dataset", DATASET)  # fmt: skip
    with pytest.raises(BadRecordError):
        election.run(argv)  # the poisoned export fails loudly once it is read
    assert pipeline_runs and not (tmp_path / "out").exists()
    shown = _show(url)
    # Fail closed: whether the job failed depends on the data, so a refund would let the
    # one-bit leak repeat for free.
    assert shown["exact"]["epsilon"] == {
        "total": "1", "committed": "0", "reserved": "3/5", "remaining": "2/5"
    }  # fmt: skip
    (held,) = shown["open_runs"]
    assert held["state"] == "abandoned" and held["charged"] is True
    assert held["note"] == "the job failed after it began reading data"
    table = _budget_text("show", "--ledger", url, "--dataset", DATASET)
    assert "runs in progress or abandoned" in table
    assert [line.split()[:3] for line in table.splitlines() if "election" in line] == [
        [str(held["run"]), "abandoned", held["reserved_at"][:10]]
    ]
    # The charge is real: the same spend does not fit any more.
    with pytest.raises(BudgetExceededError, match=r"epsilon=0\.4, delta=0 left"):
        election.run(argv)


# ---------------------------------------------------- 4. the ledger flags fail closed


@pytest.mark.parametrize("flags", [["--ledger", "URL"], ["--dataset", DATASET]])
def test_ledger_and_dataset_come_together(
    tmp_path: Path, poisoned: str, pipeline_runs: list[str], flags: list[str]
) -> None:
    url = _ledger(tmp_path)
    flags = [url if flag == "URL" else flag for flag in flags]
    with pytest.raises(ValueError, match=r"give both --ledger URL and --dataset NAME, or neither"):
        election.run(_election(poisoned, tmp_path / "out", "0.6", *flags))
    assert pipeline_runs == [] and not (tmp_path / "out").exists()
    assert _history(url) == []


def test_jobs_never_create_a_ledger(
    tmp_path: Path, poisoned: str, pipeline_runs: list[str]
) -> None:
    missing = tmp_path / "nowhere" / "budget.db"
    argv = _election(poisoned, tmp_path / "out", "0.6",
                     "--ledger", f"sqlite://{missing}", "--dataset", DATASET)  # fmt: skip
    with pytest.raises(LedgerUnavailableError) as info:
        election.run(argv)
    assert "the file does not exist" in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "nowhere").exists(), "a job created a ledger"
    assert pipeline_runs == [] and not (tmp_path / "out").exists()


def _garbage(path: Path) -> None:
    path.write_bytes(b"this is not a SQLite database\n" * 200)


def _damaged(path: Path) -> None:
    with open_ledger(f"sqlite://{path}", create=True) as ledger:
        ledger.create_dataset(DATASET, inputs=[f"/data/{DATASET}/"], epsilon="1.0")
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xa5" * (4096 - 100)  # the schema page, past SQLite's 100-byte header
    path.write_bytes(bytes(data))


def _foreign(path: Path) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE accounts (id INTEGER, balance REAL)")
    connection.close()


@pytest.mark.parametrize(
    ("make", "error", "expected"),
    [
        (_garbage, LedgerCorruptError, "is not a readable SQLite database"),
        (_damaged, LedgerCorruptError, "restore it from a backup"),
        (_foreign, LedgerError, "holds no beam-dp ledger"),
    ],
)
def test_a_corrupt_ledger_stops_the_job_before_any_data_is_read(
    tmp_path: Path,
    poisoned: str,
    pipeline_runs: list[str],
    make: Any,
    error: type[Exception],
    expected: str,
) -> None:
    path = tmp_path / "budget.db"
    make(path)
    before = path.read_bytes()
    argv = _election(poisoned, tmp_path / "out", "0.6",
                     "--ledger", f"sqlite://{path}", "--dataset", DATASET)  # fmt: skip
    with pytest.raises(SystemExit) as info:
        cli(lambda: election.run(argv))
    message = str(info.value.code)
    assert message.startswith("error: ledger ") or message.startswith("error: sqlite://")
    assert expected in message and "\n" not in message
    with pytest.raises(error):
        election.run(argv)
    assert pipeline_runs == [] and not (tmp_path / "out").exists()
    assert path.read_bytes() == before, "a job changed a ledger it could not read"


def test_the_ledger_flag_pair_is_checked_before_the_input_is_listed(tmp_path: Path) -> None:
    argv = _election(str(tmp_path / "missing-*.csv"), tmp_path / "out", "0.6",
                     "--ledger", f"sqlite://{tmp_path / 'budget.db'}")  # fmt: skip
    with pytest.raises(ValueError, match=r"give both --ledger URL and --dataset NAME"):
        election.run(argv)


def test_a_statistic_named_like_a_job_stage_is_refused_before_the_reservation(
    tmp_path: Path, export: str
) -> None:
    url = _ledger(tmp_path)
    config = _release_config(tmp_path / "job.toml", export, "0.6")
    config.write_text(config.read_text().replace('name = "vote"', 'name = "ReadExport"'))
    argv = ["--config", str(config), "--output", str(tmp_path / "out"),
            "--ledger", url, "--dataset", DATASET]  # fmt: skip
    try:
        with pytest.raises(ValueError, match="ReadExport"):
            release.run(argv)
    finally:
        assert _history(url) == [], "the job reserved budget for a config it could not run"


# ------------------------------------------------------ 5. jobs racing for one dataset

RACERS = 6


@pytest.mark.slow
def test_racing_jobs_spend_exactly_what_the_dataset_holds(tmp_path: Path, export: str) -> None:
    url = _ledger(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(RACERS)
    results = context.Queue()
    outputs = [tmp_path / "out" / str(index) for index in range(RACERS)]
    processes = [
        context.Process(
            target=ledger_job_workers.run_job,
            args=(
                "election",
                _election(export, outputs[index], "0.3", "--ledger", url, "--dataset", DATASET),
                index,
                start,
                results,
                str(marks),
            ),
        )
        for index in range(RACERS)
    ]
    for process in processes:
        process.start()
    try:
        outcomes = [results.get(timeout=240) for _ in processes]
    finally:
        for process in processes:
            process.join(timeout=60)
    assert [process.exitcode for process in processes] == [0] * RACERS
    assert [message for _, outcome, message, _ in outcomes if outcome == "error"] == []
    committed = sorted(index for index, outcome, _, _ in outcomes if outcome == "committed")
    refused = [message for _, outcome, message, _ in outcomes if outcome == "refused"]
    assert len(committed) == 3 and len(refused) == RACERS - 3
    # Only the jobs that got a reservation ran their pipeline.
    assert sorted(int(path.name.split("-")[1]) for path in marks.iterdir()) == committed
    for message in refused:
        assert "cannot afford this run" in message and "no data was read" in message
        assert "epsilon=0.1, delta=0 left" in message and "\n" not in message
    for index in set(range(RACERS)) - set(committed):
        assert not outputs[index].exists()

    with open_ledger(url) as ledger:
        status = ledger.status(DATASET)
    assert status.committed.epsilon == Fraction(9, 10)  # exactly 3 × 3/10
    assert status.reserved.epsilon == 0 and status.remaining.epsilon == Fraction(1, 10)
    runs = {run["run"]: run for run in _history(url)}
    assert [run["state"] for run in runs.values()] == ["committed"] * 3
    records = {index: record for index, outcome, _, record in outcomes if outcome == "committed"}
    for index in committed:
        document = json.loads((outputs[index] / "release.json").read_text())
        record = document["budget"]["ledger"]
        assert record == records[index]
        assert record["dataset"] == DATASET and record["reserved"]["exact"]["epsilon"] == "3/10"
        assert runs[record["run"]]["output_location"] == os.path.abspath(outputs[index])
    assert len({records[index]["run"] for index in committed}) == 3
