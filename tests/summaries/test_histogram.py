"""Grid histograms: grids, the public input rule, slots, exact merges."""

from __future__ import annotations

import itertools
import math
import pickle
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from property_settings import fresh_examples

from beam_dp.scores import QuantileScore
from beam_dp.summaries.histogram import (
    MAX_GRID_POINTS,
    Grid,
    GridHistogram,
    less_greater,
)

# ------------------------------------------------------------------------------ grids


def test_uniform_grid_has_exact_end_points_and_increases() -> None:
    grid = Grid.uniform(0.1, 0.7, 7)

    assert grid.points[0] == 0.1 and grid.points[-1] == 0.7
    assert np.all(np.diff(grid.points) > 0)
    assert (grid.lower, grid.upper, grid.num_points, grid.num_slots) == (0.1, 0.7, 7, 15)
    assert grid.kind == "uniform"


def test_log_grid_is_geometric_with_exact_end_points() -> None:
    grid = Grid.log(1e-3, 1e3, 7)

    assert grid.points[0] == 1e-3 and grid.points[-1] == 1e3
    np.testing.assert_allclose(grid.points, [1e-3, 1e-2, 1e-1, 1, 10, 100, 1000])


def test_explicit_grid_takes_bounds_from_points_or_arguments() -> None:
    assert Grid.explicit([1.0, 2.0, 5.0]).lower == 1.0
    grid = Grid.explicit([1.0, 2.0, 5.0], lower=0.0, upper=10.0)
    assert (grid.lower, grid.upper) == (0.0, 10.0)


