"""The tie-aware quantile score (issue 39, item 3), checked by brute force.

Every multiset of up to 5 values over a small pool (grid points, values between them and
beyond both ends) and every neighbour of it under both relations: the score moves by at most
its declared sensitivity, and the bound is reached. On every dataset the score is minus the
distance from ``alpha N`` to the ranks ``[L, L + E]`` of the grid point, 0 exactly when one of
those ranks is ``alpha N``, equal to the seeds' ``-|(1 - alpha) L - alpha G|`` where ``E = 0``,
and the grid point whose tied values hold the quantile's rank scores best.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from beam_dp.scores import QuantileScore

GRID = (1.0, 2.0, 3.0)
POOL = (0.5, 1.0, 1.5, 2.0, 3.0, 3.5)
ALPHAS = (Fraction(1, 2), Fraction(1, 3), Fraction(9, 10), Fraction(1, 10))
MAX_SIZE = 5
K = 2  # values per privacy unit


def datasets() -> list[tuple[float, ...]]:
    return [
        combo
        for size in range(MAX_SIZE + 1)
        for combo in itertools.combinations_with_replacement(POOL, size)
    ]


def real_scores(score: QuantileScore, values: tuple[float, ...]) -> list[Fraction]:
    return [int(s) * score.unit for s in score.compute(np.array(values, dtype=np.float64))]


def units_of_up_to(k: int) -> list[tuple[float, ...]]:
    return [
        c for size in range(1, k + 1) for c in itertools.combinations_with_replacement(POOL, size)
    ]


@pytest.mark.parametrize("alpha", ALPHAS)
def test_every_neighbour_moves_the_score_by_at_most_its_sensitivity(alpha: Fraction) -> None:
    score = QuantileScore(alpha, GRID, max_contributions=K)
    units = units_of_up_to(K)
    cache = {data: real_scores(score, data) for data in datasets()}
    worst = {"add_remove": Fraction(0), "replace": Fraction(0)}
    for data, before in cache.items():
        if len(data) > MAX_SIZE - K:
            continue
        for unit in units:
            added = tuple(sorted(data + unit))
            after = real_scores(score, added) if added not in cache else cache[added]
            moved = max(abs(a - b) for a, b in zip(after, before, strict=True))
            worst["add_remove"] = max(worst["add_remove"], moved)
            for other in units:
                if len(other) != len(unit):  # replace: the unit's values changed, N fixed
                    continue
                replaced = tuple(sorted(data + other))
                again = cache.get(replaced) or real_scores(score, replaced)
                moved = max(abs(a - b) for a, b in zip(after, again, strict=True))
                worst["replace"] = max(worst["replace"], moved)
    for relation, measured in worst.items():
        assert measured <= score.sensitivity(relation), relation  # type: ignore[arg-type]
    # Tight: the declared sensitivities are reached on these small datasets.
    assert worst["add_remove"] == max(alpha, 1 - alpha) * K
    assert worst["replace"] == K


@pytest.mark.parametrize("alpha", ALPHAS)
def test_the_score_is_minus_the_distance_to_the_ranks_of_the_point(alpha: Fraction) -> None:
    score = QuantileScore(alpha, GRID)
    for data in datasets():
        n = len(data)
        target = alpha * n
        for r, real in zip(GRID, real_scores(score, data), strict=True):
            less = sum(v < r for v in data)
            equal = sum(v == r for v in data)
            greater = n - less - equal
            distance = max(Fraction(0), less - target, target - (less + equal))
            assert real == -distance
            assert (real == 0) == (less <= target <= less + equal)
            if equal == 0:  # the seeds' score where no value is tied at the point
                assert real == -abs((1 - alpha) * less - alpha * greater)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_a_point_whose_tied_values_hold_the_rank_scores_best(alpha: Fraction) -> None:
    # 3 values near 0.5 and a block of 6 at 2.0: the point 2.0 holds the ranks [3, 9], which
    # hold alpha N for alpha from 1/3 up; it must score at least as well as every other point
    # (strictly better than its empty neighbours 1.0 and 3.0 past 1/3, where the rank 3 is
    # also the empty point 1.0's).
    grid = (1.0, 2.0, 3.0)
    data = np.array([0.4, 0.5, 0.6] + [2.0] * 6)
    score = QuantileScore(alpha, grid)
    scores = score.compute(data)
    if Fraction(1, 3) <= alpha:
        assert scores[1] == 0
        assert scores[1] > scores[2] and (scores[1] > scores[0] or alpha == Fraction(1, 3))
    else:
        assert scores[1] == scores.max()
