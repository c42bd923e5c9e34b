"""Windowed private releases on bounded input, on a runner given by flags (issue 25).

One export of 3 fixed windows of 10 s, run as a user runs a windowed pipeline: the bounding
step (``BoundContributions``, whose output is checked exactly) and two private transforms
(``TopCandidates``, ``PrivateMedian``), each window released once. Answers are certain up to
1e-6: in window ``i`` 200 units choose ``WINNERS[i]`` and none the other candidate, so the
exponential mechanism at ``ε = 1`` per window puts mass at most ``exp(-200 / 2)`` on the loser.
A unit "spam" has 3 rows in every window: with ``max_windows_per_unit=2`` it keeps one row
(``max_contributions_per_unit=1``) in exactly 2 windows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import window
from apache_beam.utils.timestamp import Timestamp
from engines_env import DumpElements

from beam_dp.batching import VALUE, ContributionBounds
from beam_dp.beam._contributions import BoundContributions, EncodeBatches
from beam_dp.beam.quantiles import PrivateMedian
from beam_dp.beam.selection import TopCandidates

SIZE = 10  # seconds per fixed window
WINNERS = ["a", "b", "a"]  # the candidate every ordinary unit of window i chooses
USERS = 200  # ordinary units per window
SPAM = 99.0


def _rows() -> list[window.TimestampedValue]:
    batches = []
    for i, winner in enumerate(WINNERS):
        units = [f"w{i}u{j}" for j in range(USERS)]
        rows = {
            "u": [*units, "spam", "spam", "spam"],
            "c": [winner] * (USERS + 3),
            "v": [float(i)] * USERS + [SPAM] * 3,
        }
        batches.append(window.TimestampedValue(rows, SIZE * i + 1))
    return batches


def run_windowed(flags: Sequence[str], directory: Path) -> None:
    """Run the windowed pipeline with ``flags`` (runner, job endpoint...) and check it."""
    bounded_dir, releases_dir = directory / "bounded", directory / "releases"
    common: dict[str, Any] = {"unit_column": "u", "epsilon": 2.0, "max_windows_per_unit": 2}
    with beam.Pipeline(options=PipelineOptions(list(flags))) as pipeline:
        data = (
            pipeline
            | "Rows" >> beam.Create(_rows())
            | "Windows" >> beam.WindowInto(window.FixedWindows(SIZE))
        )
        _ = (
            data
            | "Encode" >> EncodeBatches(unit_column="u", value_column="v")
            | "Bound"
            >> BoundContributions(
                ContributionBounds(max_contributions_per_unit=1), max_windows_per_unit=2
            )
            | "DumpBounded" >> DumpElements.into(bounded_dir)
        )
        top = data | "Top" >> TopCandidates.Globally(
            candidate_column="c", candidates=["a", "b"], k=1, **common
        )
        median = data | "Median" >> PrivateMedian.Globally(
            value_column="v", lower=0.0, upper=100.0, num_points=101, **common
        )
        _ = (top, median) | beam.Flatten() | "DumpReleases" >> DumpElements.into(releases_dir)

    kept: dict[int, list[float]] = {}
    for batch, win in DumpElements.read(bounded_dir):
        assert isinstance(win, window.IntervalWindow) and win.end - win.start == SIZE
        kept.setdefault(int(win.start) // SIZE, []).extend(batch[VALUE].tolist())
    assert sorted(kept) == [0, 1, 2]
    assert sum(SPAM in values for values in kept.values()) == 2  # 2 windows of 3
    for i, values in kept.items():
        assert values.count(SPAM) <= 1  # one row per kept window
        assert sorted(v for v in values if v != SPAM) == [float(i)] * USERS

    by_name: dict[str, dict[str, Any]] = {}
    for release, _ in DumpElements.read(releases_dir):
        windows = by_name.setdefault(release.name, {})
        assert release.window not in windows, "a window was released twice"
        windows[release.window] = release
    assert set(by_name) == {"top_candidates", "median"}
    names = [
        f"[{Timestamp(SIZE * i).to_rfc3339()}, {Timestamp(SIZE * (i + 1)).to_rfc3339()})"
        for i in range(len(WINNERS))
    ]
    for releases in by_name.values():
        assert sorted(releases) == names
        for release in releases.values():
            assert release.ledger.epsilon == 1.0  # ε / max_windows_per_unit
    for name, winner in zip(names, WINNERS, strict=True):
        assert by_name["top_candidates"][name].value == winner  # k=1: the label itself
