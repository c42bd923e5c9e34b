"""A lost worker ends the job (issue 36): ``--direct_running_mode multi_processing``, one SDK
worker process SIGKILLed, before it connected to the runner or while it processes a bundle.

Before, the runner waited for the dead worker without end (no exit after 420 s) and stderr
showed Beam's raw ``Worker subprocess exited with return code 137`` traceback. Now the job
fails closed within a bounded time with our one line, its run stays charged in the ledger,
and no worker process, scratch directory, temporary directory or output is left behind.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from export_helpers import write_export

from beam_dp.ledger import open_ledger
from pipelines import budget

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(__file__).resolve().parent / "lost_worker_site"
DATASET = "people"
#: The job ends this soon after its worker died (it never did before).
BOUND_SECONDS = 45.0
EXPECTED = (
    "error: a worker process of the pipeline ended while it ran (killed, or out of memory): "
    "the job stopped its other workers and published nothing"
)


def _job(tmp_path: Path, env_extra: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    pattern = write_export(
        tmp_path / "export",
        "csv",
        [{"user_id": f"u{i}", "vote": "a" if i % 3 else "b"} for i in range(60)],
        shards=2,
    )
    url = f"sqlite://{tmp_path / 'budget.db'}"
    budget.run(
        ["create", "--ledger", url, "--dataset", DATASET, "--input", f"{tmp_path}/export/",
         "--epsilon", "1.0"],
        out=io.StringIO(),
    )  # fmt: skip
    for name in ("temp", "job_temp"):
        (tmp_path / name).mkdir()
    argv = [
        sys.executable, "-m", "pipelines.election", "--input", pattern,
        "--privacy_unit", "user_id", "--candidate", "vote", "--candidates", "a,b",
        "--epsilon", "1.0", "--output", str(tmp_path / "out"), "--ledger", url,
        "--dataset", DATASET, "--temp_location", str(tmp_path / "temp"),
        "--direct_running_mode", "multi_processing", "--direct_num_workers", "2",
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(SITE)]),
        "TMPDIR": str(tmp_path / "job_temp"),
        **env_extra,
    }
    env.pop("BEAM_DP_LEDGER_URL", None)
    job = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return job, url


def _process_tree(root: int) -> dict[int, str]:
    """The processes under ``root`` (pid: command line)."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{name}/stat").read_text(errors="replace")
                parents[int(name)] = int(stat.rsplit(")", 1)[-1].split()[1])
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent:
                with contextlib.suppress(OSError):
                    command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                    found[pid] = command.decode(errors="replace")
                frontier.append(pid)
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _workers(job: subprocess.Popen[str]) -> dict[int, str]:
    return {pid: cmd for pid, cmd in _process_tree(job.pid).items() if "sdk_worker_main" in cmd}


def _check_failed_closed(
    tmp_path: Path, job: subprocess.Popen[str], url: str, died_at: float, seen: set[int]
) -> None:
    try:
        _out, err = job.communicate(timeout=BOUND_SECONDS)
    except subprocess.TimeoutExpired:
        for pid in [job.pid, *_process_tree(job.pid)]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        job.communicate()
        pytest.fail(f"the job did not end within {BOUND_SECONDS:.0f} s of its worker's death")
    took = time.monotonic() - died_at
    assert job.returncode == 1, err[-3000:]
    assert took < BOUND_SECONDS
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors == [EXPECTED], err[-3000:]
    assert "Traceback" not in err and "return code" not in err, err[-3000:]
    with open_ledger(url) as ledger:
        (run,) = ledger.history(DATASET)[0]
        assert run.state == "abandoned" and run.started_at is not None and run.charged
        assert ledger.status(DATASET).remaining.epsilon == 0  # the run's spend stays spent
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in seen if _alive(pid)], "a worker process outlived the job"
    assert not (tmp_path / "out").exists()
    assert os.listdir(tmp_path / "temp") == []
    assert os.listdir(tmp_path / "job_temp") == []


def test_a_worker_killed_before_it_connects_ends_the_job(tmp_path: Path) -> None:
    job, url = _job(tmp_path, {})
    seen: set[int] = set()
    deadline = time.monotonic() + 120
    victim = None
    while victim is None:
        assert job.poll() is None, job.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no SDK worker process started"
        workers = _workers(job)
        seen |= set(workers)
        pythons = [pid for pid, cmd in workers.items() if not cmd.startswith("/bin/sh")]
        victim = pythons[0] if pythons else None
        time.sleep(0.05)
    time.sleep(1.0)
    seen |= set(_workers(job))
    os.kill(victim, signal.SIGKILL)
    _check_failed_closed(tmp_path, job, url, time.monotonic(), seen)


def test_a_worker_killed_while_it_processes_a_bundle_ends_the_job(tmp_path: Path) -> None:
    marker = tmp_path / "worker_died"
    job, url = _job(tmp_path, {"BEAM_DP_TEST_WORKER_DIES": str(marker)})
    seen: set[int] = set()
    deadline = time.monotonic() + 240
    while not marker.exists():
        if job.poll() is not None:
            pytest.fail(f"the job ended before a worker died: {job.communicate()[1][-3000:]}")
        assert time.monotonic() < deadline, "no worker emitted a release"
        seen |= set(_workers(job))
        time.sleep(0.05)
    _check_failed_closed(tmp_path, job, url, time.monotonic(), seen)
