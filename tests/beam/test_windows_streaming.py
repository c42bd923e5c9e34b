"""Windows on unbounded (streaming) input: per-unit state keeps each unit's rows in the first
``max_windows_per_unit`` windows its rows arrive in; releases run at ``ε / max_windows_per_unit``
and every transform releases in the same windows, as on bounded input (tests/beam/test_windows.py).

Streams are ``TestStream``s on Beam's BundleBasedDirectRunner (the one that runs them). It
reads the stream's next event only when everything downstream is idle, so the order in which
the bounding step receives the batches is the order of the stream's events.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.testing import test_stream
from apache_beam.transforms import window
from apache_beam.utils.timestamp import Timestamp

from beam_dp.batching import VALUE, ContributionBounds
from beam_dp.beam._contributions import BoundContributions, EncodeBatches, WindowAdmissions
from beam_dp.beam.quantiles import PrivateMedian, PrivateQuantiles
from beam_dp.beam.selection import ExponentialSelect, TopCandidates
from beam_dp.release import Release

SPAM = 99.0  # the value that marks the flooding unit's rows
WINDOWS = 5
SIZE = 10  # seconds per fixed window


def window_name(index: int) -> str:
    start, end = (Timestamp(SIZE * i).to_rfc3339() for i in (index, index + 1))
    return f"[{start}, {end})"


def run_stream(
    collect: Any,
    stream: test_stream.TestStream,
    build: Callable[[Any], Any],
    windowfn: Any = None,
) -> list[tuple[Any, Any]]:
    """``build(windowed stream)`` on the streaming DirectRunner; its ``(element, window)``s."""
    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = True

    def whole(pipeline: beam.Pipeline) -> Any:
        windows = beam.WindowInto(windowfn or window.FixedWindows(SIZE))
        data = pipeline | stream | "Windows" >> windows
        assert not data.is_bounded
        return build(data)

    return collect(whole, runner=BundleBasedDirectRunner(), options=options)


def spam_stream(order: Sequence[int]) -> test_stream.TestStream:
    """Unit "spam" has 3 rows in each of 5 windows of 10 s, which arrive in ``order``; unit
    "u{i}" one row in window i. The watermark stays at 0 until every batch has arrived, so
    no batch is late whatever the order."""
    stream = test_stream.TestStream().advance_watermark_to(0)
    for i in order:
        rows = {"u": ["spam", "spam", "spam", f"u{i}"], "v": [SPAM, SPAM, SPAM, float(i)]}
        stream = stream.add_elements([window.TimestampedValue(rows, SIZE * i + 1)])
    return stream.advance_watermark_to_infinity()


def window_index(win: window.IntervalWindow) -> int:
    return int(win.start) // SIZE


# ------------------------------------------------------------------------- bounding step


@pytest.mark.parametrize("order", [(0, 1, 2, 3, 4), (3, 0, 4, 1, 2)])
def test_a_unit_keeps_rows_in_the_first_windows_it_arrives_in(
    collect: Any, order: tuple[int, ...]
) -> None:
    found = run_stream(
        collect,
        spam_stream(order),
        lambda data: (
            data
            | EncodeBatches(unit_column="u", value_column="v")
            | BoundContributions(
                ContributionBounds(max_contributions_per_unit=1), max_windows_per_unit=2
            )
        ),
    )
    kept: dict[int, list[float]] = {}
    for batch, win in found:
        assert isinstance(win, window.IntervalWindow)  # back in its own window
        kept.setdefault(window_index(win), []).extend(batch[VALUE].tolist())
    assert sorted(kept) == list(range(WINDOWS))  # every other unit's row survives
    with_spam = {index for index, values in kept.items() if SPAM in values}
    assert with_spam == set(order[:2])  # the first 2 windows in arrival order, no others
    for index, values in kept.items():
        assert values.count(SPAM) == (1 if index in with_spam else 0)  # 1 row per window
        assert [v for v in values if v != SPAM] == [float(index)]


def test_sliding_windows_count_every_window_a_row_is_in(collect: Any) -> None:
    # One row at t=7 lies in the sliding windows [0, 10) and [5, 15): one window is kept.
    stream = (
        test_stream.TestStream()
        .add_elements([window.TimestampedValue({"u": ["a"], "v": [1.0]}, 7)])
        .advance_watermark_to_infinity()
    )
    found = run_stream(
        collect,
        stream,
        lambda data: (
            data
            | EncodeBatches(unit_column="u", value_column="v")
            | BoundContributions(ContributionBounds(max_contributions_per_unit=1))
        ),
        window.SlidingWindows(size=SIZE, period=SIZE // 2),
    )
    assert len(found) == 1


def _reference(stream: list[tuple[bytes, np.ndarray]], limit: int) -> list[np.ndarray]:
    """Row by row: a unit's rows survive in the first ``limit`` windows it arrives in."""
    admitted: dict[int, list[bytes]] = {}
    masks = []
    for tag, units in stream:
        mask = []
        for unit in units.tolist():
            mine = admitted.setdefault(unit, [])
            if tag not in mine and len(mine) < limit:
                mine.append(tag)
            mask.append(tag in mine)
        masks.append(np.array(mask, dtype=bool))
    return masks


def _admit_all(stream: list[tuple[bytes, np.ndarray]], limit: int) -> list[np.ndarray]:
    state = WindowAdmissions(limit)
    masks = []
    for tag, units in stream:
        mask, state = state.admit(tag, units)
        masks.append(mask)
    return masks