def test_points_are_read_only() -> None:
    grid = Grid.uniform(0, 1, 3)
    with pytest.raises(ValueError):
        grid.points[0] = 5.0


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Grid.uniform(1.0, 1.0, 10), "'lower' must be < 'upper'"),
        (lambda: Grid.uniform(2.0, 1.0, 10), "'lower' must be < 'upper'"),
        (lambda: Grid.uniform(math.nan, 1.0, 10), "'lower' must be finite"),
        (lambda: Grid.uniform(0.0, math.nan, 10), "'upper' must be finite"),
        (lambda: Grid.uniform(0.0, math.inf, 10), "'upper' must be finite"),
        (lambda: Grid.uniform(0.0, 1.0, MAX_GRID_POINTS + 1), "grid too large"),
        (lambda: Grid.uniform(0.0, 1.0, 1), "'num_points' must be between 2"),
        (lambda: Grid.uniform(1.0, 1.0 + 1e-12, 10**6), "too fine"),
        (lambda: Grid.log(0.0, 1.0, 10), "'lower' must be > 0 for a log grid"),
        (lambda: Grid.explicit([1.0, 1.0, 2.0]), "strictly increasing"),
        (lambda: Grid.explicit([2.0, 1.0, 3.0]), "strictly increasing"),
        (lambda: Grid.explicit([1.0, math.nan]), "finite"),
        (lambda: Grid.explicit([1.0, 2.0], lower=1.5), "inside"),
        (lambda: Grid.explicit([[1.0, 2.0]]), "one-dimensional"),
        (lambda: Grid.explicit([1.0]), "'num_points'"),
    ],
)
def test_bad_grid_parameters_are_named(build: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()  # type: ignore[operator]


@pytest.mark.parametrize("bad", [True, "1", None])
def test_non_numbers_are_refused(bad: object) -> None:
    with pytest.raises(TypeError):
        Grid.uniform(bad, 1.0, 10)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Grid.uniform(0.0, 1.0, bad)  # type: ignore[arg-type]


def test_uniform_and_log_grids_pickle_as_their_parameters() -> None:
    for grid in (Grid.uniform(-3.0, 7.0, 1_000_000), Grid.log(0.5, 5e5, 100_000)):
        payload = pickle.dumps(grid)
        assert len(payload) < 500
        assert pickle.loads(payload) == grid
    explicit = Grid.explicit([0.5, 1.5, 4.0], lower=0.0, upper=5.0)
    assert pickle.loads(pickle.dumps(explicit)) == explicit


def test_an_unpickled_uniform_or_log_grid_is_built_once_per_process() -> None:
    # A worker unpickles the grid with every DoFn and CombineFn that holds it; one copy of
    # the points serves them all (issue 25: 40 copies of 3.8 MB in one Flink SDK worker).
    for grid in (Grid.uniform(-3.0, 7.0, 500_000), Grid.log(0.5, 5e5, 100_000)):
        first, second = (pickle.loads(pickle.dumps(grid)) for _ in range(2))
        assert first is second and first == grid
        assert not first.points.flags.writeable
    # Keyed by the bounds' exact bits: a grid from -0.0 is not the grid from 0.0.
    negative_zero = pickle.loads(pickle.dumps(Grid.uniform(-0.0, 1.0, 11)))
    positive_zero = pickle.loads(pickle.dumps(Grid.uniform(0.0, 1.0, 11)))
    assert negative_zero is not positive_zero
    assert math.copysign(1.0, negative_zero.lower) == -1.0


def test_cell_width_is_the_wider_neighbouring_cell() -> None:
    grid = Grid.explicit([0.0, 1.0, 3.0, 3.5])
    assert [grid.cell_width(i) for i in range(4)] == [1.0, 2.0, 2.0, 0.5]


# ---------------------------------------------------------------------- input rule, slots


def brute_slots(points: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Slot of each value by definition: 0 below, 2j+1 at r_j, 2j+2 in (r_j, r_j+1), 2d above."""
    out = []
    for x in values:
        if x < points[0]:
            out.append(0)
        elif x > points[-1]:
            out.append(2 * points.size)
        else:
            j = int(np.flatnonzero(points <= x)[-1])
            out.append(2 * j + 1 if points[j] == x else 2 * j + 2)
    return np.array(out, dtype=np.int64)


def test_prepare_drops_nan_and_infinities_and_clamps_everything_else() -> None:
    # One rule for every statistic (issue 8): NaN and infinities are not data, as the encoder
    # treats them as bad records; they are dropped here too, not clamped.
    grid = Grid.uniform(-1.0, 1.0, 5)

    prepared = grid.prepare([0.5, math.nan, -5.0, 7.0, -math.inf, math.inf, -1.0])

    assert prepared.tolist() == [0.5, -1.0, 1.0, -1.0]


@pytest.mark.parametrize(
    "grid",
    [
        Grid.uniform(0.0, 20.0, 1001),
        Grid.uniform(-0.3, 0.7, 11),  # points that are not exact decimals
        Grid.log(1e-3, 20.0, 999),
        Grid.explicit([0.5, 0.75, 2.0, 2.0000000000000004, 9.0], lower=0.0, upper=10.0),
    ],
    ids=["uniform", "inexact-uniform", "log", "explicit"],
)
def test_slots_match_the_definition_including_ties_and_out_of_grid(grid: Grid) -> None:
    rng = np.random.default_rng(5)
    points = grid.points
    values = np.concatenate(
        [
            rng.uniform(grid.lower, grid.upper, 3000),
            points[rng.integers(0, points.size, 500)],  # exact ties with grid points
            np.nextafter(points, np.inf)[:50],
            np.nextafter(points, -np.inf)[:50],
            [grid.lower, grid.upper, -1e300, 1e300, math.inf, -math.inf, math.nan],
        ]
    )

    slots = grid.slots(values)

    prepared = grid.prepare(values)
    assert slots.tolist() == brute_slots(points, prepared).tolist()


@settings(max_examples=60, deadline=None)
@given(
    points=st.lists(
        st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=True), min_size=2, max_size=40
    ).map(lambda xs: sorted(set(xs))),
    data=st.data(),
)
def test_slots_match_the_definition_on_random_explicit_grids(
    points: list[float], data: st.DataObject
) -> None:
    if len(points) < 2:
        return
    grid = Grid.explicit(points, lower=points[0] - 1.0, upper=points[-1] + 1.0)
    values = data.draw(
        st.lists(
            st.one_of(st.sampled_from(points), st.floats(allow_nan=True, allow_infinity=True)),
            max_size=60,
        )
    )
    array = np.array(values, dtype=np.float64)

    assert grid.slots(array).tolist() == brute_slots(grid.points, grid.prepare(array)).tolist()


@settings(max_examples=40, deadline=None)
@given(
    lower=st.floats(-1e3, 1e3),
    width=st.floats(1e-3, 1e4),
    size=st.integers(2, 5000),
    values=st.lists(st.floats(-2e4, 2e4), max_size=200),
)
def test_arithmetic_slots_of_uniform_grids_are_exact(
    lower: float, width: float, size: int, values: list[float]
) -> None:
    grid = Grid.uniform(lower, lower + width, size)
    points = grid.points
    array = np.concatenate([np.array(values), points[:: max(1, size // 50)]])
    # Enough values to take the vectorised path (guess, check, correct).
    assert grid.slots(array).tolist() == brute_slots(points, grid.prepare(array)).tolist()


def test_less_greater_are_the_strict_counts_for_every_grid_point() -> None:
    rng = np.random.default_rng(1)
    grid = Grid.uniform(0.0, 10.0, 101)
    values = np.concatenate([rng.uniform(-1, 11, 5000), grid.points[::3], [10.0] * 7])

    less, greater = less_greater(grid.histogram(values).counts())

    clamped = np.clip(values, 0.0, 10.0)
    assert less.tolist() == [(clamped < r).sum() for r in grid.points]
    assert greater.tolist() == [(clamped > r).sum() for r in grid.points]
    assert less.dtype == np.int64 and greater.dtype == np.int64


def test_less_greater_rejects_an_even_number_of_slots() -> None:
    with pytest.raises(ValueError, match="2d \\+ 1"):
        less_greater(np.zeros(4, dtype=np.int64))


# ---------------------------------------------------------------------- the accumulator


def test_sparse_and_dense_forms_hold_the_same_counts() -> None:
    grid = Grid.uniform(0.0, 1.0, 1001)
    rng = np.random.default_rng(2)
    few = rng.uniform(0, 1, 20)
    many = rng.uniform(0, 1, 5000)

    sparse = grid.histogram(few)
    dense = grid.histogram(many)

    assert not sparse.is_dense and dense.is_dense
    expected = np.bincount(grid.slots(np.concatenate([few, many])), minlength=grid.num_slots)
    for left, right in ((sparse, dense), (dense, sparse)):
        a = GridHistogram(grid.num_slots).merge(left)
        a.merge(right)
        assert a.counts().tolist() == expected.tolist()


def test_merge_modifies_only_the_first_accumulator() -> None:
    grid = Grid.uniform(0.0, 1.0, 11)
    first = grid.histogram([0.1, 0.2])
    second = grid.histogram([0.3])
    before = second.counts()

    result = first.merge(second)

    assert result is first
    assert first.total == 3
    assert second.counts().tolist() == before.tolist()
    second.add_slots([0])  # the merged state does not alias the other accumulator
    assert first.total == 3


def test_compact_picks_the_sparse_form_and_keeps_the_counts() -> None:
    grid = Grid.uniform(0.0, 1.0, 10_001)
    histogram = grid.histogram(np.random.default_rng(3).uniform(0, 1, 50_000))
    histogram.merge(grid.histogram([0.5]))
    assert histogram.is_dense
    counts = histogram.counts()
    small = GridHistogram(grid.num_slots).add_slots(grid.slots([0.5] * 10**4))
    small._densify()

    assert histogram.compact().counts().tolist() == counts.tolist()
    assert not small.compact().is_dense
    assert small.total == 10**4


def test_merging_different_grids_or_types_is_refused() -> None:
    with pytest.raises(ValueError, match="different grids"):
        GridHistogram(5).merge(GridHistogram(7))
    with pytest.raises(TypeError):
        GridHistogram(5).merge(np.zeros(5))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="slot indices"):
        GridHistogram(5).add_slots([5])


def test_memory_is_bounded_by_the_grid_not_the_rows() -> None:
    grid = Grid.uniform(0.0, 1.0, 1001)
    histogram = GridHistogram(grid.num_slots)
    rng = np.random.default_rng(4)
    for _ in range(20):
        histogram.add_slots(grid.slots(rng.uniform(0, 1, 50_000)))

    assert histogram.total == 10**6
    assert histogram.nbytes <= 8 * grid.num_slots
    assert len(pickle.dumps(histogram.compact())) <= 8 * grid.num_slots + 500


def test_histograms_pickle_in_both_forms() -> None:
    grid = Grid.uniform(0.0, 1.0, 101)
    for values in ([0.25], np.linspace(0, 1, 1000)):
        histogram = grid.histogram(values)
        copy = pickle.loads(pickle.dumps(histogram))
        assert copy == histogram and copy.is_dense == histogram.is_dense


@fresh_examples(60)
@given(
    slots=st.lists(st.integers(0, 4000), max_size=200),
    heavy=st.sampled_from([0, 1, 255, 256, 65_535, 65_536, 2**32, 2**40]),
    dense=st.booleans(),
)
def test_pickled_histograms_restore_every_count_in_both_forms(
    slots: list[int], heavy: int, dense: bool
) -> None:
    histogram = GridHistogram(4001).add_slots(slots)
    if heavy:  # one slot past each narrow type's range
        histogram.merge(GridHistogram(4001))._densify()[4000] += heavy
        if not dense:
            histogram.compact()
    elif dense:
        histogram._densify()
    copy = pickle.loads(pickle.dumps(histogram))

    assert copy == histogram and copy.is_dense == histogram.is_dense
    assert copy.counts().dtype == np.int64 and copy.total == histogram.total
    # an unpickled partial is held narrow: merged into, merged from, added to and pickled
    # again, no count wraps around its narrow type
    other = pickle.loads(pickle.dumps(histogram))
    expected = histogram.counts() * 3
    expected[4000] += 300
    merged = copy.merge(other).merge(pickle.loads(pickle.dumps(histogram)))
    merged.add_slots([4000] * 300)
    assert np.array_equal(merged.counts(), expected)
    assert np.array_equal(pickle.loads(pickle.dumps(merged)).counts(), expected)
    assert other == histogram  # merging from it did not change it
    into = GridHistogram(4001).merge(pickle.loads(pickle.dumps(histogram)))
    assert into == histogram and into.counts().dtype == np.int64


def test_a_million_point_partial_crosses_the_wire_in_narrow_types() -> None:
    # Flink's batch merge holds every partial of a key in one record: a partial over the
    # default 10^6-point grid must be far smaller than its 16 MB of int64 counts.
    grid = Grid.uniform(0.0, 20.0, 10**6)
    rng = np.random.default_rng(7)
    values = rng.lognormal(0.0, 1.0, 300_000)
    sparse = grid.histogram(values).compact()
    dense = grid.histogram(rng.uniform(0.0, 20.0, 3 * 10**6)).compact()

    assert not sparse.is_dense and dense.is_dense
    assert len(pickle.dumps(sparse)) < 3 * 300_000 + 1000  # 16 bytes per slot as int64
    assert len(pickle.dumps(dense)) < grid.num_slots + 1000  # 8 bytes per slot as int64
    assert pickle.loads(pickle.dumps(sparse)) == sparse
    # and a merge of unpickled partials holds each at its wire size until it is changed
    restored = pickle.loads(pickle.dumps(dense))
    assert restored.nbytes < grid.num_slots + 1000
    assert GridHistogram(grid.num_slots).merge(restored) == dense


slot_lists = st.lists(st.integers(0, 40), max_size=30)


@fresh_examples(80)
@given(a=slot_lists, b=slot_lists, c=slot_lists, dense=st.tuples(st.booleans(), st.booleans()))
def test_merge_is_associative_and_commutative(
    a: list[int], b: list[int], c: list[int], dense: tuple[bool, bool]
) -> None:
    def make(slots: list[int], force_dense: bool) -> GridHistogram:
        histogram = GridHistogram(41).add_slots(slots)
        if force_dense:
            histogram._densify()
        return histogram

    left = make(a, dense[0]).merge(make(b, dense[1])).merge(make(c, False))
    right = make(a, dense[1]).merge(make(b, False).merge(make(c, dense[0])))
    swapped = make(b, dense[0]).merge(make(a, dense[1]))
    once = make(a + b + c, False)

    assert left == right == once
    assert swapped == make(a + b, False)


@fresh_examples(40)
@given(
    values=st.lists(st.one_of(st.floats(-5, 25), st.just(math.nan)), max_size=300),
    cuts=st.lists(st.integers(0, 300), max_size=6),
)
def test_sharded_add_and_merge_equals_one_pass(values: list[float], cuts: list[int]) -> None:
    grid = Grid.uniform(0.0, 20.0, 201)
    array = np.array(values, dtype=np.float64)
    bounds = sorted({0, array.size, *[min(c, array.size) for c in cuts]})
    merged = GridHistogram(grid.num_slots)
    for start, stop in itertools.pairwise(bounds):
        merged.merge(grid.histogram(array[start:stop]).compact())

    assert merged == grid.histogram(array)


# ---------------------------------------------------- sensitivity at the histogram level


def scores_from_histogram(grid: Grid, values: np.ndarray, score: QuantileScore) -> np.ndarray:
    slots = grid.histogram(values).counts()
    less, greater = less_greater(slots)
    scores = score.compute_from_counts(less, greater, equal=slots[1::2])
    real: np.ndarray = scores * float(score.unit)
    return real


@pytest.mark.parametrize("alpha", [0.5, 0.1, 0.9, Fraction(1, 3)])
@pytest.mark.parametrize("k", [1, 3])
def test_measured_sensitivity_never_exceeds_the_declared_one(alpha: object, k: int) -> None:
    """Random neighbours through the histogram: add/remove k values, or replace k values."""
    rng = np.random.default_rng(11)
    grid = Grid.uniform(0.0, 10.0, 41)
    score = QuantileScore(alpha=alpha, grid=grid.points, max_contributions=k)  # type: ignore[arg-type]
    worst = {"add_remove": 0.0, "replace": 0.0}
    for _ in range(300):
        size = int(rng.integers(0, 30))
        # Values on grid points, inside cells and outside the bounds: every case of the slots.
        pool = np.concatenate([grid.points, rng.uniform(-2, 12, 40)])
        base = rng.choice(pool, size=size)
        unit = rng.choice(pool, size=int(rng.integers(1, k + 1)))
        other = rng.choice(pool, size=unit.size)
        with_unit = scores_from_histogram(grid, np.concatenate([base, unit]), score)
        without = scores_from_histogram(grid, base, score)
        replaced = scores_from_histogram(grid, np.concatenate([base, other]), score)
        worst["add_remove"] = max(worst["add_remove"], float(np.abs(with_unit - without).max()))
        worst["replace"] = max(worst["replace"], float(np.abs(with_unit - replaced).max()))

    for relation, measured in worst.items():
        assert measured <= float(score.sensitivity(relation)) + 1e-12  # type: ignore[arg-type]
    # The bound is attained for the median (so the test can see a violation).
    if alpha == 0.5 and k == 1:
        assert worst["add_remove"] == pytest.approx(0.5)
        assert worst["replace"] == pytest.approx(1.0)
