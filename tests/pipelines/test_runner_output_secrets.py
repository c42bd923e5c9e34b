"""A bad record's value never reaches a user, whatever the runner (issue 36, "one line, no
values, whatever the runner"): the batch jobs run from the command line on the DirectRunner,
the DirectRunner with SDK workers in processes of their own (``--direct_running_mode
multi_processing``) and Dask (a local cluster the runner starts), with a secret marker in a
bad record of each kind (a value, a privacy-unit id, a candidate; tests/secret_marker_helpers.py).

Under ``fail`` the job ends with one ``error:`` line (our own message, naming file and field,
from our own error object, or, where a worker in another process hands only text (the
multi-process DirectRunner), the file and field read back from it and checked against the
job's own lists) and nothing else; under ``skip`` it prints progress only. Before
the job's stderr was diverted (pipelines._terminal.divert_stderr), a multi-process or Dask run
printed the SDK workers' tracebacks and Dask's "Compute Failed" records (28-116 lines).
The same on FlinkRunner: tests/engines/test_flink_secret_marker.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from secret_marker_helpers import (
    FIELD_OF_KIND,
    batch_job_argv,
    check_no_marker,
    check_one_error_line,
    check_progress_only,
    release_job_argv,
    run_job,
    write_marked_export,
)

DASK = ["--runner", "apache_beam.runners.dask.dask_runner.DaskRunner"]
RUNNERS = {
    "direct": [],
    "multi_processing": ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"],
    "dask": DASK,
}
# Every runner names file and field: Dask and the in-process DirectRunner hand the job our own
# error; the multi-process DirectRunner hands only a worker's text, from which the job takes a
# file it matched and a column it names, nothing else (pipelines.cli._bad_record_in_text).
OWN_MESSAGE = {"direct": True, "multi_processing": True, "dask": True}

# Each kind on the in-process and the multi-process DirectRunner; Dask (about 20 s a run, for
# its cluster) with one kind.
FAIL_CASES = [
    *[(runner, kind) for runner in ("direct", "multi_processing") for kind in FIELD_OF_KIND],
    ("dask", "value"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("runner", "kind"), FAIL_CASES)
def test_a_bad_record_ends_the_job_in_one_line_without_its_value(
    tmp_path: Path, runner: str, kind: str
) -> None:
    pattern = write_marked_export(tmp_path / "in", [kind])
    out, temp = tmp_path / "out", tmp_path / "temp"
    argv = [*batch_job_argv(kind, pattern, out, "fail"), *RUNNERS[runner]]
    result = run_job(argv, temp)
    check_no_marker(result, out, temp)
    if OWN_MESSAGE[runner]:
        check_one_error_line(result, "export-00001.jsonl", f"field '{FIELD_OF_KIND[kind]}'")
    else:
        check_one_error_line(result, "the pipeline failed in stage '")
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("runner", list(RUNNERS))
def test_skipped_bad_records_leave_no_trace(tmp_path: Path, runner: str) -> None:
    pattern = write_marked_export(tmp_path / "in", list(FIELD_OF_KIND))
    out, temp = tmp_path / "out", tmp_path / "temp"
    result = run_job([*release_job_argv(tmp_path, pattern, out, "skip"), *RUNNERS[runner]], temp)
    check_no_marker(result, out, temp)
    check_progress_only(result)
    assert (out / "release.json").is_file()


@pytest.mark.slow
def test_show_tracebacks_unsafe_still_shows_what_the_workers_print(tmp_path: Path) -> None:
    """The operator's switch (NOT private) undoes the diversion: the SDK worker's traceback,
    printed by a process of its own, reaches the terminal again."""
    pattern = write_marked_export(tmp_path / "in", ["value"])
    argv = [*batch_job_argv("value", pattern, tmp_path / "out", "fail"),
            *RUNNERS["multi_processing"], "--show_tracebacks_unsafe"]  # fmt: skip
    result = run_job(argv, tmp_path / "temp")
    assert result.returncode != 0
    assert "Traceback (most recent call last)" in result.stderr
    assert "BadRecordError" in result.stderr and "export-00001.jsonl" in result.stderr
