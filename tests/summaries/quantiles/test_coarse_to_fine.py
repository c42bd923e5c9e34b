"""Coarse-to-fine quantiles: refined grids, exact cell scores, their sensitivity."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from draw_helpers import draws
from stats_helpers import FPR, chi_square_pvalue

from beam_dp.mechanisms import selection_probabilities
from beam_dp.summaries.histogram import Grid, less_greater
from beam_dp.summaries.quantiles import (
    QuantileSelection,
    cell_scores,
    combine_passes,
    plan_cells,
    plan_quantiles,
    refine_grid,
    select_cells,
    select_quantiles,
)

# --------------------------------------------------------------------- coarse to fine


def test_refine_grid_fills_each_chosen_cell() -> None:
    grid = Grid.uniform(0.0, 10.0, 11)

    fine = refine_grid(grid, [3, 4, 9, 3], 5)

    assert (fine.lower, fine.upper) == (0.0, 10.0)
    first = [3.0, 3.25, 3.5, 3.75, 4.0, 4.25, 4.5, 4.75, 5.0]
    assert fine.points.tolist() == [*first, 9.0, 9.25, 9.5, 9.75, 10.0]
    log = refine_grid(Grid.log(1.0, 1e4, 5), [1], 3)
    np.testing.assert_allclose(log.points, [10.0, np.sqrt(1000.0), 100.0])
    with pytest.raises(ValueError, match="'refine_points'"):
        refine_grid(grid, [3], 1)
    with pytest.raises(ValueError, match="outside"):
        refine_grid(grid, [10], 5)


def brute_cell_scores(values: np.ndarray, grid: Grid, alpha: Fraction) -> list[Fraction]:
    kept = grid.prepare(values)
    n = kept.size
    out = []
    for j in range(grid.num_points - 1):
        low = int((kept < grid.points[j]).sum())
        high = int((kept <= grid.points[j + 1]).sum())
        target = alpha * n
        out.append(-max(Fraction(0), low - target, target - high))
    return out


def test_cell_scores_are_the_exact_rank_distances() -> None:
    rng = np.random.default_rng(12)
    grid = Grid.uniform(0.0, 10.0, 21)
    values = np.concatenate([rng.uniform(-1, 11, 300), grid.points[::4]])
    for alpha in (Fraction(1, 2), Fraction(1, 10), Fraction(5, 7)):
        scores, unit = cell_scores(grid.histogram(values).counts(), alpha)
        assert [s * unit for s in scores.tolist()] == brute_cell_scores(values, grid, alpha)


def test_cell_scores_find_data_inside_one_cell() -> None:
    """All values inside one coarse cell: the point utility ties everywhere, cells do not."""
    grid = Grid.uniform(0.0, 10.0, 11)
    histogram = grid.histogram(np.random.default_rng(1).normal(3.33, 0.01, 1000))
    scores, _ = cell_scores(histogram.counts(), Fraction(1, 2))
    less, greater = less_greater(histogram.counts())

    assert np.flatnonzero(scores == 0).tolist() == [3]
    assert len(set(np.abs(less - greater).tolist())) == 1  # every point ties


@pytest.mark.parametrize("k", [1, 2])
def test_cell_scores_have_the_declared_sensitivity(k: int) -> None:
    rng = np.random.default_rng(13)
    grid = Grid.uniform(0.0, 10.0, 21)
    for alpha in (Fraction(1, 2), Fraction(1, 5)):
        plans = {
            relation: plan_cells(
                [alpha], epsilon=1.0, num_cells=20, relation=relation, max_contributions=k
            )
            for relation in ("add_remove", "replace")
        }
        worst = {"add_remove": Fraction(0), "replace": Fraction(0)}
        for _ in range(200):
            pool = np.concatenate([grid.points, rng.uniform(-1, 11, 30)])
            base = rng.choice(pool, size=int(rng.integers(0, 30)))
            unit = rng.choice(pool, size=k)
            other = rng.choice(pool, size=k)
            with_unit, step = cell_scores(
                grid.histogram(np.concatenate([base, unit])).counts(), alpha
            )
            without, _ = cell_scores(grid.histogram(base).counts(), alpha)
            replaced, _ = cell_scores(grid.histogram(np.concatenate([base, other])).counts(), alpha)
            worst["add_remove"] = max(
                worst["add_remove"], int(np.abs(with_unit - without).max()) * step
            )
            worst["replace"] = max(worst["replace"], int(np.abs(with_unit - replaced).max()) * step)
        for relation, plan in plans.items():
            assert worst[relation] <= plan.sensitivities[0]
        assert worst["add_remove"] == plans["add_remove"].sensitivities[0]  # attained


def test_cell_selection_follows_the_exact_distribution() -> None:
    grid = Grid.uniform(0.0, 8.0, 9)
    values = np.array([0.5, 1.2, 1.7, 2.0, 3.0, 3.9, 4.5, 6.1, 7.7, 2.2, 2.4])
    histogram = grid.histogram(values)
    alpha = Fraction(1, 2)
    plan = plan_cells([alpha], epsilon=2.0, num_cells=8)
    scores, unit = cell_scores(histogram.counts(), alpha)
    expected = selection_probabilities(scores, epsilon=2.0, sensitivity=Fraction(1, 2) / unit)

    counts = draws(lambda: select_cells(histogram, grid, plan).cells[0], 8, 4000)

    assert chi_square_pvalue(counts, expected) > FPR


def test_coarse_to_fine_resolves_inside_a_coarse_cell() -> None:
    rng = np.random.default_rng(2)
    values = rng.normal(0.3333, 0.01, 20_000)
    grid = Grid.uniform(0.0, 1.0, 11)  # every value inside one coarse cell
    cells = select_cells(grid.histogram(values), grid, plan_cells([0.5], epsilon=0.5, num_cells=10))
    fine_grid = refine_grid(grid, cells.cells, 2001)
    fine_plan = plan_quantiles([0.5], epsilon=4.5, num_candidates=2001, failure_probability=0.025)

    fine = select_quantiles(fine_grid.histogram(values), fine_grid, fine_plan)
    both = combine_passes(cells, fine)

    assert cells.cells == (3,)
    assert abs(both.values[0] - np.median(values)) < 0.001
    assert both.rank_error == pytest.approx(cells.rank_errors[0] + fine.rank_error)
    assert both.fine_rank_error == fine.rank_error
    assert both.epsilon == pytest.approx(5.0) and both.rounds == 1
    assert isinstance(both, QuantileSelection)
