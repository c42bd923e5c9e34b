"""A job killed at any point of its life publishes all or nothing and leaves no sample
readable by others (issue 36, "Publication that is all or nothing").

The job is ``python -m pipelines.quantiles`` on one shard of the sample export, its file
moves slowed down (:func:`fault_helpers.slow_file_moves`, a slow file system) so that its
publication is a visible part of its life. It is SIGKILLed at 20 random points, with and
without ``--overwrite`` over an earlier release: half uniformly over the measured length of
one run, half inside its publication (from the moment its staging directory appears). After
every kill ``--output`` holds the earlier whole release, the new whole release, or none, and
no file in ``--temp_location`` or the job's temporary directory is readable by another user;
the next run to the same locations removes what the killed runs left there.
"""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from beam_dp.io import outputs
from beam_dp.io.outputs import OUTPUT_FILES
from pipelines import execute

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SHARD = ROOT / "sample_data" / "survey" / "export-00000.avro"
KILLS = 20
MOVE_SECONDS = 0.15


def _argv(output: Path, temp: Path, overwrite: bool) -> list[str]:
    return [
        "--input", str(SHARD), "--privacy_unit", "user_id", "--value", "weight_kg",
        "--lower", "20", "--upper", "200", "--quantiles", "0.5", "--epsilon", "1",
        "--output", str(output), "--temp_location", str(temp),
        *(["--overwrite"] if overwrite else []),
    ]  # fmt: skip


