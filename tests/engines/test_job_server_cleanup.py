"""A job run from the command line with ``--runner FlinkRunner --flink_version 1.19`` and no
jar flag: Beam starts the job server from its jar cache (``make engines`` put it there; Maven
serves no such jar, so nothing else could start one), and no JVM outlives the job.

Before the fix, pipelines/cli.py removed the run's temporary directory before Beam's exit
handler stopped the job servers: the handler failed on their missing directories ("Exception
ignored in atexit callback ... FileNotFoundError") and both JVMs (the probe job's and the
job's) kept running after the job had exited.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from engine_jobs import PARTIES, write_survey
from engines_env import JOB_TIMEOUT, REPO, job_server_jar, unavailable


def processes_mentioning(text: str) -> list[int]:
    """Live processes (not zombies) whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


def test_a_flink_job_from_the_command_line_leaves_no_job_server_behind(
    java_env: str, tmp_path: Path
) -> None:
    if job_server_jar("flink") is None:
        unavailable("no Beam flink job server jar in Beam's jar cache")
    pattern = write_survey(tmp_path / "in")
    temp = tmp_path / "tmp"  # the job's TMPDIR: every JVM it starts names a path under it
    temp.mkdir()
    out = tmp_path / "out"
    env = dict(
        os.environ,
        TMPDIR=str(temp),
        JAVA_HOME=java_env,
        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    )
    job = subprocess.run(
        [sys.executable, "-m", "pipelines.election", "--input", pattern,
         "--privacy_unit", "user_id", "--epsilon", "1", "--candidate", "vote",
         "--candidates", ",".join(PARTIES), "--output", str(out),
         "--runner", "FlinkRunner", "--flink_version", "1.19"],
        capture_output=True, text=True, timeout=JOB_TIMEOUT, env=env, cwd=str(REPO),
    )  # fmt: skip
    left = processes_mentioning(str(temp))
    try:
        assert left == [], f"{len(left)} job server JVM(s) outlived the job"
        assert job.returncode == 0, job.stderr[-3000:]
        assert (out / "release.json").is_file()
        assert "Exception ignored in atexit" not in job.stderr, job.stderr[-3000:]
        assert list(temp.iterdir()) == []  # the run's temporary directory is gone too
    finally:
        for pid in left:  # never leave a JVM behind, even when the test fails
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_a_sigkilled_flink_job_leaves_nothing_once_the_next_job_starts(
    java_env: str, tmp_path: Path
) -> None:
    """A job killed with SIGKILL cannot stop the job server Beam started for it (a JVM that
    outlives its parent) nor remove its run's directory (``beam_dp_job_*`` in the system's
    temporary directory): the next job, as it starts, kills the JVM and removes the directory
    (pipelines.cli.remove_stale_runs). Before, both stayed until someone noticed."""
    if job_server_jar("flink") is None:
        unavailable("no Beam flink job server jar in Beam's jar cache")
    pattern = write_survey(tmp_path / "in")
    temp = tmp_path / "tmp"  # the jobs' TMPDIR: the system temporary directory they share
    temp.mkdir()
    env = dict(
        os.environ,
        TMPDIR=str(temp),
        JAVA_HOME=java_env,
        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    )
    job = subprocess.Popen(
        [sys.executable, "-m", "pipelines.election", "--input", pattern,
         "--privacy_unit", "user_id", "--epsilon", "1", "--candidate", "vote",
         "--candidates", ",".join(PARTIES), "--output", str(tmp_path / "out"),
         "--runner", "FlinkRunner", "--flink_version", "1.19"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=str(REPO),
    )  # fmt: skip
    left: list[int] = []
    try:
        deadline = time.monotonic() + JOB_TIMEOUT
        while not processes_mentioning(str(temp)) and time.monotonic() < deadline:
            assert job.poll() is None, "the job ended before its job server started"
            time.sleep(0.2)
        time.sleep(1.0)  # the job server is up; the job goes on
        job.send_signal(signal.SIGKILL)
        job.wait()
        left = processes_mentioning(str(temp))
        assert left, "no job server outlived the killed job: nothing to clean up"
        runs = [p.name for p in temp.iterdir() if p.name.startswith("beam_dp_job_")]
        assert runs, "the killed job left no directory: nothing to clean up"
        # The next job, as it starts (--help: it ends right after), cleans up after it.
        subprocess.run(
            [sys.executable, "-m", "pipelines.election", "--help"],
            env=env, cwd=str(REPO), capture_output=True, timeout=120, check=True,
        )  # fmt: skip
        deadline = time.monotonic() + 10  # SIGKILL is delivered, not awaited
        while processes_mentioning(str(temp)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert processes_mentioning(str(temp)) == [], "the job server outlived the next job"
        assert [p.name for p in temp.iterdir()] == []
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        for pid in {*left, *processes_mentioning(str(temp))}:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
