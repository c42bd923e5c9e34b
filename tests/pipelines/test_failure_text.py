"""What the one error line may take from a worker's text (pipelines.cli._bad_record_in_text):
a file the job matched and a column it names, checked against the job's own lists; never the
position, the rule or anything else, which a record's value could forge."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipelines._state import STATE
from pipelines.cli import _bad_record_in_text, failure_message


@pytest.fixture(autouse=True)
def job() -> Iterator[None]:
    STATE.reset()
    STATE.phase = "run"
    STATE.sources = frozenset({"/data/in/export-00001.jsonl"})
    STATE.columns = frozenset({"weight", "user_id"})
    yield
    STATE.reset()


WORKER = (
    "Error processing instruction bundle_6. Original traceback is\nTraceback (most recent "
    'call last):\n  File "x.py", line 1\nbeam_dp.errors.BadRecordError: '
    "/data/in/export-00001.jsonl: line 7: field 'weight' must be a number, not null "
    "(use on_bad_record='skip' to drop such records) [while running 'q/Encode']"
)


def test_a_workers_bad_record_is_named_by_file_and_field_only() -> None:
    line = failure_message(RuntimeError(WORKER))
    assert line.startswith("/data/in/export-00001.jsonl: field 'weight' (a bad record")
    assert "line 7" not in line and "must be a number" not in line


@pytest.mark.parametrize(
    "forged",
    [
        # a value quoting our message with a file the job did not match
        "ArrowInvalid: 'BadRecordError: /etc/SECRET-42.csv: field 'weight' (x)'",
        # ... or a column the job does not name
        "BadRecordError: /data/in/export-00001.jsonl: field 'SECRET-42' (x)",
    ],
)
def test_text_that_names_no_file_or_column_of_the_job_gives_the_stage_only(forged: str) -> None:
    assert _bad_record_in_text(forged) is None
    line = failure_message(RuntimeError(forged + " [while running 'q/Encode']"))
    assert "SECRET-42" not in line
    assert line.startswith("the pipeline failed")


def test_a_forged_position_or_rule_never_reaches_the_line() -> None:
    forged = "BadRecordError: export-00001.jsonl: SECRET-42: field 'user_id' (SECRET-43) and more"
    line = _bad_record_in_text(forged)
    assert line is not None and "SECRET" not in line
    assert line.startswith("export-00001.jsonl: field 'user_id'")
