"""The private mean: plans, the add/remove utility, sensitivity, exact distribution."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from draw_helpers import draws
from stats_helpers import FPR, chi_square_pvalue

from beam_dp.mechanisms import selection_probabilities
from beam_dp.scores import MeanScore
from beam_dp.summaries.histogram import ExactSum, Grid
from beam_dp.summaries.quantiles import (
    plan_mean,
    select_mean,
)
from beam_dp.summaries.quantiles.mean import _sum_deviation_scores

# -------------------------------------------------------------------------------- mean


def test_mean_plans_need_n_exactly_under_replace() -> None:
    grid = Grid.uniform(0.0, 10.0, 101)
    with pytest.raises(ValueError, match="'n'"):
        plan_mean(grid, estimator="selection", epsilon=1.0, relation="replace")
    with pytest.raises(ValueError, match="only used with relation='replace'"):
        plan_mean(grid, estimator="selection", epsilon=1.0, n=10)
    replace = plan_mean(
        grid, estimator="selection", epsilon=1.0, relation="replace", n=50, max_contributions=2
    )
    assert replace.sensitivity == Fraction(2 * 10, 50)
    assert plan_mean(grid, estimator="selection", epsilon=1.0).sensitivity == 10


def test_mean_at_huge_epsilon_is_the_nearest_grid_point() -> None:
    grid = Grid.uniform(0.0, 10.0, 101)
    values = np.array([1.0, 2.0, 3.3, 4.0, 25.0, math.nan])  # clamps to 10, drops NaN: mean 4.06
    summary = ExactSum(0.0, 10.0).add(values)
    for relation, n in (("add_remove", None), ("replace", 5)):
        plan = plan_mean(grid, estimator="selection", epsilon=1e6, relation=relation, n=n)
        assert select_mean(summary, plan).value == pytest.approx(4.1)


def test_replace_mean_releases_whatever_the_number_of_values() -> None:
    # Issue 8: the number of values kept (after bounding and dropping NaN) is private. A
    # neighbour that turns one value into NaN, or sends one row fewer or more, must not turn a
    # release into an error: that would be a one-bit leak through the job's success.
    grid = Grid.uniform(0.0, 10.0, 11)
    plan = plan_mean(grid, estimator="selection", epsilon=1e6, relation="replace", n=3)
    for values in (
        [1.0, 2.0, 6.0],
        [1.0, 2.0, math.nan],
        [1.0, 2.0, math.inf],
        [1.0, 2.0],
        [],
        [1.0, 2.0, 6.0, 9.0, 9.5],
    ):
        summary = ExactSum(0.0, 10.0).add(values)
        selection = select_mean(summary, plan)  # no exception
        kept = [v for v in values if math.isfinite(v)]
        # At a huge epsilon the output is the grid point nearest the centred sum over n = 3.
        centred = min(max(5 + sum(v - 5 for v in kept) / 3, 0.0), 10.0)
        assert selection.value == pytest.approx(round(centred))
    # [1, 2, NaN]: 5 + (-4 - 3) / 3 = 2.67, released as 3 (the mean of [1, 2] would give 2).
    nan_neighbour = select_mean(ExactSum(0.0, 10.0).add([1.0, 2.0, math.nan]), plan)
    assert nan_neighbour.value == 3.0


def test_add_remove_mean_releases_for_any_number_of_values() -> None:
    # The add/remove utility's integer scores are capped by a public floor instead of failing
    # when a (private) count makes them exceed int64.
    grid = Grid.uniform(0.0, 10.0, 11)
    summary = ExactSum(0.0, 10.0)
    summary.count = 2**50
    summary.scaled_sum = 5 * 2**50 * 2**1127  # 2**50 values at 5.0
    selection = select_mean(summary, plan_mean(grid, estimator="selection", epsilon=1.0))
    assert selection.value == 5.0  # every other score sits at the floor -(2**62 - 1)


def sum_deviation_scores(values: np.ndarray, grid: Grid, k: int) -> np.ndarray:
    """floor(-|sum - n r| / unit), unit = k (upper - lower) / 2**16, by exact arithmetic."""

    summary = ExactSum(grid.lower, grid.upper).add(values)
    unit = k * (Fraction(grid.upper) - Fraction(grid.lower)) / 2**16
    scores = _sum_deviation_scores(summary.total, summary.count, grid, unit)
    expected = [
        math.floor(-abs(summary.total - summary.count * Fraction(float(r))) / unit)
        for r in grid.points
    ]
    assert scores.tolist() == expected
    return scores


def test_add_remove_mean_scores_have_the_declared_sensitivity() -> None:
    rng = np.random.default_rng(9)
    grid = Grid.uniform(-2.0, 3.0, 41)
    k = 2
    worst = 0
    for _ in range(150):
        base = rng.uniform(-4, 5, int(rng.integers(0, 20)))
        unit = rng.uniform(-4, 5, k)
        with_unit = sum_deviation_scores(np.concatenate([base, unit]), grid, k)
        without = sum_deviation_scores(base, grid, k)
        worst = max(worst, int(np.abs(with_unit - without).max()))
    assert worst <= 2**16  # the declared sensitivity in integer steps
    assert worst > 2**15


@pytest.mark.slow
@pytest.mark.parametrize("relation", ["add_remove", "replace"])
def test_mean_follows_the_exact_distribution(relation: str) -> None:
    grid = Grid.uniform(0.0, 4.0, 9)
    values = np.array([0.5, 1.0, 3.7, 2.2, 1.1, 0.9])
    summary = ExactSum(0.0, 4.0).add(values)
    n = values.size if relation == "replace" else None
    plan = plan_mean(grid, estimator="selection", epsilon=3.0, relation=relation, n=n)
    if relation == "replace":
        score = MeanScore(grid=grid.points, lower=0.0, upper=4.0, n=values.size)
        scores = score.compute(values)
        sensitivity = score.scaled_sensitivity("replace")
    else:
        scores = sum_deviation_scores(values, grid, 1)
        sensitivity = Fraction(2**16)
    expected = selection_probabilities(scores, epsilon=3.0, sensitivity=sensitivity)

    counts = draws(lambda: select_mean(summary, plan).index, 9, 4000)

    assert chi_square_pvalue(counts, expected) > FPR
