"""A shard that lands twice (issue 37): rewritten under the same name (read again, as after a
restart that matches the landing folder anew) or copied under a new name. The rule is the
bounds alone: every row that lands goes through the same per-person bounds, whatever its file,
so a duplicate cannot put a person in more than ``--max_windows_per_unit`` windows nor give
them more than the statistic's rows per window (here 1). Each person's admitted windows are
watched through ``WindowAdmissions.admit`` and the rows each person keeps in a window through
``bound_rows``."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing import test_stream
from apache_beam.transforms.window import FixedWindows, TimestampedValue

from beam_dp.batching import UNIT, canonical_hash64
from beam_dp.beam import _contributions
from beam_dp.beam._contributions import WindowAdmissions
from pipelines import stream

SIZE = 60
BASE = 1_800_000_000 // SIZE * SIZE  # a window boundary (2027-01-15)
PEOPLE = 60


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "stream.toml"
    config.write_text(
        '[input]\nprivacy_unit = "user_id"\nformat = "csv"\n\n[budget]\nepsilon = 2.0\n\n'
        '[[statistics]]\nname = "weight"\ntype = "median"\nvalue = "weight"\nlower = 0.0\n'
        "upper = 200.0\nnum_points = 201\nmax_contributions = 1\n"
    )
    return config


def _shard() -> pa.RecordBatch:
    users = [f"u{i}" for i in range(PEOPLE)]  # one row each
    return pa.RecordBatch.from_pydict(
        {"user_id": users, "weight": [50.0 + i % 40 for i in range(PEOPLE)]}
    )


def _source(landings: list[tuple[str, float]]) -> Any:
    def build(pipeline: beam.Pipeline) -> Any:
        test = test_stream.TestStream()
        for name, stamp in landings:
            test = test.add_elements([TimestampedValue((name, _shard()), stamp)])
            test = test.advance_watermark_to(stamp + 1)
        return pipeline | test.advance_watermark_to_infinity()

    return build


@pytest.mark.parametrize("second_name", ["shard-0.csv", "copy-of-shard-0.csv"])
def test_a_shard_landing_twice_keeps_each_person_within_the_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, second_name: str
) -> None:
    lock = threading.Lock()
    offered: dict[int, set[int]] = {}  # per window: the people whose rows reached the cap
    admitted: dict[int, dict[int, int]] = {}  # per person: their admitted windows
    most_rows: list[int] = []  # per bounding call (one window's shard): a person's most rows
    coder = FixedWindows(SIZE).get_window_coder()
    admit = WindowAdmissions.admit

    def watched_admit(self: WindowAdmissions, window: bytes, units: Any) -> Any:
        keep, state = admit(self, window, units)
        index = int(coder.decode(window).start) // SIZE - BASE // SIZE
        with lock:
            offered.setdefault(index, set()).update(int(u) for u in np.asarray(units))
            for unit in np.asarray(units)[keep]:
                admitted.setdefault(int(unit), {}).setdefault(index, 0)
        return keep, state

    bound_rows = _contributions.bound_rows

    def watched_bound_rows(rows: Any, *args: Any, **kwargs: Any) -> Any:
        bounded = bound_rows(rows, *args, **kwargs)
        _, counts = np.unique(np.asarray(bounded[UNIT]), return_counts=True)
        with lock:
            most_rows.append(int(counts.max(initial=0)))
        return bounded

    monkeypatch.setattr(WindowAdmissions, "admit", watched_admit)
    monkeypatch.setattr(_contributions, "bound_rows", watched_bound_rows)
    landings = [
        ("shard-0.csv", BASE + 5),  # window 0
        (second_name, BASE + 20),  # the same rows again, window 0
        (second_name, BASE + SIZE + 5),  # and again, window 1
    ]
    argv = ["--config", str(_config(tmp_path)), "--landing", "/data/landing/*.csv",
            "--state", str(tmp_path / "state"), "--output", str(tmp_path / "out"),
            "--window_seconds", str(SIZE), "--grant_ahead", "2", "--poll_seconds", "0.1",
            "--max_windows_per_unit", "1", "--runner", "BundleBasedDirectRunner"]  # fmt: skip
    document = stream.run(argv, source=_source(landings), now=lambda: BASE)
    # two per-person window states see the rows: the job's (persons by keyed hash) first, then
    # each statistic's (by the stable unit hash), both WindowAdmissions
    stable, _ = canonical_hash64(pa.array([f"u{i}" for i in range(PEOPLE)]))
    units = {int(u) for u in stable}
    persons = set(admitted) - units
    # the duplicates were read: every person's rows reached the job's cap in both windows
    assert len(offered.get(0, set()) - units) == PEOPLE
    assert len(offered.get(1, set()) - units) == PEOPLE
    # ... and each person is in one window (the cap), with one row in it (the rows bound)
    assert set(admitted) & units == units and len(persons) == PEOPLE, admitted
    assert all(list(w) == [0] for w in admitted.values()), admitted
    assert most_rows and max(most_rows) == 1, most_rows
    published = {r["event_window"] for r in document["releases"]}
    assert stream.WindowClock(SIZE).label(BASE // SIZE) in published, published
