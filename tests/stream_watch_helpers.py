"""The stream job on a real landing folder with shards landing at set times (issue 37 item 3):
one scenario for the DirectRunner (the job's own watcher, ``beam_dp.io.watch``) and for Flink
(``fileio.MatchContinuously``), and what of its outcome is deterministic.

The scenario: a warm-up shard lies in the folder when the job starts (the pipeline's first
read, after which windows are granted); once the pipeline reads (its reading marker), shard 1
lands in the middle of the second window after the marker's, shard 2 in the middle of the
third. The job is stopped (stop file) once shard 2's window is published. The shards are
CSV from a seeded generator, so every run lands the same rows.

"The same releases" for DP outputs: the released values are samples drawn from the OS CSPRNG
(never seeded), so two runs differ there whatever the runner. What is deterministic, and what
:func:`outcome` keeps: which shards' rows each published window admitted (every row of its
shard, and which people), and each window's planned releases (statistic, mechanism, epsilon,
sensitivity, bounds, the accuracy statement: all public parameters), without the sampled value
and interval and the window's wall-clock label.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest

from pipelines import stream

SEED = 20270115
#: shard name -> the users in it (the warm-up's are nobody else's)
SHARDS = {
    "0-warmup.csv": range(1000, 1040),
    "1-first.csv": range(0, 200),
    "2-second.csv": range(100, 300),
}
CONFIG = (
    '[input]\nprivacy_unit = "user_id"\nformat = "csv"\n\n[budget]\nepsilon = 2.0\n\n'
    '[[statistics]]\nname = "vote"\ntype = "election"\ncandidate = "vote"\n'
    'candidates = ["a", "b", "c"]\nweight = 1\n\n'
    '[[statistics]]\nname = "weight"\ntype = "median"\nvalue = "weight"\nlower = 0.0\n'
    "upper = 200.0\nnum_points = 201\nmax_contributions = 1\nweight = 1\n"
)
#: what a release holds that is sampled (or the wall clock's), not planned
_SAMPLED = ("value", "window", "event_window")


def write_shard(folder: Path, name: str) -> None:
    """Shard ``name``'s rows (seeded: the same on every run), landed whole (one rename)."""
    users = SHARDS[name]
    rng = np.random.default_rng([SEED, len(name), users.start])
    table = pa.table(
        {
            "user_id": [f"u{u}" for u in users],
            "vote": rng.choice(["a", "b", "c"], size=len(users), p=[0.5, 0.3, 0.2]).tolist(),
            "weight": np.round(rng.normal(70.0, 12.0, size=len(users)), 1).tolist(),
        }
    )
    partial = folder / f".{name}.partial"
    pa_csv.write_csv(table, partial)
    partial.replace(folder / name)


class Admitted:
    """Rows the stream job's ``AssignWindows`` admits, per window and shard (a test hook: the
    DoFn runs in this process on the DirectRunner and on Flink's LOOPBACK harness)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rows: dict[int, dict[str, set[str]]] = {}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = stream.AssignWindows.process
        admitted = self

        def process(
            self: Any, element: Any, timestamp: Any = beam.DoFn.TimestampParam
        ) -> Iterator[Any]:
            for out in original(self, element, timestamp):
                source, part = out.value
                index = self._clock.index(float(out.timestamp))
                units = part.column("user_id").to_pylist()
                with admitted._lock:
                    shard = Path(str(source)).name
                    admitted.rows.setdefault(index, {}).setdefault(shard, set()).update(units)
                yield out

        monkeypatch.setattr(stream.AssignWindows, "process", process)


def run_scenario(
    tmp_path: Path,
    runner_flags: list[str],
    *,
    window_seconds: int,
    poll_seconds: float,
    deadline: float,
) -> tuple[dict[str, Any], int]:
    """Run the stream job on the scenario; return its document and the window size."""
    landing, state, out, stop = (tmp_path / n for n in ("landing", "state", "out", "stop"))
    landing.mkdir()
    config = tmp_path / "stream.toml"
    config.write_text(CONFIG)
    write_shard(landing, "0-warmup.csv")
    clock = stream.WindowClock(window_seconds)
    marker = state / "scratch" / "1" / stream.READING_MARKER
    ended = threading.Event()

    def published(index: int) -> bool:
        try:
            document = json.loads((out / "release.json").read_text())
        except (OSError, ValueError):
            return False
        return any(r.get("event_window") == clock.label(index) for r in document["releases"])

    def lander() -> None:
        until = time.time() + deadline
        try:
            while not marker.exists() and time.time() < until and not ended.is_set():
                time.sleep(0.05)
            reading = clock.index(time.time())
            for k, name in ((2, "1-first.csv"), (3, "2-second.csv")):
                _sleep_until((reading + k + 0.5) * window_seconds, until, ended)
                write_shard(landing, name)
            while not published(reading + 3) and time.time() < until and not ended.is_set():
                time.sleep(0.1)
        finally:
            stop.touch()

    thread = threading.Thread(target=lander, daemon=True)
    thread.start()
    try:
        document = stream.run(
            ["--config", str(config), "--landing", str(landing / "*.csv"),
             "--state", str(state), "--output", str(out),
             "--window_seconds", str(window_seconds), "--max_windows_per_unit", "2",
             "--poll_seconds", str(poll_seconds), "--stop_file", str(stop), *runner_flags]
        )  # fmt: skip
    finally:
        ended.set()
        thread.join(timeout=10)
    return document, window_seconds


def _sleep_until(moment: float, until: float, ended: threading.Event) -> None:
    while time.time() < min(moment, until) and not ended.is_set():
        time.sleep(0.02)


def planned(release: dict[str, Any]) -> str:
    """A release without what is sampled: its plan and accuracy statement (public)."""
    kept = {k: v for k, v in release.items() if k not in _SAMPLED}
    if isinstance(kept.get("interval"), dict):
        kept["interval"] = {
            k: v
            for k, v in kept["interval"].items()
            # the ends are sampled, and so are their widths over the public range and the note
            if k not in ("lower", "upper", "share_of_public_range", "note")
        }
    return json.dumps(kept, sort_keys=True)


def outcome(
    document: dict[str, Any], admitted: Admitted, window_seconds: int
) -> list[tuple[tuple[tuple[str, int], ...], tuple[str, ...]]]:
    """The deterministic part of a run, per published window holding a landed shard (the
    warm-up's window depends on when the pipeline first read, so it is left out): the shards
    it admitted with their number of people, and its planned releases."""
    clock = stream.WindowClock(window_seconds)
    by_window: dict[str, list[str]] = {}
    for release in document["releases"]:
        by_window.setdefault(release["event_window"], []).append(planned(release))
    result = []
    for index in sorted(admitted.rows):
        shards = admitted.rows[index]
        if set(shards) == {"0-warmup.csv"}:
            continue
        label = clock.label(index)
        result.append(
            (
                tuple(sorted((name, len(units)) for name, units in shards.items())),
                tuple(sorted(by_window.get(label, []))),
            )
        )
    return result


def expected_people() -> list[tuple[tuple[str, int], ...]]:
    """Shard 1's window admits its 200 people, shard 2's its 200 (each person in at most 2
    windows: nobody is cut)."""
    return [(("1-first.csv", 200),), (("2-second.csv", 200),)]
