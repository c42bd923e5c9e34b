"""The recursive split: branch weights, parallel composition over a level, selections."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from stats_helpers import FPR, chi_square_pvalue

from beam_dp.mechanisms import selection_probabilities
from beam_dp.scores import QuantileScore
from beam_dp.summaries.histogram import Grid, GridHistogram, less_greater
from beam_dp.summaries.quantiles import (
    plan_quantiles,
    select_quantiles,
)
from beam_dp.summaries.quantiles.recursive import _Branch

# ---------------------------------------------------------------------------- branches


def weighted_counts(counts: np.ndarray, branch: _Branch) -> list[tuple[Fraction, Fraction]]:
    """(L, G) of every candidate of a branch, by definition, with exact weights."""
    out = []
    low, high = branch.candidates
    for j in range(low, high + 1):
        slot = 2 * j + 1
        below = sum(
            (branch.weight(s) * int(counts[s]) for s in range(branch.first, slot)), Fraction(0)
        )
        above = sum(
            (branch.weight(s) * int(counts[s]) for s in range(slot + 1, branch.last + 1)),
            Fraction(0),
        )
        out.append((below, above))
    return out


def test_branch_counts_match_the_weighted_definition() -> None:
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 9, size=21).astype(np.int64)  # a 10-point grid
    root = _Branch(0, 20)
    left, right = root.split(4)
    left_left, left_right = left.split(4)  # splitting again at the branch's own end
    branches = [root, left, right, left_left, left_right, *right.split(7)]

    for branch in branches:
        less, greater, scale = branch.less_greater(counts)
        expected = weighted_counts(counts, branch)
        assert [
            (Fraction(int(a), scale), Fraction(int(b), scale))
            for a, b in zip(less, greater, strict=True)
        ] == expected

    assert (left.first, left.last, left.last_weight) == (0, 9, Fraction(1, 2))
    assert (right.first, right.first_weight, right.last) == (9, Fraction(1, 2), 20)
    assert (left_right.first, left_right.last, left_right.first_weight) == (9, 9, Fraction(1, 4))


def test_each_value_weighs_at_most_one_across_a_level() -> None:
    root = _Branch(0, 40)
    level = [root]
    for split in ([7], [3, 12], [3, 3, 12, 15]):
        level = [child for branch, j in zip(level, split, strict=True) for child in branch.split(j)]
        for slot in range(41):
            total = sum((b.weight(slot) for b in level if b.first <= slot <= b.last), Fraction(0))
            assert total <= 1


@pytest.mark.parametrize("relation", ["add_remove", "replace"])
def test_a_level_of_the_split_costs_at_most_its_epsilon(relation: str) -> None:
    """Falsify the parallel-composition claim on random neighbours and split points.

    For the branches of one level (each calibrated to its own add/remove sensitivity), the
    privacy loss of a neighbour pair is at most sum_B |change of B's scores| / Delta_B, which
    must stay <= 1 under add/remove and <= 2 under replace (why deeper levels run at half
    epsilon there).
    """
    rng = np.random.default_rng(17)
    grid = Grid.uniform(0.0, 10.0, 21)
    alphas = [Fraction(1, 3), Fraction(1, 2), Fraction(4, 5)]
    k = 2
    worst = 0.0
    for _ in range(300):
        pool = np.concatenate([grid.points, rng.uniform(-1, 11, 20)])
        base = rng.choice(pool, size=int(rng.integers(0, 25)))
        unit = rng.choice(pool, size=k)
        other = rng.choice(pool, size=k)
        first = int(rng.integers(0, 21))
        root = _Branch(0, 2 * 21)
        level = list(root.split(first))
        level = [c for b in level for c in b.split(int(rng.integers(*_index_range(b))))]
        if relation == "add_remove":
            pair = (np.concatenate([base, unit]), base)
        else:
            pair = (np.concatenate([base, unit]), np.concatenate([base, other]))
        counts = [grid.histogram(values).counts() for values in pair]
        loss = 0.0
        for branch, alpha in zip(level, alphas + alphas[:1], strict=True):
            low, high = branch.candidates
            score = QuantileScore(
                alpha=alpha, grid=grid.points[low : high + 1], max_contributions=k
            )
            real = []
            for c in counts:
                less, greater, scale = branch.less_greater(c)
                real.append(
                    score.compute_from_counts(less, greater) / (score.unit.denominator * scale)
                )
            change = float(np.abs(real[0] - real[1]).max())
            loss += change / float(score.sensitivity("add_remove"))
        worst = max(worst, loss)
    assert worst <= (1.0 if relation == "add_remove" else 2.0) + 1e-9
    assert worst > 0.5  # the test can see a change


def _index_range(branch: _Branch) -> tuple[int, int]:
    low, high = branch.candidates
    return low, high + 1


# -------------------------------------------------------------------------- selections


def test_huge_epsilon_releases_the_best_grid_points_in_request_order() -> None:
    rng = np.random.default_rng(8)
    values = rng.normal(50, 10, 2000)
    grid = Grid.uniform(0.0, 100.0, 1001)
    histogram = grid.histogram(values)
    quantiles = [0.9, 0.1, 0.5, 0.25, 0.5]
    less, greater = less_greater(histogram.counts())

    for split in ("recursive", "independent"):
        plan = plan_quantiles(quantiles, epsilon=1e5, num_candidates=1001, split=split)
        selection = select_quantiles(histogram, grid, plan)
        for alpha, index in zip(quantiles, selection.indices, strict=True):
            utility = -np.abs((1 - alpha) * less - alpha * greater)
            best = np.flatnonzero(utility >= utility.max() - 0.5)
            assert best.min() - 1 <= index <= best.max() + 1, (split, alpha)
        assert selection.values == tuple(float(grid.points[i]) for i in selection.indices)
        assert selection.values[1] <= selection.values[3] <= selection.values[2]


@pytest.mark.parametrize(
    ("values", "quantiles", "expected"),
    [
        # The root (0.1) lands on a block of 600 ties; the 0.3 quantile is in that block.
        # Dropping the ties from both sides would leave the right branch 400 spread values.
        (np.concatenate([np.full(600, 3.0), np.linspace(3.5, 9.5, 400)]), [0.1, 0.3], 3.0),
        # The root (0.7) lands on the block at the top; the right branch holds only ties.
        (np.concatenate([np.linspace(0.5, 6.5, 400), np.full(600, 7.0)]), [0.7, 0.9], 7.0),
    ],
)
@pytest.mark.parametrize("split", ["recursive", "joint", "independent"])
def test_ties_at_a_split_point_are_shared_not_lost(
    values: np.ndarray, quantiles: list[float], expected: float, split: str
) -> None:
    grid = Grid.uniform(0.0, 10.0, 11)
    plan = plan_quantiles(quantiles, epsilon=1e4, num_candidates=11, split=split)

    selection = select_quantiles(grid.histogram(values), grid, plan)

    assert selection.values == (expected, expected)


def test_empty_data_still_releases_grid_points() -> None:
    grid = Grid.uniform(0.0, 1.0, 11)
    plan = plan_quantiles([0.2, 0.5, 0.8], epsilon=1.0, num_candidates=11)

    selection = select_quantiles(GridHistogram(grid.num_slots), grid, plan)

    assert all(v in grid.points for v in selection.values)
    assert list(selection.values) == sorted(selection.values)


def test_histogram_and_grid_must_agree() -> None:
    grid = Grid.uniform(0.0, 1.0, 11)
    with pytest.raises(ValueError, match="slots"):
        select_quantiles(
            GridHistogram(7), grid, plan_quantiles([0.5], epsilon=1.0, num_candidates=11)
        )
    with pytest.raises(ValueError, match="plan was made for"):
        select_quantiles(
            GridHistogram(23), grid, plan_quantiles([0.5], epsilon=1.0, num_candidates=5)
        )


@pytest.mark.slow
def test_a_branch_follows_the_exact_distribution_given_the_root() -> None:
    """Three quantiles: the root's draw, then each child's given the root, exactly."""
    grid = Grid.uniform(0.0, 8.0, 9)
    values = np.array([0.5, 1.0, 1.0, 2.0, 3.0, 3.0, 3.0, 4.5, 5.0, 6.0, 7.5, 8.0])
    plan = plan_quantiles([0.25, 0.5, 0.75], epsilon=3.0, num_candidates=9)
    histogram = grid.histogram(values)
    counts_array = histogram.counts()
    root_node = plan.nodes[0]

    root_draws = np.zeros(9, dtype=np.int64)
    left_draws: dict[int, np.ndarray] = {}
    for _ in range(6000):
        selection = select_quantiles(histogram, grid, plan)
        root = selection.indices[1]
        root_draws[root] += 1
        left_draws.setdefault(root, np.zeros(9, dtype=np.int64))[selection.indices[0]] += 1

    def check(observed: np.ndarray, branch: _Branch, alpha: Fraction, epsilon: Fraction) -> None:
        low, high = branch.candidates
        weighted = weighted_counts(counts_array, branch)
        score = [-abs((1 - alpha) * a - alpha * b) for a, b in weighted]
        expected = selection_probabilities(
            score, epsilon=epsilon, sensitivity=max(alpha, 1 - alpha)
        )
        assert observed[:low].sum() == observed[high + 1 :].sum() == 0
        assert chi_square_pvalue(observed[low : high + 1], expected) > FPR

    root_branch = _Branch(0, 18)
    check(root_draws, root_branch, root_node.alpha, root_node.epsilon)
    left_node = plan.nodes[root_node.left]  # type: ignore[index]
    for root, observed in left_draws.items():
        if observed.sum() >= 400:
            check(observed, root_branch.split(root)[0], left_node.alpha, left_node.epsilon)
