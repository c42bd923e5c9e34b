"""The stream job killed at each point of a window's life and restarted on the same ``--state``
(issue 37, item 0): no person's data in more than ``--max_windows_per_unit`` published windows,
no window published twice, none left charged and unpublished.

Each case runs the job in-process (``stream.run`` with a TestStream, as in ``test_stream.py``)
and "kills" it by raising :class:`Killed` (a ``BaseException``, which no handler of the job
catches) at one point:

* ``granted``: the windows are granted and the pipeline has read the first window's records, but
  has not written its releases; the pipeline is NOT stopped (a Flink job outlives its driver)
  and writes its releases while the restarted job runs;
* ``scratch``: the pipeline wrote a window's releases to the scratch location, not published;
* ``ledger``: the ledger committed the window's run, not published;
* ``publishing``: the window is recorded as published, the outputs not yet written.

The restart runs later (its clock three windows on) and reads every landed shard again, as a
real restart re-matching the landing folder does. One person (``spammer``) is in every shard.
Each person's windows are computed from what was published: a published window counts for every
person some pipeline admitted in that window (the pipelines' per-person window state is watched
through ``WindowAdmissions.admit``).
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
from datetime import datetime
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing import test_stream
from apache_beam.transforms.window import FixedWindows, TimestampedValue

from beam_dp.batching import canonical_hash64
from beam_dp.beam._contributions import WindowAdmissions
from beam_dp.ledger import open_ledger
from beam_dp.ledger.store import Reservation
from pipelines import budget, stream

SIZE = 60
BASE = 1_800_000_000 // SIZE * SIZE  # a window boundary
SHARDS = 3
LATER = 3  # the restart's clock, in windows after the first run's


class Killed(BaseException):
    """The job's process dies here."""


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "stream.toml"
    config.write_text(
        '[input]\nprivacy_unit = "user_id"\nformat = "csv"\n\n[budget]\nepsilon = 2.0\n\n'
        '[[statistics]]\nname = "vote"\ntype = "election"\ncandidate = "vote"\n'
        'candidates = ["a", "b"]\nweight = 1\n\n'
        '[[statistics]]\nname = "weight"\ntype = "median"\nvalue = "weight"\nlower = 0.0\n'
        "upper = 200.0\nnum_points = 201\nmax_contributions = 1\nweight = 1\n"
    )
    return config


def _shard(number: int) -> pa.RecordBatch:
    users = [f"u{number}-{i}" for i in range(60)] + ["spammer"]
    return pa.RecordBatch.from_pydict(
        {
            "user_id": users,
            "vote": ["a" if number % 2 else "b"] * len(users),
            "weight": [50.0 + i % 40 for i in range(len(users))],
        }
    )


def _source(first_window: int, shards: int = SHARDS) -> Any:
    """The first ``shards`` shards, landing one per window from ``first_window`` on."""

    def build(pipeline: beam.Pipeline) -> Any:
        test = test_stream.TestStream()
        for number in range(shards):
            stamp = BASE + (first_window + number) * SIZE + 5
            shard = (f"shard-{number}.csv", _shard(number))
            test = test.add_elements([TimestampedValue(shard, stamp)])
            test = test.advance_watermark_to(stamp + 1)
        return pipeline | test.advance_watermark_to_infinity()

    return build


def _window_index(label: str) -> int:
    start = label[1:].split(",", 1)[0]
    return int(datetime.fromisoformat(start).timestamp()) // SIZE - BASE // SIZE


class _Watch:
    """Which units each pipeline admitted in which window (every attempt, every statistic)."""

    def __init__(self) -> None:
        self.admitted: dict[int, set[int]] = {}
        self.lock = threading.Lock()
        self.coder = FixedWindows(SIZE).get_window_coder()

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = WindowAdmissions.admit
        watch = self

        def admit(self: WindowAdmissions, window: bytes, units: Any) -> Any:
            keep, state = original(self, window, units)
            index = int(watch.coder.decode(window).start) // SIZE - BASE // SIZE
            with watch.lock:
                found = watch.admitted.setdefault(index, set())
                found.update(int(u) for u in np.asarray(units)[keep])
            return keep, state

        monkeypatch.setattr(WindowAdmissions, "admit", admit)


