"""A real job whose ledger commit fails after its pipeline ran (issue 21, case 3).

Each test runs ``python -m pipelines.election`` in a subprocess, charged to a ledger, and
breaks the ledger between the job's start (``started_at`` recorded, the pipeline about to read
data) and its commit: the write lock held by another process for the whole commit, the job
killed with SIGKILL while its commit waits, the ledger's file system full, or the PostgreSQL
connections cut. Whatever happens, a run that read data stays charged, no one can release it,
no output exists that the ledger does not record, and a second job that the budget cannot
afford is refused.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from export_helpers import write_export

from beam_dp.ledger import BudgetExceededError, LedgerError, Plan, RunInfo, open_ledger
from pipelines import budget

ROOT = Path(__file__).resolve().parents[2]
DATASET = "people"


def _export(directory: Path) -> str:
    rows = [{"user_id": f"u{i}", "vote": "a" if i % 3 else "b"} for i in range(60)]
    return write_export(directory, "csv", rows, shards=2)


def _create(url: str, inputs: Path, epsilon: str = "1.0") -> None:
    budget.run(
        ["create", "--ledger", url, "--dataset", DATASET, "--input", f"{inputs}/",
         "--epsilon", epsilon],
        out=io.StringIO(),
    )  # fmt: skip


def _job(url: str, pattern: str, output: Path, *extra: str) -> subprocess.Popen[str]:
    argv = [
        sys.executable, "-m", "pipelines.election", "--input", pattern,
        "--privacy_unit", "user_id", "--candidate", "vote", "--candidates", "a,b",
        "--epsilon", "1.0", "--output", str(output), "--ledger", url, "--dataset", DATASET,
        "--ledger_timeout", "1", *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("BEAM_DP_LEDGER_URL", None)
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_until(condition: Callable[[], bool], job: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + 120
    while not condition():
        if job.poll() is not None:
            _out, err = job.communicate()
            pytest.fail(f"the job ended (exit {job.returncode}) before {what}: {err[-2000:]}")
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def _started(url: str) -> Callable[[], bool]:
    def started() -> bool:
        with contextlib.suppress(LedgerError), open_ledger(url, timeout=0.2) as ledger:
            runs, _ = ledger.history(DATASET)
            return bool(runs) and runs[-1].started_at is not None
        return False

    return started


def _assert_charged_and_unreleasable(url: str, output: Path) -> None:
    """The run stays charged, no one can lift it, no output, and the budget is spent."""
    assert not output.exists(), "a release was written that the ledger does not record"
    with open_ledger(url) as ledger:
        (run,) = ledger.history(DATASET)[0]
        assert run.state == "reserved" and run.started_at is not None and run.charged
        assert ledger.status(DATASET).remaining.epsilon == 0
        with pytest.raises(LedgerError, match="may have published"):
            ledger.release_run(run.id, reason="the commit failed: give it back?")
        with pytest.raises(BudgetExceededError):
            ledger.reserve(
                DATASET,
                Plan.basic("1.0"),
                RunInfo(job="second", inputs=(f"{output.parent}/export/x.csv",)),
            )


@contextlib.contextmanager
def _sqlite_write_lock(path: Path) -> Iterator[None]:
    """Another process's write lock on the SQLite ledger (a long ``budget`` command)."""
    holder = sqlite3.connect(path, isolation_level=None, timeout=30)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def _fails_closed(job: subprocess.Popen[str]) -> str:
    _out, err = job.communicate(timeout=180)
    assert job.returncode == 1, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert "releases were NOT written" in lines[0] and "stays charged" in lines[0]
    return lines[0]


def test_a_commit_that_cannot_get_the_lock_writes_nothing_and_stays_charged(
    tmp_path: Path,
) -> None:
    pattern = _export(tmp_path / "export")
    path = tmp_path / "budget.db"
    url = f"sqlite://{path}"
    _create(url, tmp_path)
    output = tmp_path / "out"
    job = _job(url, pattern, output)
    _wait_until(_started(url), job, "the run started")
    with _sqlite_write_lock(path):
        line = _fails_closed(job)
    assert "stayed locked" in line
    _assert_charged_and_unreleasable(url, output)


