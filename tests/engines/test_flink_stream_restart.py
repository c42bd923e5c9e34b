"""The stream job (``python -m pipelines.stream``) restarted on the same ``--state`` on the real
local Flink cluster (issue 37): a JobManager and a TaskManager from the Flink distribution, SDK
workers in a worker pool (``tests/engines/conftest.py``), the job a process of its own.

One chain of three runs on one state (cheaper than two chains that each start from nothing;
each restart is one of the two cases):

1. the job publishes windows and is **stopped** (``--stop_after_windows 2``: it cancels its
   Flink job, waits until the cluster says it ended, and ends, as ``--stop_file`` does;
   Beam's cancel alone leaves the Flink job running, holding its slot);
2. restarted, it goes on and publishes a window; then its **TaskManager and its job process are
   SIGKILLed** (a lost machine: no hook runs) and a new TaskManager is started. The Flink job
   the dead process submitted is left as it is: the restart cancels it (by its name, through
   Flink's REST API, ``--flink_master``) before it settles the state;
3. restarted again, it goes on and publishes a window.

Shards land throughout (every second), each with 20 new people and one ``spammer``;
``--max_windows_per_unit 2``. Checked: every window released once (``release.json``,
``releases.jsonl``), charged once (one ledger run per window, each published window's run
committed, one committed run per published window); no Flink job still running once a run
ended (run 1's, before this fix, stayed RUNNING: the restart found no slot); the spammer is in
exactly the 2 windows of the first run and in none of the later runs' windows, which admit
other people. Each window's
persons are those its commit names (``scratch/<run>/<window>.json``: the keyed hashes of the
persons the pipeline admitted, the identity the restarts count by).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from engines_env import JOB_TIMEOUT, REPO

from beam_dp.batching import canonical_hash64
from beam_dp.ledger import open_ledger
from pipelines import budget, stream

# One worker runs this group (tests/engines/conftest.py says why).
pytestmark = pytest.mark.xdist_group("flink-cluster")

WINDOW_SECONDS = 5
PEOPLE_PER_SHARD = 20
CONFIG = """[input]
privacy_unit = "user_id"
format = "csv"

[budget]
epsilon = 2.0

[[statistics]]
name = "vote"
type = "election"
candidate = "vote"
candidates = ["a", "b"]
weight = 1

[[statistics]]
name = "weight"
type = "median"
value = "weight"
lower = 0.0
upper = 200.0
num_points = 201
max_contributions = 1
weight = 1
"""


class Lander:
    """A CSV shard into the landing folder every second, until stopped."""

    def __init__(self, landing: Path) -> None:
        self.landing = landing
        self.shards = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            n = self.shards
            lines = ["user_id,vote,weight"]
            lines += [f"u{n}-{i},{'ab'[i % 2]},{50 + i}" for i in range(PEOPLE_PER_SHARD)]
            lines.append("spammer,a,199")
            partial = self.landing / f".{n:05d}.partial"
            partial.write_text("\n".join(lines) + "\n")
            os.replace(partial, self.landing / f"{n:05d}.csv")
            self.shards += 1
            self._stop.wait(1.0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _last_line(errors: Path) -> str:
    lines = errors.read_text(errors="replace").strip().splitlines()
    return lines[-1] if lines else "(no output)"


def _wait_for(
    condition: Callable[[], bool], job: subprocess.Popen[bytes], errors: Path, what: str
) -> None:
    deadline = time.monotonic() + JOB_TIMEOUT
    while not condition():
        if job.poll() is not None:
            raise AssertionError(
                f"the job ended (status {job.returncode}) before {what}: {_last_line(errors)}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _running(cluster: Any) -> list[str]:
    """The cluster's jobs that have not ended."""
    return [job["jid"] for job in cluster.jobs() if job["state"] not in stream.FLINK_ENDED]


def _published(state: Path, run: int) -> list[int]:
    """The windows published from run ``run``'s commits."""
    found = stream.StreamState(str(state)).windows()
    return [
        index
        for index, record in found.items()
        if record["status"] == "published" and record.get("attempt") == run
    ]


