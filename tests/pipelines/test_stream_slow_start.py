"""Windows are charged only once the pipeline reads (issue 37, item 2): a pipeline that starts
slowly (its source emits its first batch after the clock has passed several windows) costs
nothing for the windows that closed before it could read a record."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.testing import test_stream
from apache_beam.transforms.window import TimestampedValue

from beam_dp.ledger import open_ledger
from pipelines import budget, stream

SIZE = 60
BASE = 1_800_000_000 // SIZE * SIZE  # a window boundary (2027-01-15)
START_SECONDS = 2.0  # how long the pipeline takes to read its first batch
WINDOW_EVERY = 0.25  # the fake clock moves one window on every this many real seconds


class StartingClock:
    """The grants' clock: one window on every WINDOW_EVERY seconds while the pipeline starts,
    stopped at the moment its source reads (so the test knows which window that is). One per
    test, module-wide: the pipeline gets a pickled copy of its source, not this object."""

    current: StartingClock | None = None

    def __init__(self, start: float = BASE) -> None:
        self.start = start
        self.started = time.monotonic()
        self.stopped: float | None = None
        StartingClock.current = self

    def __call__(self) -> float:
        if self.stopped is not None:
            return self.stopped
        return self.start + int((time.monotonic() - self.started) / WINDOW_EVERY) * SIZE

    def stop(self) -> float:
        self.stopped = self()
        return self.stopped


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "stream.toml"
    config.write_text(
        '[input]\nprivacy_unit = "user_id"\nformat = "csv"\n\n[budget]\nepsilon = 2.0\n\n'
        '[[statistics]]\nname = "vote"\ntype = "election"\ncandidate = "vote"\n'
        'candidates = ["a", "b"]\nweight = 1\n'
    )
    return config


def _emit_after_start(_: object) -> Iterator[TimestampedValue]:
    time.sleep(START_SECONDS)  # the pipeline starting (Flink: tens of seconds)
    assert StartingClock.current is not None
    stamp = StartingClock.current.stop() + 5  # the file is matched now
    users = [f"u{i}" for i in range(100)]
    batch = pa.RecordBatch.from_pydict({"user_id": users, "vote": ["a"] * len(users)})
    yield TimestampedValue(("shard-0.csv", batch), stamp)


def _slow_source(pipeline: beam.Pipeline) -> Any:
    return pipeline | beam.Create([None]) | "SlowStart" >> beam.FlatMap(_emit_after_start)


def _argv(tmp_path: Path, url: str) -> list[str]:
    return ["--config", str(_config(tmp_path)), "--landing", "/data/landing/*.csv",
            "--state", str(tmp_path / "state"), "--output", str(tmp_path / "out"),
            "--window_seconds", str(SIZE), "--grant_ahead", "1", "--poll_seconds", "0.1",
            "--ledger", url, "--dataset", "people", "--max_windows_per_unit", "2",
            "--runner", "BundleBasedDirectRunner"]  # fmt: skip


def test_a_slow_start_charges_no_window_that_closed_before_the_pipeline_read(
    tmp_path: Path,
) -> None:
    url = f"sqlite://{tmp_path / 'budget.db'}"
    budget.run(["create", "--ledger", url, "--dataset", "people", "--input", "/data/landing/",
                "--epsilon", "100"], out=io.StringIO())  # fmt: skip
    clock = StartingClock()
    argv = _argv(tmp_path, url)
    document = stream.run(
        argv,
        source=_slow_source,
        now=clock,
    )
    assert clock.stopped is not None
    first_read = int(clock.stopped - BASE) // SIZE  # the window the pipeline first read in
    assert first_read >= 3, first_read  # the start took several windows
    with open_ledger(url) as ledger:
        runs, _ = ledger.history("people")
    charged = sorted(str(run.details["window"]) for run in runs)
    published = {r["event_window"] for r in document["releases"]}
    labels = {w["window"]: w["status"] for w in document["windows"]}
    # the window the first record came in, and the one ahead of it: nothing before
    first_label = stream.WindowClock(SIZE).label(BASE // SIZE + first_read)
    assert published == {first_label}, (published, labels)
    assert len(runs) == 2 and all(run.charged for run in runs), (charged, labels)
    assert sorted(labels) == sorted(
        stream.WindowClock(SIZE).label(BASE // SIZE + first_read + n) for n in (0, 1)
    ), labels


def test_a_restart_that_starts_slowly_charges_nothing_before_its_pipeline_reads(
    tmp_path: Path,
) -> None:
    """The first run publishes window 0 (each of its people may be in one more window); the
    restart's pipeline reads only several windows later: the windows it grants are the one it
    reads in and the next (``--grant_ahead 1``), not the clock's windows at its start."""
    url = f"sqlite://{tmp_path / 'budget.db'}"
    budget.run(["create", "--ledger", url, "--dataset", "people", "--input", "/data/landing/",
                "--epsilon", "100"], out=io.StringIO())  # fmt: skip
    test = test_stream.TestStream()
    users = [f"u{i}" for i in range(100)]
    batch = pa.RecordBatch.from_pydict({"user_id": users, "vote": ["b"] * len(users)})
    test = test.add_elements([TimestampedValue(("shard-first.csv", batch), BASE + 5)])
    first = stream.run(
        _argv(tmp_path, url),
        source=lambda pipeline: pipeline | test.advance_watermark_to_infinity(),
        now=lambda: BASE,
    )
    assert len(first["releases"]) == 1
    with open_ledger(url) as ledger:
        before = {run.id for run in ledger.history("people")[0]}
    clock = StartingClock(start=BASE + 3 * SIZE)
    second = stream.run(_argv(tmp_path, url), source=_slow_source, now=clock)
    assert clock.stopped is not None
    first_read = int(clock.stopped - BASE) // SIZE
    assert first_read >= 6, first_read  # the restart's start took several windows
    with open_ledger(url) as ledger:
        runs = [run for run in ledger.history("people")[0] if run.id not in before]
    label = stream.WindowClock(SIZE).label(BASE // SIZE + first_read)
    after = stream.WindowClock(SIZE).label(BASE // SIZE + first_read + 1)
    assert [run.details["window"] for run in runs] == [label, after], [r.details for r in runs]
    assert {r["event_window"] for r in second["releases"]} == {
        stream.WindowClock(SIZE).label(BASE // SIZE),
        label,
    }
