"""The single-quantile utility: exact distribution and the rank-error guarantee."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from draw_helpers import draws
from stats_helpers import FPR, chi_square_pvalue

from beam_dp.mechanisms import selection_probabilities
from beam_dp.scores import QuantileScore
from beam_dp.summaries.histogram import Grid, less_greater
from beam_dp.summaries.quantiles import (
    plan_quantiles,
    select_quantiles,
)


@pytest.mark.parametrize("method", ["permute_and_flip", "exponential"])
@pytest.mark.parametrize("relation", ["add_remove", "replace"])
def test_one_quantile_follows_the_exact_distribution(method: str, relation: str) -> None:
    grid = Grid.explicit([0.0, 1.0, 2.0, 2.5, 3.0, 4.0, 6.0, 8.0, 10.0])
    values = np.array([0.5, 1.0, 2.0, 2.0, 2.2, 3.5, 7.0, 9.0, 9.5, 1.5, 2.6])
    alpha = Fraction(2, 5)
    plan = plan_quantiles([alpha], epsilon=2.0, num_candidates=9, method=method, relation=relation)
    histogram = grid.histogram(values)
    slots = histogram.counts()
    less, greater = less_greater(slots)
    score = QuantileScore(alpha=alpha, grid=grid.points)
    expected = selection_probabilities(
        score.compute_from_counts(less, greater, equal=slots[1::2]),  # 1.0 and 2.0 are tied
        epsilon=2.0,
        sensitivity=score.scaled_sensitivity(relation),  # type: ignore[arg-type]
        method=method,  # type: ignore[arg-type]
    )

    counts = draws(lambda: select_quantiles(histogram, grid, plan).indices[0], 9, 4000)

    assert chi_square_pvalue(counts, expected) > FPR


def test_rank_error_covers_the_measured_error_beyond_the_grid_term() -> None:
    """e(out) <= rank_error + OPT, in (far) more than 95% of runs."""
    rng = np.random.default_rng(21)
    grid = Grid.uniform(0.0, 1.0, 2001)
    quantiles = [0.1, 0.5, 0.9]
    plan = plan_quantiles(quantiles, epsilon=0.5, num_candidates=grid.num_points)
    misses = 0
    runs = 100
    for _ in range(runs):
        values = np.sort(rng.beta(2, 5, 3000))
        histogram = grid.histogram(values)
        slots = histogram.counts()
        less, _ = less_greater(slots)
        n = values.size
        selection = select_quantiles(histogram, grid, plan)
        for alpha, value, bound in zip(
            quantiles, selection.values, selection.rank_errors, strict=True
        ):
            low = np.searchsorted(values, value, "left")
            high = np.searchsorted(values, value, "right")
            error = max(0.0, low - alpha * n, alpha * n - high)
            # OPT: the best grid point's distance from alpha n to its ranks [L, L + E].
            at_most = less + slots[1::2]
            best = float(np.maximum(0, np.maximum(less - alpha * n, alpha * n - at_most)).min())
            misses += error > bound + best
    assert misses <= 0.05 * runs