def _argv(tmp_path: Path, url: str, windows_per_unit: int) -> list[str]:
    return ["--config", str(_config(tmp_path)), "--landing", "/data/landing/*.csv",
            "--state", str(tmp_path / "state"), "--output", str(tmp_path / "out"),
            "--window_seconds", str(SIZE), "--grant_ahead", "2", "--poll_seconds", "0.1",
            "--ledger", url, "--dataset", "people",
            "--max_windows_per_unit", str(windows_per_unit),
            "--runner", "BundleBasedDirectRunner"]  # fmt: skip


def _scratch_files(tmp_path: Path) -> list[Path]:
    """The windows' releases in the scratch location (not the runs' markers)."""
    found = (tmp_path / "state" / "scratch").rglob("*.json")
    return [p for p in found if p.is_file() and p.stem.isdigit()]


def _wait(condition: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _arm(point: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, phase: dict[str, int]) -> Any:
    """Patch the job so that its first run dies at ``point``; returns what the restart needs
    to do first (``granted``: let the first run's orphaned pipeline write its releases)."""
    if point == "granted":
        gate, entered, wrote = threading.Event(), threading.Event(), threading.Event()
        commit_window = stream.CommitWindow.process

        def held(self: Any, gathered: Any, window: Any = beam.DoFn.WindowParam) -> Any:
            if int(window.start) < BASE + LATER * SIZE:  # the first run's pipeline
                entered.set()
                gate.wait(120)
                yield from commit_window(self, gathered, window)
                wrote.set()
            else:
                yield from commit_window(self, gathered, window)

        monkeypatch.setattr(stream.CommitWindow, "process", held)
        run_pipeline = beam.Pipeline.run

        class Orphaned:  # the driver dies; its pipeline goes on (no cancel reaches it)
            def __init__(self, result: Any) -> None:
                self._result = result

            def wait_until_finish(self) -> Any:
                return self._result.wait_until_finish()

            def cancel(self) -> None:
                if phase["attempt"] != 1:
                    self._result.cancel()

        monkeypatch.setattr(
            beam.Pipeline, "run", lambda self, *a, **k: Orphaned(run_pipeline(self, *a, **k))
        )
        publish = stream.StreamJob.publish

        def dying_publish(self: Any) -> None:
            if phase["attempt"] == 1 and not self.reading:
                return publish(self)  # nothing granted before the pipeline reads
            if phase["attempt"] == 1:
                _wait(entered.is_set, "the first window's records")
                raise Killed
            if not gate.is_set():  # the restart runs: the orphan writes its releases now
                gate.set()
                _wait(wrote.is_set, "the orphaned pipeline's releases")
            publish(self)

        monkeypatch.setattr(stream.StreamJob, "publish", dying_publish)
        return None
    if point == "scratch":
        publish = stream.StreamJob.publish

        def dying_publish(self: Any) -> None:
            if phase["attempt"] == 1 and not self.reading:
                return publish(self)  # nothing granted before the pipeline reads
            if phase["attempt"] == 1:
                _wait(lambda: bool(_scratch_files(tmp_path)), "a window's releases")
                raise Killed
            publish(self)

        monkeypatch.setattr(stream.StreamJob, "publish", dying_publish)
        return None
    if point == "ledger":
        commit = Reservation.commit

        def dying_commit(self: Reservation, *args: Any, **kwargs: Any) -> Any:
            record = commit(self, *args, **kwargs)
            if phase["attempt"] == 1:
                raise Killed
            return record

        monkeypatch.setattr(Reservation, "commit", dying_commit)
        return None
    assert point == "publishing"
    write_outputs = stream.StreamJob.write_outputs

    def dying_write(self: Any) -> None:
        states = [
            json.loads(p.read_text()).get("status")
            for p in (tmp_path / "state" / "windows").glob("*.json")
        ]
        if phase["attempt"] == 1 and "published" in states:
            raise Killed
        write_outputs(self)

    monkeypatch.setattr(stream.StreamJob, "write_outputs", dying_write)
    return None


@pytest.mark.parametrize(
    ("point", "windows_per_unit"),
    [("granted", 1), ("scratch", 1), ("ledger", 1), ("publishing", 1), ("scratch", 2)],
)
def test_a_restart_after_a_kill_keeps_every_person_within_their_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str, windows_per_unit: int
) -> None:
    url = f"sqlite://{tmp_path / 'budget.db'}"
    budget.run(["create", "--ledger", url, "--dataset", "people", "--input", "/data/landing/",
                "--epsilon", "1000"], out=io.StringIO())  # fmt: skip
    watch = _Watch()
    watch.install(monkeypatch)
    phase = {"attempt": 1}
    _arm(point, tmp_path, monkeypatch, phase)
    argv = _argv(tmp_path, url, windows_per_unit)
    with pytest.raises(Killed):
        stream.run(argv, source=_source(0), now=lambda: BASE)

    phase["attempt"] = 2
    try:
        stream.run(argv, source=_source(LATER), now=lambda: BASE + LATER * SIZE)
    except (ValueError, stream.StreamError) as error:  # a restart with no windows left
        assert "the pipeline failed" not in str(error), error

    outputs = tmp_path / "out" / "release.json"
    assert outputs.exists(), "no window was published (the restart ended first)"
    document = json.loads(outputs.read_text())
    published = [(r["name"], _window_index(r["event_window"])) for r in document["releases"]]
    assert len(published) == len(set(published)), f"a release published twice: {published}"
    windows = sorted({w for _, w in published})
    assert windows, "nothing was published"
    for window in windows:  # a window is published whole
        assert sorted(n for n, w in published if w == window) == ["vote", "weight"]
    lines = (tmp_path / "out" / "releases.jsonl").read_text().splitlines()
    assert len(lines) == len(published)
    # each person's windows, from what was published
    per_person: dict[int, int] = {}
    for window in windows:
        for unit in watch.admitted.get(window, set()):
            per_person[unit] = per_person.get(unit, 0) + 1
    worst = max(per_person.values())
    assert worst <= windows_per_unit, (
        f"a person's data is in {worst} published windows (cap {windows_per_unit}); "
        f"windows {windows}"
    )
    # every window charged and committed in the ledger is published, once; none is stuck
    with open_ledger(url) as ledger:
        runs, _ = ledger.history("people")
    committed = sorted(_window_index(r.details["window"]) for r in runs if r.state == "committed")
    assert committed == windows, (committed, windows)


