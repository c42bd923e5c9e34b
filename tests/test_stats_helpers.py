"""The statistical helpers the distribution tests rely on."""

from __future__ import annotations

import numpy as np
from stats_helpers import FPR, chi_square_pvalue


def test_a_rare_outcome_in_the_pooled_tail_is_not_a_failure() -> None:
    # 2 500 draws of a law whose tail cells expect 0.005 in all: one draw there is a 1-in-200
    # event, not evidence against the law. Pooling only the cells below 5 gave a pool expecting
    # 0.005 and a statistic near 200 (p far below FPR); the pool now grows to 5 expected.
    probabilities = np.array([0.5, 0.3, 0.2 - 2e-6, 1e-6, 1e-6])
    counts = np.array([1_250, 750, 499, 1, 0])
    assert chi_square_pvalue(counts, probabilities) > FPR


def test_an_impossible_outcome_fails_whatever_the_pooling() -> None:
    probabilities = np.array([0.5, 0.5, 0.0])
    assert chi_square_pvalue(np.array([1_000, 999, 1]), probabilities) == 0.0
    assert chi_square_pvalue(np.array([1_000, 1_000, 0]), probabilities) > FPR


def test_a_wrong_law_fails() -> None:
    probabilities = np.array([0.5, 0.3, 0.2])
    assert chi_square_pvalue(np.array([1_500, 600, 400]), probabilities) < FPR
    # every cell small: they pool into one cell and the test has nothing to compare
    assert chi_square_pvalue(np.array([1, 1, 0]), probabilities) == 1.0