def test_the_stream_job_goes_on_after_a_stop_and_after_a_kill_on_a_flink_cluster(
    flink_cluster: Any, tmp_path: Path
) -> None:
    cluster = flink_cluster.cluster
    landing, state, out = tmp_path / "landing", tmp_path / "state", tmp_path / "out"
    landing.mkdir()
    config = tmp_path / "stream.toml"
    config.write_text(CONFIG)
    url = f"sqlite:///{tmp_path / 'stream.db'}"
    budget.run(["create", "--ledger", url, "--dataset", "s", "--input", str(landing),
                "--epsilon", "1000", "--renewal", "daily"], out=io.StringIO())  # fmt: skip
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )

    def start(run: int, *extra: str) -> subprocess.Popen[bytes]:
        with (tmp_path / f"run{run}.err").open("wb") as errors:
            return subprocess.Popen(
                [sys.executable, "-m", "pipelines.stream", "--config", str(config),
                 "--landing", str(landing / "*.csv"), "--state", str(state),
                 "--output", str(out), "--window_seconds", str(WINDOW_SECONDS),
                 "--max_windows_per_unit", "2", "--poll_seconds", "1",
                 "--ledger", url, "--dataset", "s", *extra,
                 *flink_cluster.flags("--flink_master", cluster.master)],
                stdout=subprocess.DEVNULL, stderr=errors, stdin=subprocess.DEVNULL, env=env,
                cwd=str(REPO),
            )  # fmt: skip

    def finish(job: subprocess.Popen[bytes], run: int) -> None:
        try:
            status = job.wait(timeout=JOB_TIMEOUT)
        finally:
            if job.poll() is None:
                job.kill()
                job.wait()
        assert status == 0, (
            f"run {run} ended with {status}: {_last_line(tmp_path / f'run{run}.err')}"
        )

    lander = Lander(landing)
    try:
        first = start(1, "--stop_after_windows", "2")  # 1: stopped after 2 windows
        finish(first, 1)
        assert not _running(cluster), "run 1 ended, its Flink job did not"
        second = start(2)  # 2: goes on, then its TaskManager and process are killed
        try:
            _wait_for(
                lambda: bool(_published(state, 2)),
                second,
                tmp_path / "run2.err",
                "run 2 published a window",
            )
        finally:
            cluster.kill_taskmanager()
            second.send_signal(signal.SIGKILL)
            second.wait()
        cluster.ensure_taskmanager()
        third = start(3, "--stop_after_windows", "1")  # 3: goes on
        finish(third, 3)
        assert not _running(cluster), "run 3 ended, its Flink job did not"
    finally:
        lander.stop()
        cluster.cancel_running()

    windows = stream.StreamState(str(state)).windows()
    published = {i: r for i, r in windows.items() if r["status"] == "published"}
    by_run = {run: _published(state, run) for run in (1, 2, 3)}
    assert len(by_run[1]) >= 2 and by_run[2] and by_run[3], by_run
    # every window released once, with exactly the config's statistics
    document = json.loads((out / "release.json").read_text())
    released = sorted((r["name"], r["event_window"]) for r in document["releases"])
    assert len(released) == len(set(released)), "a window was released twice"
    assert released == sorted(
        (name, r["label"]) for r in published.values() for name in ("vote", "weight")
    )
    lines = [json.loads(x) for x in (out / "releases.jsonl").read_text().splitlines()]
    assert sorted((r["name"], r["event_window"]) for r in lines) == released
    # every window charged once: one ledger run per window, committed once published
    with open_ledger(url) as ledger:
        runs = [run for run in ledger.history("s")[0] if run.charged]
    charged = [run.details["window"] for run in runs]
    assert len(charged) == len(set(charged)), "a window was charged twice"
    committed = {run.id for run in runs if run.state == "committed"}
    assert committed == {r["run"] for r in published.values()}
    # the spammer: the 2 windows of the first run, no third after either restart
    key = stream.person_key(stream.StreamState(str(state)))
    stable, _ = canonical_hash64(pa.array(["spammer"]))
    spammer = int(stream.person_hashes(key, stable)[0])
    persons = {
        index: set(
            json.loads((state / "scratch" / str(r["attempt"]) / f"{index}.json").read_text())[
                "persons"
            ]
        )
        for index, r in published.items()
    }
    spammed = [index for index, found in persons.items() if spammer in found]
    assert len(spammed) == 2 and set(spammed) <= set(by_run[1]), (spammed, by_run)
    assert all(persons[i] and spammer not in persons[i] for i in by_run[2] + by_run[3])