def _forget_persons(commit: Path) -> None:
    """Make a window's commit name no one (as a state of an earlier version of the job)."""
    committed = json.loads(commit.read_text())
    del committed["persons"]
    commit.write_text(json.dumps(committed))


def test_a_window_whose_persons_are_unknown_counts_for_everyone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback: ``--max_windows_per_unit 2``, one window published whose commit does not
    name its persons: it counts for everyone, so the restart admits each person in one window
    at most (a person it never saw too); once such windows reach the cap, a start refuses
    and charges nothing."""
    url = f"sqlite://{tmp_path / 'budget.db'}"
    budget.run(["create", "--ledger", url, "--dataset", "people", "--input", "/data/landing/",
                "--epsilon", "1000"], out=io.StringIO())  # fmt: skip
    watch = _Watch()
    watch.install(monkeypatch)
    argv = _argv(tmp_path, url, 2)
    first = stream.run(argv, source=_source(0, shards=1), now=lambda: BASE)
    assert {_window_index(r["event_window"]) for r in first["releases"]} == {0}
    (commit,) = _scratch_files(tmp_path)
    _forget_persons(commit)
    # shard 0 (the spammer's first shard) again, then shard 1 twice: one window each at most
    pairs = [(LATER, 0), (LATER + 1, 1), (LATER + 2, 1)]
    second = stream.run(argv, source=_landings(pairs), now=lambda: BASE + LATER * SIZE)
    windows = sorted({_window_index(r["event_window"]) for r in second["releases"]})
    assert windows == [0, LATER, LATER + 1], windows  # the job went on; no one in LATER + 2
    in_windows: dict[int, list[int]] = {}
    for window in windows:
        for unit in watch.admitted.get(window, set()):
            in_windows.setdefault(unit, []).append(window)
    assert in_windows[_unit("spammer")] == [0, LATER]
    assert in_windows[_unit("u1-7")] == [LATER + 1]  # window 0 counted for them too
    with open_ledger(url) as ledger:
        runs, _ = ledger.history("people")
    states = {_window_index(r.details["window"]): r.state for r in runs}
    # windows 1 and 2 were granted to the first run and closed unused: abandoned, charged
    assert states == {0: "committed", 1: "abandoned", 2: "abandoned", LATER: "committed",
                      LATER + 1: "committed", LATER + 2: "reserved"}  # fmt: skip
    _forget_persons(tmp_path / "state" / "scratch" / "2" / f"{BASE // SIZE + LATER}.json")
    with pytest.raises(ValueError, match="no more records"):
        stream.run(argv, source=_source(LATER + 4), now=lambda: BASE + (LATER + 4) * SIZE)
    with open_ledger(url) as ledger:
        assert len(ledger.history("people")[0]) == len(runs)  # nothing charged by the refusal


_KILLED_JOB = """
import json, sys
import numpy as np
sys.path.insert(0, {here!r})
import test_stream_restarts as t
from beam_dp.batching import canonical_hash64
from beam_dp.beam._contributions import WindowAdmissions
from pipelines import stream

