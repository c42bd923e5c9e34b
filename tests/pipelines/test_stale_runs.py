"""A job's start removes what runs killed before their end left behind, and nothing else
(issue 36, finding 6): the ``beam_dp_job_*`` directory of a run whose process has ended, and
the processes that name it (a job server Beam started for that run); never the directory of
a run still going, nor one whose owner cannot be told. With Flink: tests/engines/
test_job_server_cleanup.py."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pipelines import cli

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self"), reason="a run's owner is told from /proc"
)

_MADE_BY_A_CHILD = """
import sys, tempfile
from pipelines import cli
path = tempfile.mkdtemp(prefix=cli.RUN_TEMP_PREFIX, dir=sys.argv[1])
cli._record_owner(path)
print(path)
"""


def _run_of_an_ended_process(system_temp: Path) -> Path:
    """A run directory as a job makes it, by a process that has ended since (as if killed)."""
    made = subprocess.run(
        [sys.executable, "-c", _MADE_BY_A_CHILD, str(system_temp)],
        capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    return Path(made.stdout.strip())


def test_the_run_of_an_ended_process_is_removed_with_the_processes_naming_it(
    tmp_path: Path,
) -> None:
    stale = _run_of_an_ended_process(tmp_path)
    (stale / "beam-temp-x").mkdir()
    # A stand-in for the job server Beam started: its arguments name a path under the run's
    # directory (--artifacts-dir); and a process naming only a neighbour that shares its prefix.
    server = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", str(stale / "beam-temp-x")]
    )
    neighbour = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", str(stale) + "-other"]
    )
    try:
        cli.remove_stale_runs(str(tmp_path))
        assert server.wait(timeout=10) == -signal.SIGKILL
        assert neighbour.poll() is None
        assert not stale.exists()
    finally:
        for process in (server, neighbour):
            with contextlib.suppress(OSError):
                process.kill()
            process.wait()


def test_a_running_or_unknown_run_is_left_alone(tmp_path: Path) -> None:
    running = Path(tempfile.mkdtemp(prefix=cli.RUN_TEMP_PREFIX, dir=tmp_path))
    cli._record_owner(str(running))  # this process: alive
    starting = Path(tempfile.mkdtemp(prefix=cli.RUN_TEMP_PREFIX, dir=tmp_path))  # no owner yet
    other = tmp_path / "beam_dp_probe_x"  # not a run's directory
    other.mkdir()
    stale = _run_of_an_ended_process(tmp_path)
    cli.remove_stale_runs(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [running.name, starting.name, other.name]
    )
    assert not stale.exists()


def test_a_job_start_cleans_up_and_leaves_nothing_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = _run_of_an_ended_process(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen: list[str] = []
    cli.cli(lambda: seen.extend(os.listdir(tmp_path)))
    assert stale.name not in seen and len(seen) == 1  # only the run's own directory
    assert list(tmp_path.iterdir()) == []
