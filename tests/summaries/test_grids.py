"""Resolution grids (issue 14): attainable points, exact decimals, the cap, ties."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from beam_dp.scores import QuantileScore
from beam_dp.summaries.grids import grid_step, integer_grid, parse_resolution, resolution_grid
from beam_dp.summaries.histogram import Grid, less_greater


def test_integer_grid_is_the_integers_and_pickles_as_a_uniform_grid() -> None:
    grid = integer_grid(-100, 1300)
    assert grid.kind == "uniform" and grid.num_points == 1401
    assert np.array_equal(grid.points, np.arange(-100, 1301, dtype=np.float64))
    assert grid.lower == -100.0 and grid.upper == 1300.0


def test_bounds_off_the_resolution_keep_the_clamping_bounds() -> None:
    grid = integer_grid(-2.5, 3.5)
    assert grid.points.tolist() == [-2.0, -1.0, 0.0, 1.0, 2.0, 3.0]
    assert (grid.lower, grid.upper) == (-2.5, 3.5)


@pytest.mark.parametrize("resolution", ["0.01", 0.01, Decimal("0.01"), Fraction(1, 100)])
def test_cent_points_are_the_floats_readers_produce(resolution: object) -> None:
    grid = resolution_grid(0, 50, resolution)  # type: ignore[arg-type]
    texts = [f"{k // 100}.{k % 100:02d}" for k in range(5001)]
    parsed = np.array([float(text) for text in texts])
    assert np.array_equal(grid.points, parsed)  # every attainable value is a grid point
    slots = grid.slots(parsed)
    assert np.all(slots % 2 == 1)  # each value falls on its own point's slot
    # A uniform float grid (j * 0.01 + 0) misses hundreds of them (0.07 is not 7 * 0.01).
    uniform = Grid.uniform(0, 50, 5001).points
    assert (uniform != parsed).sum() > 100


def test_tenths_with_negative_bounds() -> None:
    grid = resolution_grid(-0.5, 2.5, "0.1")
    assert grid.points.tolist() == [float(Decimal(k) / 10) for k in range(-5, 26)]


def test_a_coarser_attainable_step_when_over_the_cap() -> None:
    step, first, last = grid_step(0, 10**7, 1, max_points=10**6)
    assert step == 11 and last - first + 1 <= 10**6
    grid = resolution_grid(0, 10**7, 1, max_points=10**6)
    assert grid.num_points <= 10**6
    assert np.all(grid.points == np.round(grid.points))
    assert np.all(np.diff(grid.points) == 11)
    cents = resolution_grid(0, 100_000, "0.01", max_points=1000)
    assert parse_resolution("0.01") * 10_001 == Fraction(10_001, 100)
    assert math.isclose(float(cents.points[1]), float(grid_step(0, 100_000, "0.01", 1000)[0]))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lower": 1, "upper": 1}, "'lower' must be < 'upper'"),
        ({"lower": 0, "upper": math.nan}, "'upper'"),
        ({"lower": 0, "upper": 1, "resolution": 0}, "'resolution' must be > 0"),
        ({"lower": 0, "upper": 1, "resolution": "cents"}, "'resolution'"),
        ({"lower": 0, "upper": 1, "resolution": "inf"}, "'resolution' must be finite"),
        ({"lower": 0, "upper": 1, "resolution": 5}, "fewer than two"),
        ({"lower": 0, "upper": 10, "max_points": 1}, "'max_points'"),
    ],
)
def test_bad_parameters_are_named(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        resolution_grid(**kwargs)  # type: ignore[arg-type]


def test_resolution_type_errors() -> None:
    with pytest.raises(TypeError, match="'resolution'"):
        parse_resolution(True)
    with pytest.raises(TypeError, match="'resolution'"):
        parse_resolution([1])


def _best(grid: Grid, values: np.ndarray, alpha: float = 0.5) -> tuple[list[float], int]:
    counts = grid.histogram(values).counts()
    less, greater = less_greater(counts)
    equal = np.asarray(counts)[1::2]  # each grid point's own (tied) count
    scores = QuantileScore(alpha=alpha, grid=grid.points).compute_from_counts(
        less, greater, equal=equal
    )
    top = scores.max()
    return grid.points[scores == top].tolist(), int(top)


def test_ties_the_resolution_grid_holds_the_tie_block_and_scores_it_exactly() -> None:
    # Integer delays with a big tie block at -5 holding the median.
    rng = np.random.default_rng(1)
    values = np.concatenate(
        [rng.integers(-20, -5, 400), np.full(300, -5), rng.integers(-4, 60, 400)]
    )
    best, top = _best(integer_grid(-100, 1300), values)
    assert best == [-5.0]  # the exact median, attainable
    # A uniform grid of 10^5 points misses -5 exactly: its best points are unattainable
    # values next to the block, which the whole block's weight keeps far below.
    fine = Grid.uniform(-100, 1300, 100_000)
    assert -5.0 not in set(fine.points.tolist())
    fine_best, fine_top = _best(fine, values)
    assert all(v != round(v) for v in fine_best) and fine_top < top
