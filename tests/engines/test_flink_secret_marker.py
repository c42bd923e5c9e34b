"""A bad record's value never reaches a user on FlinkRunner (issue 36, finding 1): the batch
jobs and the stream job run from the command line against the session's Flink job server
(embedded mini cluster, SDK harness in the job's process: LOOPBACK), with a secret marker in a
bad record of each kind (tests/secret_marker_helpers.py; for the stream job, an event time).

Beam's portable runner relays the job's messages through the root logger (``ERROR root:
java.lang.RuntimeException: Error received from SDK harness ...``) and its harness prints a
failed bundle's traceback on stderr: a failing job printed about 170 lines and 4 tracebacks,
with the record's value when a library's message quoted it (the stream job's text event
time: ``pyarrow.lib.ArrowInvalid: Failed to parse string: '<value>'``), and ended with
``error: the pipeline failed`` naming neither file nor field. Now: one ``error:`` line, our own
message (file and field), under ``fail``; progress only under ``skip``.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from secret_marker_helpers import (
    FIELD_OF_KIND,
    MARKER,
    batch_job_argv,
    check_no_marker,
    check_one_error_line,
    check_progress_only,
    release_job_argv,
    run_job,
    write_marked_export,
)

# One worker runs this group (tests/engines/conftest.py says why).
pytestmark = pytest.mark.xdist_group("flink-embedded")


def _flink(endpoint: str) -> list[str]:
    return ["--runner", "FlinkRunner", "--flink_version", "1.19",
            "--job_endpoint", endpoint, "--environment_type", "LOOPBACK"]  # fmt: skip


@pytest.mark.parametrize("kind", list(FIELD_OF_KIND))
def test_a_bad_record_ends_a_flink_job_in_one_line_without_its_value(
    flink_embedded: str, tmp_path: Path, kind: str
) -> None:
    pattern = write_marked_export(tmp_path / "in", [kind])
    out, temp = tmp_path / "out", tmp_path / "temp"
    argv = [*batch_job_argv(kind, pattern, out, "fail"), *_flink(flink_embedded)]
    result = run_job(argv, temp)
    check_no_marker(result, out, temp)
    check_one_error_line(result, "export-00001.jsonl", f"field '{FIELD_OF_KIND[kind]}'")
    assert not out.exists()


def test_skipped_bad_records_leave_no_trace_on_flink(flink_embedded: str, tmp_path: Path) -> None:
    pattern = write_marked_export(tmp_path / "in", list(FIELD_OF_KIND))
    out, temp = tmp_path / "out", tmp_path / "temp"
    argv = [*release_job_argv(tmp_path, pattern, out, "skip"), *_flink(flink_embedded)]
    result = run_job(argv, temp)
    check_no_marker(result, out, temp)
    check_progress_only(result)
    assert (out / "release.json").is_file()


NO_FLINK_MASTER_WARNING = "WARNING beam_dp.pipelines: FlinkRunner with --job_endpoint and no "
STREAM_CONFIG = """
[input]
privacy_unit = "user_id"
format = "csv"
on_bad_record = "{on_bad_record}"

[budget]
epsilon = 2.0

[[statistics]]
name = "vote"
type = "election"
candidate = "vote"
candidates = ["a", "b"]
weight = 1
"""
WINDOW_SECONDS = 10
STOP_AFTER = 150.0  # seconds: a stop file ends a job that is still running then


def _land(path: Path, seconds: int, *, bad_row: bool) -> None:
    """A CSV shard of 40 people at event time ``seconds``, written whole then renamed (the job
    may match it at any moment); with ``bad_row``, a row whose event time is the marker."""
    rows = [f"u{u},{'ab'[u % 4 == 0]},{seconds}" for u in range(40)]
    if bad_row:
        rows.insert(20, f"u-bad,a,{MARKER}")
    partial = path.with_name(path.name + ".partial")
    partial.write_text("\n".join(["user_id,vote,ts", *rows]) + "\n")
    partial.rename(path)


@pytest.mark.parametrize("on_bad_record", ["fail", "skip"])
def test_a_text_event_time_never_shows_on_flink(
    flink_embedded: str, tmp_path: Path, on_bad_record: str
) -> None:
    """One landed CSV shard whose event-time field holds the marker in one row (as an ISO
    timestamp from a CSV export would): under ``fail`` the stream job ends with one line
    naming the shard and the field; under ``skip`` the row is dropped and the job goes on to
    publish a window of the shards that keep landing (one every 2 s, event times of their
    landing: a window that no file lands in holds nothing and releases nothing)."""
    landing, state, out, stop = (tmp_path / name for name in ("landing", "state", "out", "stop"))
    landing.mkdir()
    config = tmp_path / "stream.toml"
    config.write_text(STREAM_CONFIG.format(on_bad_record=on_bad_record))
    _land(landing / "shard-00000.csv", int(time.time()), bad_row=True)
    landed = threading.Event()

    def keep_landing() -> None:
        shard = 1
        while not landed.wait(2.0):
            _land(landing / f"shard-{shard:05d}.csv", int(time.time()), bad_row=False)
            shard += 1

    lander = threading.Thread(target=keep_landing, daemon=True)
    lander.start()
    argv = ["pipelines.stream", "--config", str(config), "--landing", str(landing / "*.csv"),
            "--state", str(state), "--output", str(out), "--window_seconds", str(WINDOW_SECONDS),
            "--event_time", "ts", "--stop_after_windows", "1", "--stop_file", str(stop),
            "--poll_seconds", "1", *_flink(flink_embedded)]  # fmt: skip
    deadline = threading.Timer(STOP_AFTER, stop.touch)
    deadline.daemon = True
    deadline.start()
    try:
        result = run_job(argv, tmp_path / "temp", timeout=STOP_AFTER + 120)
    finally:
        deadline.cancel()
        landed.set()
        lander.join()
    check_no_marker(result, out, state, tmp_path / "temp")
    # The job sent to a job server it did not start, without --flink_master, says once (fixed
    # words, no value) that a stop cannot make sure its Flink job ended; every other line is
    # progress or the one error.
    result.stderr = "".join(
        line
        for line in result.stderr.splitlines(keepends=True)
        if not line.startswith(NO_FLINK_MASTER_WARNING)
    )
    if on_bad_record == "fail":
        check_one_error_line(result, "shard-00000.csv", "field 'ts'")
    else:
        check_progress_only(result)
        assert not stop.exists(), "the window of the shard's other rows was never published"
        assert json.loads((out / "release.json").read_text())["releases"]