def _random_stream(rng: np.random.Generator) -> list[tuple[bytes, np.ndarray]]:
    return [
        (
            b"w%d" % rng.integers(0, 7),
            rng.integers(0, 30, rng.integers(0, 25)).astype(np.uint64) * np.uint64(2**59 + 1),
        )
        for _ in range(40)
    ]


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_window_admissions_match_the_row_by_row_rule(limit: int) -> None:
    rng = np.random.default_rng(limit)
    for _ in range(20):
        stream = _random_stream(rng)
        for got, want in zip(_admit_all(stream, limit), _reference(stream, limit), strict=True):
            np.testing.assert_array_equal(got, want)


def test_window_admissions_depend_on_the_units_own_rows_only() -> None:
    rng = np.random.default_rng(7)
    stream = _random_stream(rng)
    masks = _admit_all(stream, 2)
    for unit in {int(u) for _, units in stream for u in units.tolist()}:
        alone = _admit_all([(tag, units[units == unit]) for tag, units in stream], 2)
        for mask, mine, (_, units) in zip(masks, alone, stream, strict=True):
            np.testing.assert_array_equal(mask[units == unit], mine)
        kept = {
            tag
            for mask, (tag, units) in zip(masks, stream, strict=True)
            if mask[units == unit].any()
        }
        assert len(kept) <= 2


def test_window_admissions_do_not_depend_on_how_a_window_is_split_into_batches() -> None:
    rng = np.random.default_rng(3)
    stream = _random_stream(rng)
    split = []
    for tag, units in stream:  # each batch cut in two (possibly empty) halves
        cut = int(rng.integers(0, units.size + 1))
        split += [(tag, units[:cut]), (tag, units[cut:])]
    whole = np.concatenate(_admit_all(stream, 2))
    np.testing.assert_array_equal(np.concatenate(_admit_all(split, 2)), whole)


def test_window_admissions_validate_the_limit() -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="'limit' must be an integer >= 1"):
            WindowAdmissions(bad)  # type: ignore[arg-type]
    units = np.array([1, 2], dtype=np.uint64)
    with pytest.raises(ValueError, match="one row of 'limit' slots per unit"):
        WindowAdmissions(2, units)  # a state without its slots would re-admit every unit


# ----------------------------------------------------------------- releases and ledgers


def test_streaming_releases_run_at_epsilon_over_max_windows_in_the_same_windows(
    collect: Any, marker_present: Any
) -> None:
    # Windows 0-4 as in the bounding test, plus window 5 that holds only a record every
    # transform drops (an unknown candidate, a NaN value): it releases all the same.
    events = test_stream.TestStream().advance_watermark_to(0)
    for i in range(WINDOWS):
        rows = {"u": ["spam", "spam", f"u{i}"], "c": ["a", "a", "b"], "v": [SPAM, SPAM, float(i)]}
        events = events.add_elements([window.TimestampedValue(rows, SIZE * i + 1)])
    dropped = {"u": ["x"], "c": ["unknown"], "v": [math.nan]}
    events = events.add_elements([window.TimestampedValue(dropped, SIZE * WINDOWS + 1)])
    events = events.advance_watermark_to_infinity()

    def build(data: Any) -> Any:
        probe = data | "Probe" >> ExponentialSelect.Globally(
            marker_present(SPAM),  # whether the flooding unit reached the window
            candidates=["spam", "no spam"],
            epsilon=400.0,  # 200 per window: the release shows the scores
            sensitivity=1,
            monotone=False,
            unit_column="u",
            value_column="v",
            bounds=ContributionBounds(max_contributions_per_unit=1),
            max_windows_per_unit=2,
            on_bad_record="skip",
            name="probe",
        )
        top = data | "Top" >> TopCandidates.Globally(
            candidate_column="c",
            candidates=["a", "b"],
            unit_column="u",
            epsilon=1.0,
            max_windows_per_unit=2,
        )
        median = data | "Median" >> PrivateMedian.Globally(
            lower=0.0,
            upper=100.0,
            epsilon=1.0,
            unit_column="u",
            value_column="v",
            num_points=101,
            max_windows_per_unit=2,
            on_bad_record="skip",  # the NaN values
        )
        quartiles = data | "Quartiles" >> PrivateQuantiles.PerKey(
            [0.25, 0.75],
            lower=0.0,
            upper=100.0,
            epsilon=1.0,
            unit_column="u",
            value_column="v",
            key_column="c",
            keys=["a", "b"],
            max_keys_per_unit=2,
            num_points=101,
            max_windows_per_unit=2,
            on_bad_record="skip",  # the NaN values
        )
        return (probe, top, median, quartiles) | beam.Flatten()

    releases: list[Release] = [element for element, _ in run_stream(collect, events, build)]
    by_name: dict[str, list[Release]] = {}
    for release in releases:
        by_name.setdefault(release.statistic if release.name != "probe" else "probe", []).append(
            release
        )
    assert set(by_name) == {"probe", "top_candidates", "quantiles", "median"}, set(by_name)
    every_window = {window_name(i) for i in range(WINDOWS + 1)}
    for name, found in by_name.items():
        if name == "quantiles":  # .PerKey: every public key in every window that releases
            assert sorted((r.window, r.key) for r in found) == sorted(
                (w, k) for w in every_window for k in ("a", "b")
            )
        else:
            assert sorted(r.window for r in found) == sorted(every_window), name
        for release in found:
            assert release.ledger.contribution_bounds["max_windows_per_unit"] == 2
    probes = {r.window: r.value for r in by_name["probe"]}
    # The unit reached its first 2 windows of 5, not the others nor the window without it.
    assert {w for w, value in probes.items() if value == "spam"} == {window_name(0), window_name(1)}
    for release in by_name["probe"]:
        assert release.ledger.epsilon == 200.0
    for release in by_name["median"] + by_name["top_candidates"]:
        assert release.ledger.epsilon == 0.5
    for release in by_name["quantiles"]:  # 2 keys x 2 windows
        assert release.ledger.epsilon == 0.25
