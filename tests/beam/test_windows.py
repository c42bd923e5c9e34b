"""Windows: a unit's rows survive in at most ``max_windows_per_unit`` windows, each window's
release runs at ``ε / max_windows_per_unit``, and every transform releases in the same windows.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.coders.coders import IntervalWindowCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream
from apache_beam.transforms import window

from beam_dp.batching import VALUE, ContributionBounds
from beam_dp.beam._contributions import BoundContributions, EncodeBatches, kept_windows
from beam_dp.beam.key_selection import SelectCandidates
from beam_dp.beam.mean import PrivateMean
from beam_dp.beam.quantiles import PrivateMedian, PrivateQuantiles
from beam_dp.beam.selection import Election, ExponentialSelect, TopCandidates
from beam_dp.release import Release

SPAM = 99.0  # the value that marks the flooding unit's rows
WINDOWS = 5


def spam_in_every_window() -> list[window.TimestampedValue]:
    """Unit "spam" has 3 rows in each of 5 fixed windows of 10 s; unit "u{i}" one row in
    window i."""
    batches = []
    for i in range(WINDOWS):
        rows = {"u": ["spam", "spam", "spam", f"u{i}"], "v": [SPAM, SPAM, SPAM, float(i)]}
        batches.append(window.TimestampedValue(rows, 10 * i + 1))
    return batches


def windowed(p: beam.Pipeline, elements: list[Any], windowfn: Any = None) -> Any:
    return (
        p
        | "Input" >> beam.Create(elements)
        | "Windows" >> beam.WindowInto(windowfn or window.FixedWindows(10))
    )


def bounds_of(found: list[tuple[Any, Any]]) -> dict[Any, list[float]]:
    """Values kept per window, from the output of BoundContributions."""
    kept: dict[Any, list[float]] = {}
    for batch, win in found:
        kept.setdefault(win, []).extend(batch[VALUE].tolist())
    return kept


# ------------------------------------------------------------------------- bounding step


def test_a_unit_keeps_rows_in_at_most_max_windows_per_unit(collect: Any) -> None:
    found = collect(
        lambda p: (
            windowed(p, spam_in_every_window())
            | EncodeBatches(unit_column="u", value_column="v")
            | BoundContributions(
                ContributionBounds(max_contributions_per_unit=1), max_windows_per_unit=2
            )
        )
    )
    kept = bounds_of(found)
    assert len(kept) == WINDOWS  # every other unit's row survives in its window
    with_spam = [win for win, values in kept.items() if SPAM in values]
    assert len(with_spam) == 2
    for win, values in kept.items():
        assert values.count(SPAM) == (1 if win in with_spam else 0)  # 1 row per window
        assert len([v for v in values if v != SPAM]) == 1
        assert isinstance(win, window.IntervalWindow)  # back in its own window


def test_sliding_windows_count_every_window_a_row_is_in(collect: Any) -> None:
    # One row at t=7 lies in the sliding windows [0, 10) and [5, 15): one window is kept.
    rows = window.TimestampedValue({"u": ["a"], "v": [1.0]}, 7)
    found = collect(
        lambda p: (
            windowed(p, [rows], window.SlidingWindows(size=10, period=5))
            | EncodeBatches(unit_column="u", value_column="v")
            | BoundContributions(ContributionBounds(max_contributions_per_unit=1))
        )
    )
    assert len(found) == 1


def test_kept_windows_depend_on_the_units_own_windows_only() -> None:
    rng = np.random.default_rng(1)
    units = rng.integers(0, 40, 600).astype(np.uint64)
    windows = rng.integers(0, 9, 600).astype(np.int64)
    hashes = rng.integers(0, 2**63, 9).astype(np.uint64)
    keep = kept_windows(units, windows, hashes, salt=5, limit=3)
    for unit in range(40):
        mine = units == unit
        assert len(set(windows[mine & keep].tolist())) == min(3, len(set(windows[mine].tolist())))
        # All of a kept window's rows survive; the choice is the same without other units.
        alone = kept_windows(units[mine], windows[mine], hashes, salt=5, limit=3)
        np.testing.assert_array_equal(alone, keep[mine])
    order = rng.permutation(600)  # nor does the order of the rows matter
    np.testing.assert_array_equal(
        kept_windows(units[order], windows[order], hashes, salt=5, limit=3), keep[order]
    )


def test_kept_windows_are_uniform_over_salts() -> None:
    units = np.zeros(5, dtype=np.uint64)
    windows = np.arange(5, dtype=np.int64)
    hashes = np.array([11, 22, 33, 44, 55], dtype=np.uint64)
    chosen = Counter[int]()
    salts = 4000
    for salt in range(salts):
        keep = kept_windows(units, windows, hashes, salt=salt, limit=2)
        assert keep.sum() == 2
        chosen.update(np.flatnonzero(keep).tolist())
    for position in range(5):  # each window kept with probability 2/5 (sd ~0.008)
        assert abs(chosen[position] / salts - 0.4) < 0.04


# ----------------------------------------------------------------- releases and ledgers


def releases_of(found: list[tuple[Any, Any]]) -> list[Release]:
    return [element for element, _ in found]


def test_windowed_releases_run_at_epsilon_over_max_windows(
    collect: Any, marker_present: Any
) -> None:
    def build(p: beam.Pipeline) -> Any:
        data = windowed(p, spam_in_every_window())
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
            name="probe",
        )
        median = data | "Median" >> PrivateMedian.Globally(
            lower=0.0,
            upper=100.0,
            epsilon=1.0,
            unit_column="u",
            value_column="v",
            num_points=101,
            max_windows_per_unit=2,
        )
        return (probe, median) | beam.Flatten()

    releases = releases_of(collect(build))
    probes = [r for r in releases if r.name == "probe"]
    medians = [r for r in releases if r.name == "median"]
    assert len(probes) == WINDOWS and len(medians) == WINDOWS
    assert sum(r.value == "spam" for r in probes) == 2  # the unit reached 2 windows of 5
    for release in probes:
        assert release.ledger.epsilon == 200.0
        assert release.ledger.contribution_bounds["max_windows_per_unit"] == 2
    for release in medians:
        assert release.ledger.epsilon == 0.5
        assert release.ledger.contribution_bounds["max_windows_per_unit"] == 2
    assert {r.window for r in probes} == {r.window for r in medians}


def test_per_key_and_key_selection_split_over_keys_and_windows(collect: Any) -> None:
    rows = [
        window.TimestampedValue({"u": ["a", "b", "c"], "c": ["x", "y", "x"]}, t) for t in (1, 12)
    ]

    def build(p: beam.Pipeline) -> Any:
        data = windowed(p, rows)
        per_key = data | "PerKey" >> TopCandidates.PerKey(
            candidate_column="c",
            candidates=["x", "y"],
            unit_column="u",
            key_column="c",
            keys=["x", "y"],
            max_keys_per_unit=None,  # m = 2 keys
            epsilon=1.0,
            max_windows_per_unit=2,
        )
        selected = data | "Select" >> SelectCandidates.Globally(
            candidate_column="c",
            unit_column="u",
            epsilon=1.0,
            delta=1e-6,
            max_windows_per_unit=2,
        )
        return (per_key, selected) | beam.Flatten()

    releases = releases_of(collect(build))
    per_key = [r for r in releases if r.statistic == "top_candidates"]
    selected = [r for r in releases if r.statistic == "candidate_selection"]
    assert len(per_key) == 4 and len(selected) == 2  # 2 keys x 2 windows; 2 windows
    for release in per_key:
        assert release.ledger.epsilon == 0.25  # 1 / (2 keys x 2 windows)
        bounds = release.ledger.contribution_bounds
        assert bounds["max_keys_per_unit"] == 2 and bounds["max_windows_per_unit"] == 2
    for release in selected:
        assert release.ledger.epsilon == 0.5 and release.ledger.delta == 5e-7
        assert release.ledger.contribution_bounds["max_windows_per_unit"] == 2


def test_selection_and_quantiles_release_in_the_same_windows(collect: Any) -> None:
    # Window 2 holds only a record that both transforms drop (an unknown candidate, a NaN
    # value): it still releases, in both, because it holds input.
    rows = [
        window.TimestampedValue({"u": ["x0"], "c": ["a"], "v": [1.0]}, 1),
        window.TimestampedValue({"u": ["x1"], "c": ["b"], "v": [2.0]}, 11),
        window.TimestampedValue({"u": ["x2"], "c": ["unknown"], "v": [math.nan]}, 21),
    ]

    def build(p: beam.Pipeline) -> Any:
        data = windowed(p, rows)
        kwargs: dict[str, Any] = {
            "lower": 0.0,
            "upper": 10.0,
            "epsilon": 1.0,
            "value_column": "v",
            "on_bad_record": "skip",  # the NaN value of the window with no candidate
        }
        outputs = [
            data
            | "Top"
            >> TopCandidates.Globally(
                candidate_column="c", candidates=["a", "b"], unit_column="u", epsilon=1.0
            ),
            data
            | "Vote"
            >> Election.PerKey(
                candidate_column="c",
                candidates=["a", "b"],
                unit_column="u",
                key_column="c",
                keys=["a", "b"],
                epsilon=1.0,
            ),
            data | "Median" >> PrivateMedian.Globally(unit_column="u", num_points=11, **kwargs),
            data
            | "Quartiles"
            >> PrivateQuantiles.PerKey(
                [0.25, 0.75], unit_column="u", key_column="c", keys=["a"], num_points=11, **kwargs
            ),
            data | "Mean" >> PrivateMean.Globally(unit_column="u", num_points=11, **kwargs),
        ]
        return outputs | beam.Flatten()

    releases = releases_of(collect(build))
    by_statistic: dict[str, set[str | None]] = {}
    for release in releases:
        by_statistic.setdefault(release.statistic, set()).add(release.window)
    assert len(by_statistic) == 5
    expected = {
        "[1970-01-01T00:00:00Z, 1970-01-01T00:00:10Z)",
        "[1970-01-01T00:00:10Z, 1970-01-01T00:00:20Z)",
        "[1970-01-01T00:00:20Z, 1970-01-01T00:00:30Z)",
    }
    for windows in by_statistic.values():
        assert windows == expected


def test_a_window_emptied_by_bounding_or_holding_a_heartbeat_releases_in_every_transform(
    collect: Any,
) -> None:
    # One rule for all (beam_dp.beam._graph.window_markers): a window releases iff it holds an
    # input element. Unit "s" has rows in windows 0 and 1 and keeps one of them
    # (max_windows_per_unit=1), so bounding empties the other; window 2 holds only a
    # heartbeat ({}). A rule on the values after bounding would drop the emptied window (and
    # which one depends on the unit's data and the salt); every transform must release in
    # all three.
    rows = [
        window.TimestampedValue({"u": ["s"], "c": ["a"], "v": [1.0]}, 1),
        window.TimestampedValue({"u": ["s"], "c": ["a"], "v": [2.0]}, 11),
        window.TimestampedValue({}, 21),
    ]

    def build(p: beam.Pipeline) -> Any:
        data = windowed(p, rows)
        values: dict[str, Any] = {"lower": 0.0, "upper": 10.0, "value_column": "v"}
        common: dict[str, Any] = {"unit_column": "u", "epsilon": 1.0, "max_windows_per_unit": 1}
        outputs = [
            data
            | "Top"
            >> TopCandidates.Globally(candidate_column="c", candidates=["a", "b"], **common),
            data
            | "Vote"
            >> Election.PerKey(
                candidate_column="c", candidates=["a", "b"], key_column="c", keys=["a"], **common
            ),
            data | "Median" >> PrivateMedian.Globally(num_points=11, **values, **common),
            data
            | "Quartiles"
            >> PrivateQuantiles.PerKey(
                [0.25, 0.75], key_column="c", keys=["a"], num_points=11, **values, **common
            ),
            data | "Mean" >> PrivateMean.Globally(num_points=11, **values, **common),
        ]
        return outputs | beam.Flatten()

    by_statistic: dict[str, set[str | None]] = {}
    for release in releases_of(collect(build)):
        by_statistic.setdefault(release.statistic, set()).add(release.window)
    assert set(by_statistic) == {"top_candidates", "election", "median", "quantiles", "mean"}
    expected = {
        "[1970-01-01T00:00:00Z, 1970-01-01T00:00:10Z)",
        "[1970-01-01T00:00:10Z, 1970-01-01T00:00:20Z)",
        "[1970-01-01T00:00:20Z, 1970-01-01T00:00:30Z)",
    }
    for windows in by_statistic.values():
        assert windows == expected


# ------------------------------------------------------------------------ refusals


def _top(**extra: Any) -> TopCandidates.Globally:
    options: dict[str, Any] = {
        "candidate_column": "c",
        "candidates": ["a"],
        "unit_column": "u",
        "epsilon": 1.0,
    }
    options.update(extra)
    return TopCandidates.Globally(**options)


def _median(**extra: Any) -> PrivateMedian.Globally:
    options: dict[str, Any] = {"lower": 0.0, "upper": 1.0, "epsilon": 1.0, "unit_column": "u"}
    options.update(extra)
    return PrivateMedian.Globally(**options)


def _apply(transform: beam.PTransform, windowfn: Any) -> None:
    pipeline = beam.Pipeline()  # built, never run
    _ = (
        pipeline
        | beam.Create([{"u": ["a"], "c": ["a"], "v": [0.5]}])
        | beam.WindowInto(windowfn)
        | transform
    )


@pytest.mark.parametrize("make", [_top, _median])
def test_merging_windows_are_refused(make: Any) -> None:
    with pytest.raises(ValueError, match=r"merging window function \(Sessions"):
        _apply(make(), window.Sessions(10))


@pytest.mark.parametrize("make", [_top, _median])
def test_unbounded_windowed_input_with_units_is_accepted(make: Any) -> None:
    # Bounded by per-unit state (tests/beam/test_windows_streaming.py).
    pipeline = beam.Pipeline()
    stream = test_stream.TestStream().add_elements([{"u": ["a"], "c": ["a"], "v": [0.5]}])
    _ = pipeline | stream | beam.WindowInto(window.FixedWindows(10)) | make()


def test_record_level_privacy_accepts_fixed_windows_only() -> None:
    _apply(_top(unit_column=None, record_level=True), window.FixedWindows(10))  # accepted
    with pytest.raises(ValueError, match=r"only with FixedWindows.*received SlidingWindows"):
        _apply(_top(unit_column=None, record_level=True), window.SlidingWindows(10, 5))
    with pytest.raises(ValueError, match="only with FixedWindows"):
        _apply(
            _median(unit_column=None, record_level=True, value_column=None),
            window.SlidingWindows(10, 5),
        )


def test_max_windows_per_unit_is_validated_at_construction() -> None:
    for bad in (0, -1, 1.5, True, "2", None):
        with pytest.raises((ValueError, TypeError), match="max_windows_per_unit"):
            _top(max_windows_per_unit=bad)
        with pytest.raises((ValueError, TypeError), match="max_windows_per_unit"):
            _median(max_windows_per_unit=bad)
    with pytest.raises(ValueError, match="applies only with a 'unit_column'"):
        _top(unit_column=None, record_level=True, max_windows_per_unit=2)
    with pytest.raises(ValueError, match="applies only with a 'unit_column'"):
        _median(unit_column=None, record_level=True, max_windows_per_unit=2)


def test_max_windows_per_unit_above_one_in_the_global_window_is_refused() -> None:
    pipeline = beam.Pipeline()
    rows = pipeline | beam.Create([{"u": ["a"], "c": ["a"]}])
    with pytest.raises(ValueError, match="input is in the global window"):
        _ = rows | "Top" >> _top(max_windows_per_unit=2)
    with pytest.raises(ValueError, match="input is in the global window"):
        _ = rows | "Median" >> _median(max_windows_per_unit=2)


# ------------------------------------------------------------- windows every runner can run

PICKLED_WINDOW_FN = "beam:window_fn:pickled_python:v1"  # what Beam's Java runners reject


class _Halves(window.NonMergingWindowFn):  # type: ignore[misc]
    """A custom (Python) window function: [0, 5) and [5, 10^9)."""

    def assign(self, context: window.WindowFn.AssignContext) -> list[window.IntervalWindow]:
        if context.timestamp < 5:
            return [window.IntervalWindow(0, 5)]
        return [window.IntervalWindow(5, 10**9)]

    def get_window_coder(self) -> Any:
        return IntervalWindowCoder()


def _window_fn_urns(pipeline: beam.Pipeline) -> set[str]:
    proto = pipeline.to_runner_api()
    return {strategy.window_fn.urn for strategy in proto.components.windowing_strategies.values()}


@pytest.mark.parametrize("windowfn", [window.FixedWindows(10), window.SlidingWindows(10, 5)])
@pytest.mark.parametrize("unbounded", [False, True])
def test_standard_windows_stay_standard_through_every_transform(
    windowfn: Any, unbounded: bool
) -> None:
    # Beam's Java runners (Flink, Spark) refuse a pipeline with any PCollection in a Python
    # WindowFn: the bounded output is put back in the input's own WindowFn.
    pipeline = beam.Pipeline()  # built, never run
    rows = [{"u": ["a"], "c": ["a"], "v": [0.5]}]
    source = test_stream.TestStream().add_elements(rows) if unbounded else beam.Create(rows)
    data = pipeline | source | beam.WindowInto(windowfn)
    bounded = (
        data
        | EncodeBatches(unit_column="u", value_column="v")
        | BoundContributions(ContributionBounds(max_contributions_per_unit=1))
    )
    assert bounded.windowing.windowfn == windowfn
    _ = data | "Top" >> _top()
    _ = data | "Median" >> _median()
    urns = _window_fn_urns(pipeline)
    assert PICKLED_WINDOW_FN not in urns
    assert windowfn.to_runner_api(None).urn in urns


def test_sliding_windows_keep_each_row_in_its_own_windows(collect: Any) -> None:
    # "a" at t=7 is in [0, 10) and [5, 15), "b" at t=12 in [5, 15) and [10, 20): with 2 windows
    # per unit every row stays in both, once each (re-windowing by timestamp alone would also
    # put the copy bounded in [0, 10) into [5, 15)).
    rows = [
        window.TimestampedValue({"u": ["a"], "v": [7.0]}, 7),
        window.TimestampedValue({"u": ["b"], "v": [12.0]}, 12),
    ]
    found = collect(
        lambda p: (
            windowed(p, rows, window.SlidingWindows(size=10, period=5))
            | EncodeBatches(unit_column="u", value_column="v")
            | BoundContributions(
                ContributionBounds(max_contributions_per_unit=1), max_windows_per_unit=2
            )
        )
    )
    kept = sorted(
        (int(win.start), int(win.end), value)
        for batch, win in found
        for value in batch[VALUE].tolist()
    )
    assert kept == [(0, 10, 7.0), (5, 15, 7.0), (5, 15, 12.0), (10, 20, 12.0)]


def test_a_custom_window_function_runs_on_the_direct_runner(collect: Any) -> None:
    rows = [window.TimestampedValue({"u": ["a", "a"], "v": [1.0, 2.0]}, t) for t in (1, 7)]
    found = collect(
        lambda p: (
            windowed(p, rows, _Halves())
            | EncodeBatches(unit_column="u", value_column="v")
            | BoundContributions(
                ContributionBounds(max_contributions_per_unit=1), max_windows_per_unit=2
            )
        )
    )
    assert sorted((int(win.start), len(batch[VALUE])) for batch, win in found) == [(0, 1), (5, 1)]


@pytest.mark.parametrize("runner", ["FlinkRunner", "SparkRunner", "PrismRunner"])
def test_a_custom_window_function_is_refused_on_java_runners_when_built(runner: str) -> None:
    options = PipelineOptions(["--runner", runner])
    pipeline = beam.Pipeline(options=options)  # built, never run: no job server is started
    data = (
        pipeline | beam.Create([{"u": ["a"], "c": ["a"], "v": [0.5]}]) | beam.WindowInto(_Halves())
    )
    message = f"_Halves, a custom window function, which {runner} cannot run"
    with pytest.raises(ValueError, match=message):
        _ = data | "Top" >> _top()
    with pytest.raises(ValueError, match=message):
        _ = data | "Median" >> _median()