def test_a_job_killed_while_its_commit_waits_stays_charged(tmp_path: Path) -> None:
    pattern = _export(tmp_path / "export")
    path = tmp_path / "budget.db"
    url = f"sqlite://{path}"
    _create(url, tmp_path)
    output = tmp_path / "out"
    job = _job(url, pattern, output)
    _wait_until(_started(url), job, "the run started")
    with _sqlite_write_lock(path):
        time.sleep(4)  # the pipeline finishes and the commit waits for the lock
        job.send_signal(signal.SIGKILL)
        job.communicate(timeout=60)
    assert job.returncode == -signal.SIGKILL
    _assert_charged_and_unreleasable(url, output)
    with open_ledger(url) as ledger:
        (run,) = ledger.history(DATASET)[0]
    assert "abandoned: process gone" in run.shown_state


def _mount_small_tmpfs(directory: Path) -> bool:
    directory.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(directory)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def test_a_full_file_system_at_commit_writes_nothing_and_stays_charged(tmp_path: Path) -> None:
    disk = tmp_path / "small-disk"
    if not _mount_small_tmpfs(disk):
        if os.environ.get("CI"):
            pytest.fail("CI must be able to mount a small tmpfs (root) for this test")
        pytest.skip("mounting a tmpfs needs root")
    try:
        pattern = _export(tmp_path / "export")
        path = disk / "budget.db"
        url = f"sqlite://{path}"
        _create(url, tmp_path)
        output = tmp_path / "out"
        job = _job(url, pattern, output)
        _wait_until(_started(url), job, "the run started")
        with _sqlite_write_lock(path):
            filler = disk / "filler"
            with contextlib.suppress(OSError), filler.open("wb") as handle:
                while True:
                    handle.write(b"\0" * 65536)
                    handle.flush()
        line = _fails_closed(job)
        assert "disk refused" in line or "SQLITE_FULL" in line or "locked" in line
        _assert_charged_and_unreleasable(url, output)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_postgresql_connections_lost_at_commit_write_nothing_and_stay_charged(
    tmp_path: Path, postgres_url: str
) -> None:
    import psycopg

    pattern = _export(tmp_path / "export")
    url = postgres_url
    _create(url, tmp_path)
    output = tmp_path / "out"
    job = _job(url, pattern, output)
    _wait_until(_started(url), job, "the run started")
    # Hold the dataset's row so that the commit waits, and cut the job's connections while it
    # waits, until it gives up.
    with (
        psycopg.connect(url, autocommit=True) as admin,
        admin.transaction(),
        psycopg.connect(url, autocommit=True) as killer,
    ):
        admin.execute("SELECT 1 FROM beam_dp_datasets WHERE name = %s FOR UPDATE", (DATASET,))
        while job.poll() is None:
            killer.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                "application_name = 'beam-dp-ledger' AND pid <> pg_backend_pid()"
            )
            time.sleep(0.05)
    _fails_closed(job)
    _assert_charged_and_unreleasable(url, output)


def test_the_commit_retries_with_a_documented_bound() -> None:
    # A unit check of the retry loop: COMMIT_ATTEMPTS attempts, pauses of 1, 2, 4 s.
    from beam_dp.ledger import _runs
    from beam_dp.ledger.errors import LedgerUnavailableError
    from beam_dp.ledger.store import Reservation

    pauses: list[float] = []
    attempts: list[bool] = []

    class Busy:
        def _with_ledger(self, action: Any, *, fresh: bool = False) -> Any:
            attempts.append(fresh)
            raise LedgerUnavailableError("ledger x stayed locked")

    reservation = Reservation.__new__(Reservation)
    reservation._run_id = 1
    reservation._with_ledger = Busy()._with_ledger  # type: ignore[method-assign]
    with pytest.raises(LedgerUnavailableError):
        reservation.commit([], "out", sleep=pauses.append)
    assert _runs.COMMIT_ATTEMPTS == 4
    assert attempts == [False, True, True, True]  # retries reconnect
    assert pauses == [1.0, 2.0, 4.0]