original = WindowAdmissions.admit
watch = t._Watch()
log = open(sys.argv[1], "a")

def admit(self, window, units):
    keep, state = original(self, window, units)
    index = int(watch.coder.decode(window).start) // t.SIZE - t.BASE // t.SIZE
    log.write("".join(f"{{index}} {{int(u)}}\\n" for u in np.asarray(units)[keep]))
    log.flush()
    return keep, state

WindowAdmissions.admit = admit
stream.run(json.loads(sys.argv[2]), source=t._source(0), now=lambda: t.BASE)
"""


def test_a_sigkill_after_the_pipeline_committed_a_window_does_not_give_fresh_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real SIGKILL of the job's process while its first window's releases sit in the
    scratch location, unpublished (the driver sleeps between its looks): the restart
    publishes that window once and goes on, admitting no one of it again (each person's
    one window)."""
    url = f"sqlite://{tmp_path / 'budget.db'}"
    budget.run(["create", "--ledger", url, "--dataset", "people", "--input", "/data/landing/",
                "--epsilon", "1000"], out=io.StringIO())  # fmt: skip
    argv = _argv(tmp_path, url, 1)
    script = tmp_path / "killed_job.py"
    script.write_text(_KILLED_JOB.format(here=str(Path(__file__).parent)))
    admissions = tmp_path / "admissions.txt"
    first = [*argv, "--poll_seconds", "60"]  # the last one given wins
    job = subprocess.Popen(
        [sys.executable, str(script), str(admissions), json.dumps(first)],
        cwd=Path(__file__).parents[2],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait(lambda: bool(_scratch_files(tmp_path)) or job.poll() is not None,
              "a window's releases", timeout=240)  # fmt: skip
        assert job.poll() is None, "the job ended before it could be killed"
        os.kill(job.pid, signal.SIGKILL)
    finally:
        job.kill()
        job.wait()
    first_window = tmp_path / "state" / "windows" / f"{BASE // SIZE}.json"
    windows_before = json.loads(first_window.read_text())
    assert windows_before["status"] == "granted"  # not published when it was killed
    watch = _Watch()
    watch.install(monkeypatch)
    stream.run(argv, source=_source(LATER), now=lambda: BASE + LATER * SIZE)  # it goes on
    for line in admissions.read_text().splitlines():
        index, unit = line.split()
        watch.admitted.setdefault(int(index), set()).add(int(unit))
    document = json.loads((tmp_path / "out" / "release.json").read_text())
    published = [(r["name"], _window_index(r["event_window"])) for r in document["releases"]]
    assert len(published) == len(set(published)), published
    windows = sorted({w for _, w in published})
    assert windows, windows
    per_person: dict[int, int] = {}
    for window in windows:
        for unit in watch.admitted.get(window, set()):
            per_person[unit] = per_person.get(unit, 0) + 1
    assert max(per_person.values()) == 1
    with open_ledger(url) as ledger:
        runs, _ = ledger.history("people")
    committed = sorted(_window_index(r.details["window"]) for r in runs if r.state == "committed")
    assert committed == windows


def _landings(pairs: list[tuple[int, int]]) -> Any:
    """Shard ``number`` landing in window ``window``, for each ``(window, number)``."""

    def build(pipeline: beam.Pipeline) -> Any:
        test = test_stream.TestStream()
        for window, number in pairs:
            stamp = BASE + window * SIZE + 5
            shard = (f"shard-{number}.csv", _shard(number))
            test = test.add_elements([TimestampedValue(shard, stamp)])
            test = test.advance_watermark_to(stamp + 1)
        return pipeline | test.advance_watermark_to_infinity()

    return build


def _unit(user: str) -> int:
    hashes, bad = canonical_hash64(pa.array([user]))
    assert not bad.any()
    return int(hashes[0])


@pytest.mark.parametrize("killed", [None, "ledger"])
def test_restarts_after_publications_keep_each_persons_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, killed: str | None
) -> None:
    """``--max_windows_per_unit 2`` and three runs on one ``--state``, each after the last
    published windows (``ledger``: the second run killed once the ledger committed its first
    window, before publishing it): the job goes on after each restart; the spammer, in two
    windows of the first run, is in no window after it; the others keep the windows they have
    left (a person of the first run's shards gets one more, a new person two), computed from
    what was published; every window charged once, every published window committed once."""
    url = f"sqlite://{tmp_path / 'budget.db'}"
    budget.run(["create", "--ledger", url, "--dataset", "people", "--input", "/data/landing/",
                "--epsilon", "1000"], out=io.StringIO())  # fmt: skip
    watch = _Watch()
    watch.install(monkeypatch)
    phase = {"attempt": 0}  # _arm kills the run whose phase is 1: the second here
    if killed is not None:
        _arm(killed, tmp_path, monkeypatch, phase)
    argv = _argv(tmp_path, url, 2)
    runs = [
        (0, [(0, 0), (1, 1)]),  # the spammer in windows 0 and 1: its two
        (3, [(3, 0), (4, 1)]),  # shards 0 and 1 again: their people's second window
        (6, [(6, 0), (7, 1), (8, 2)]),  # shards 0, 1 at their cap; shard 2's people new
    ]
    for number, (start, pairs) in enumerate(runs):
        phase["attempt"] = {0: 0, 1: 1, 2: 3}[number]
        try:
            stream.run(argv, source=_landings(pairs), now=lambda start=start: BASE + start * SIZE)
        except Killed:
            assert killed is not None and number == 1
    document = json.loads((tmp_path / "out" / "release.json").read_text())
    published = [(r["name"], _window_index(r["event_window"])) for r in document["releases"]]
    assert len(published) == len(set(published)), published
    windows = sorted({w for _, w in published})
    in_windows: dict[int, list[int]] = {}
    for window in windows:
        for unit in watch.admitted.get(window, set()):
            in_windows.setdefault(unit, []).append(window)
    assert in_windows[_unit("spammer")] == [0, 1]  # no third window
    assert in_windows[_unit("u0-7")] == [0, 3]
    assert in_windows[_unit("u2-7")] == [8]
    if killed is None:
        assert windows == [0, 1, 3, 4, 8], windows  # the job went on after each restart
        assert in_windows[_unit("u1-7")] == [1, 4]
    else:  # window 4 was published by the restart if its releases were committed, else not
        assert windows in ([0, 1, 3, 4, 8], [0, 1, 3, 7, 8]), windows
        assert in_windows[_unit("u1-7")] in ([1, 4], [1, 7])
    assert max(len(found) for found in in_windows.values()) <= 2
    with open_ledger(url) as ledger:
        history, _ = ledger.history("people")
    charged = [_window_index(r.details["window"]) for r in history]
    assert len(charged) == len(set(charged)), charged  # no window charged twice
    committed = sorted(
        _window_index(r.details["window"]) for r in history if r.state == "committed"
    )
    assert committed == windows
