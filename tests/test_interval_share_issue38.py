"""What the default interval share costs the released quantile (issue 38 item 2), computed exactly.

Issue 38 asks that at the default share the quartiles' error with intervals be at most 1.25
times their error without. A quantile release with intervals runs its selections at
``1 - share`` of its epsilon. This file computes, without sampling, the exact output law of one
quantile selection (the package's score ``-dist(alpha N, [L, L + E])`` over a 10 001-point
grid, permute-and-flip, add/remove) at a selection's epsilon with and without the default
share taken out, and compares the mean of its absolute error in value units (distance to the
data's quantile set). Selections as the default plans make them at epsilon 1: the median alone
at 1, and each of the joint split's selections for the quartiles at 1/2 (the median, then the
median of each half). Continuous data (N(30, 12) to the hundredth): 545 rows (the real panel's
size) and 2 000 rows, where the error spans several grid steps. Left out: 2 000 rows at 1, where
the error is about one step and the ratio of two one-step errors measures the grid (1.37 even at
the share 1/8), and the median of the law, which moves in whole steps (0.03 to 0.04 is 1.33); on
integer data the ratio is about 1 (the error is mostly 0).

Mean ratios at the share 1/3: 1.47-1.62; at 1/6: 1.21-1.25 (one case just above 1.25); at 1/8:
at most 1.18. Kept as a strict xfail until the default share is lowered: remove the marker then.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest

from beam_dp.mechanisms import selection_probabilities
from beam_dp.summaries.histogram import Grid, less_greater
from beam_dp.summaries.quantiles.intervals import DEFAULT_INTERVAL_FRACTION
from beam_dp.summaries.quantiles.recursive import range_scores
from beam_dp.summaries.quantiles.utility import point_sensitivity

GRID = Grid.uniform(0.0, 100.0, 10_001)
LIMIT = 1.25


def error_law(
    values: npt.NDArray[np.float64], alpha: Fraction, epsilon: Fraction
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The absolute errors of the grid's points and their exact selection probabilities."""
    ordered = np.sort(GRID.prepare(values))
    counts = GRID.histogram(ordered).counts()
    less, greater = less_greater(counts)
    total = int(counts.sum())
    scores, common = range_scores(less, total - greater, total, alpha)
    law = selection_probabilities(
        scores,
        epsilon=epsilon,
        sensitivity=point_sensitivity(alpha, "add_remove", 1) * common,
    )
    low, high = ordered[math.ceil(alpha * total) - 1], ordered[math.floor(alpha * total)]
    points = np.asarray(GRID.points, dtype=np.float64)
    errors = np.maximum(0.0, np.maximum(low - points, points - high))
    return errors, law


def mean_error(errors: npt.NDArray[np.float64], law: npt.NDArray[np.float64]) -> float:
    """The mean absolute error under the law."""
    return float(np.dot(law, errors))


@pytest.mark.xfail(strict=True, reason="issue 38 item 2: at the share 1/3 the error is up to 1.6x")
@pytest.mark.parametrize(
    ("rows", "alpha", "selection_epsilon"),
    [
        (545, Fraction(1, 2), Fraction(1)),
        (545, Fraction(1, 2), Fraction(1, 2)),
        (545, Fraction(1, 4), Fraction(1, 2)),
        (2000, Fraction(1, 2), Fraction(1, 2)),
        (2000, Fraction(1, 4), Fraction(1, 2)),
    ],
)
def test_the_default_share_costs_the_quantile_at_most_a_quarter_of_its_error(
    rows: int, alpha: Fraction, selection_epsilon: Fraction
) -> None:
    values = np.round(np.random.default_rng(1).normal(30.0, 12.0, rows), 2)
    alone = mean_error(*error_law(values, alpha, selection_epsilon))
    shared = mean_error(
        *error_law(values, alpha, selection_epsilon * (1 - DEFAULT_INTERVAL_FRACTION))
    )
    assert alone > 0  # continuous data: the selection errs
    assert shared <= LIMIT * alone, (shared, alone)