def _start(argv: list[str], job_temp: Path) -> subprocess.Popen[bytes]:
    code = (
        "import sys, fault_helpers; "
        f"fault_helpers.run_job_slowly('pipelines.quantiles', {MOVE_SECONDS}, sys.argv[1:])"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "TMPDIR": str(job_temp),
    }
    return subprocess.Popen(
        [sys.executable, "-c", code, *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _avro_run(path: Path) -> str:
    """The run id in a ``release.avro``'s metadata (read without the manifest check)."""
    import fastavro

    with path.open("rb") as handle:
        return str(json.loads(fastavro.reader(handle).metadata["beam_dp.run"])["id"])


def _which_release(output: Path) -> str | None:
    """None, or the run id of the whole release ``output`` holds; fails on a partial or
    mixed one."""
    if not output.exists():
        return None
    present = sorted(name for name in OUTPUT_FILES if (output / name).exists())
    assert present == sorted(OUTPUT_FILES), f"{output} holds a partial release: {present}"
    runs = {
        json.loads((output / "release.json").read_text())["run"]["id"],
        _avro_run(output / "release.avro"),
    }
    assert len(runs) == 1, f"{output} holds the files of two runs"
    check = getattr(outputs, "check_release", None)
    if check is not None:
        assert check(output) in runs
    return runs.pop()


def _readable_by_others(top: Path) -> list[str]:
    """The files under ``top`` that another user could read (o+r, every folder above o+x)."""
    found = []
    for folder, names, files in os.walk(top):
        reachable = all(
            os.stat(parent).st_mode & stat.S_IXOTH
            for parent in [Path(folder), *Path(folder).parents]
            if parent == top or top in parent.parents
        )
        if not reachable:
            names.clear()
            continue
        for name in files:
            path = Path(folder) / name
            if path.is_file() and path.stat().st_mode & stat.S_IROTH:
                found.append(str(path.relative_to(top)))
    return found


def _wait_for_staging(job: subprocess.Popen[bytes], output: Path, limit: float) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and job.poll() is None:
        if any(name.startswith(f".{output.name}.partial-") for name in os.listdir(output.parent)):
            return True
        time.sleep(0.003)
    return False


def test_a_job_killed_at_random_points_publishes_all_or_nothing(tmp_path: Path) -> None:
    previous = os.umask(0o022)  # the usual umask: what it lets others read is the question
    try:
        _kill_loop(tmp_path)
    finally:
        os.umask(previous)


def _kill_loop(tmp_path: Path) -> None:
    temp, job_temp = tmp_path / "temp", tmp_path / "job_temp"
    temp.mkdir()
    job_temp.mkdir()
    old_output = tmp_path / "old" / "out"
    started = time.monotonic()
    first = _start(_argv(old_output, temp, overwrite=False), job_temp)
    _out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err.decode()[-2000:]
    duration = time.monotonic() - started
    old_run = _which_release(old_output)
    assert old_run is not None
    old_files = {name: (old_output / name).read_bytes() for name in OUTPUT_FILES}

    rng = random.Random(36)
    outcomes: list[tuple[bool, str, str | None]] = []
    for case in range(KILLS):
        overwrite = case % 2 == 1
        in_publication = case % 4 >= 2
        output = tmp_path / f"case{case}" / "out"
        output.parent.mkdir()
        if overwrite:
            output.mkdir()
            for name, data in old_files.items():
                (output / name).write_bytes(data)
            for extra in old_output.iterdir():  # the manifest, where there is one
                if extra.name not in OUTPUT_FILES:
                    (output / extra.name).write_bytes(extra.read_bytes())
        job = _start(_argv(output, temp, overwrite), job_temp)
        if in_publication:
            if _wait_for_staging(job, output, limit=3 * duration):
                time.sleep(rng.uniform(0, 4 * MOVE_SECONDS))
        else:
            time.sleep(rng.uniform(0, duration))
        job.send_signal(signal.SIGKILL)
        job.communicate(timeout=60)
        state = _which_release(output)  # the old run's, a new run's, or none; never a mix
        if not overwrite:
            assert state != old_run
        outcomes.append((overwrite, "publication" if in_publication else "uniform", state))
        assert _readable_by_others(temp) == [], f"kill {case}: scratch readable by others"
        assert _readable_by_others(job_temp) == [], f"kill {case}: job temp readable by others"

    # kills before the new release was published and after it both happened
    assert {state in (None, old_run) for _o, _w, state in outcomes} == {True, False}, outcomes
    # the next run to the same temporary location removes what the killed runs left there
    last = _start(_argv(tmp_path / "last", temp, overwrite=False), job_temp)
    _out, err = last.communicate(timeout=300)
    assert last.returncode == 0, err.decode()[-2000:]
    assert sorted(os.listdir(temp)) == [], "the killed runs' scratch stayed"


# ------------------------------------------------------------------ scratch permissions


def _options(temp: Path) -> Any:
    from apache_beam.options.pipeline_options import PipelineOptions

    return PipelineOptions(["--temp_location", str(temp)])


def test_scratch_is_private_whatever_the_umask(tmp_path: Path) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    previous = os.umask(0)
    try:
        scratch, token = execute._new_scratch(_options(temp), "beam_dp_releases")
        commit = execute._CommitReleases(scratch, token)
        (final,) = list(commit.process([("release", {"name": "x", "value": 1})]))
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(scratch).st_mode) == 0o700
    for name in os.listdir(scratch):
        assert stat.S_IMODE(os.stat(os.path.join(scratch, name)).st_mode) == 0o600, name
    assert Path(final).name == "releases.json"
    execute._remove(scratch)
    assert os.listdir(temp) == []


def test_the_next_run_removes_an_ended_runs_scratch_never_a_live_ones(tmp_path: Path) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    started = execute._start_time(child.pid)
    child.wait()
    host = execute._host().replace(".", "-")
    dead = temp / f"beam_dp_releases_{host}-{child.pid}-{started}_{'a' * 32}"
    live = temp / f"beam_dp_releases_{execute._owner()}_{'b' * 32}"
    other = temp / f"beam_dp_releases_elsewhere-1-1_{'c' * 32}"
    unrelated = temp / "someone_elses_folder"
    for folder in (dead, live, other, unrelated):
        folder.mkdir()
        (folder / "releases.json").write_text("[]")
    scratch, _token = execute._new_scratch(_options(temp), "beam_dp_releases")
    assert not dead.exists()
    assert live.exists() and other.exists() and unrelated.exists()
    execute._remove(scratch)
