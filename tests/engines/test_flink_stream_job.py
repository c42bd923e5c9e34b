"""The streaming job (``python -m pipelines.stream``, issue 26) on Beam's FlinkRunner in
streaming mode (embedded mini cluster, LOOPBACK), watching a real landing folder
(``ReadExport(watch_interval)``: ``fileio.MatchContinuously``) while
``python -m pipelines.land_shards`` drops the sample export's shards into it, one every 2 s for
as long as the job runs (a window that no file lands in holds no input and releases nothing, so
the shards must keep landing after the job's slow start on Flink): each window is
published once, with its own run in the ledger. Bounded in time: the job stops itself after
``WINDOWS`` windows, or at the latest on a stop file written after ``DEADLINE`` seconds (the
test then fails on the missing windows instead of hanging)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from engines_env import REPO

from beam_dp.ledger import open_ledger
from pipelines import budget, stream

# One worker runs this group (tests/engines/conftest.py says why).
pytestmark = pytest.mark.xdist_group("flink-embedded")

WINDOWS = 2
WINDOW_SECONDS = 10
DEADLINE = 480.0  # seconds; the windows close after ~30 s on an idle machine, ~150 s on a
# shared one under a load of 30 (2 cores): the deadline only ends a job that hangs


def test_the_stream_job_publishes_each_window_once_on_flink(
    flink_embedded: str, tmp_path: Path
) -> None:
    landing, stop = tmp_path / "landing", tmp_path / "stop"
    landing.mkdir()
    url = f"sqlite:///{tmp_path / 'stream.db'}"
    create = ["create", "--ledger", url, "--dataset", "survey_stream", "--input", str(landing),
              "--epsilon", "100", "--renewal", "daily"]  # fmt: skip
    budget.run(create, out=io.StringIO())
    lander = subprocess.Popen(
        [sys.executable, "-m", "pipelines.land_shards",
         "--source", str(REPO / "sample_data" / "survey" / "export-*.avro"),
         "--landing", str(landing), "--every", "2", "--rounds", "100"],
        cwd=REPO, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = threading.Timer(DEADLINE, stop.touch)
    deadline.daemon = True
    deadline.start()
    try:
        document = stream.run(
            ["--config", str(REPO / "pipelines" / "configs" / "sample_stream.toml"),
             "--landing", str(landing / "*.avro"), "--state", str(tmp_path / "state"),
             "--output", str(tmp_path / "out"), "--window_seconds", str(WINDOW_SECONDS),
             "--max_windows_per_unit", "2", "--stop_after_windows", str(WINDOWS),
             "--stop_file", str(stop), "--poll_seconds", "1",
             "--ledger", url, "--dataset", "survey_stream",
             "--runner", "FlinkRunner", "--flink_version", "1.19",
             "--job_endpoint", flink_embedded, "--environment_type", "LOOPBACK"]
        )  # fmt: skip
    finally:
        deadline.cancel()
        lander.kill()
        lander.wait()
    published = [(r["name"], r["event_window"]) for r in document["releases"]]
    assert len(published) == len(set(published)), "a window's release was published twice"
    windows = sorted({window for _, window in published})
    assert len(windows) >= WINDOWS, (document["windows"], stop.exists())
    for window in windows:  # every window holds exactly the config's statistics
        assert sorted(name for name, w in published if w == window) == [
            "median_weight",
            "vote_winner",
        ]
    on_disk = json.loads((tmp_path / "out" / "release.json").read_text())
    assert sorted((r["name"], r["event_window"]) for r in on_disk["releases"]) == sorted(published)
    lines = (tmp_path / "out" / "releases.jsonl").read_text().splitlines()
    assert len(lines) == len(published)
    with open_ledger(url) as ledger:
        runs, _ = ledger.history("survey_stream")
    committed = [run for run in runs if run.state == "committed"]
    assert len(committed) == len(windows)  # one run per published window
    assert all(run.cost.epsilon == 1 for run in committed)  # 2 per window / 2 windows a person
    # nothing charged while Flink started: every window charged closes after the pipeline's
    # first read (its marker's time), so each could admit a record (issue 37, item 2)
    reading = (tmp_path / "state" / "scratch" / "1" / stream.READING_MARKER).stat().st_mtime
    clock = stream.WindowClock(WINDOW_SECONDS)
    first = int(reading) // WINDOW_SECONDS
    ends = {clock.label(i): clock.closes_at(i) for i in range(first - 100, first + 100)}
    charged = [run.details["window"] for run in runs if run.charged]
    assert charged and all(ends.get(window, 0) > reading for window in charged), (charged, reading)
