"""Private quantiles and means from grid summaries: plans, selections, accuracy, privacy."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from stats_helpers import FPR, chi_square_pvalue

from beam_dp.mechanisms import score_loss_bound, selection_probabilities
from beam_dp.scores import MeanScore, QuantileScore
from beam_dp.summaries.histogram import ExactSum, Grid, GridHistogram, less_greater
from beam_dp.summaries.quantiles import (
    MAX_QUANTILE_DENOMINATOR,
    QuantileSelection,
    cell_scores,
    combine_passes,
    parse_quantiles,
    plan_cells,
    plan_mean,
    plan_quantiles,
    refine_grid,
    select_cells,
    select_mean,
    select_quantiles,
)
from beam_dp.summaries.quantiles.recursive import _Branch

# ------------------------------------------------------------------------------ parameters


def test_quantiles_are_read_as_decimals_and_bounded() -> None:
    assert parse_quantiles([0.5, 0.9, Fraction(1, 7)]) == (
        Fraction(1, 2),
        Fraction(9, 10),
        Fraction(1, 7),
    )
    assert parse_quantiles([1 / 3]) == (Fraction(1, 3),)
    (near,) = parse_quantiles([0.123456789123])
    assert near.denominator <= MAX_QUANTILE_DENOMINATOR
    assert abs(near - Fraction("0.123456789123")) < Fraction(1, MAX_QUANTILE_DENOMINATOR)
    assert parse_quantiles(np.array([0.25, 0.75])) == (Fraction(1, 4), Fraction(3, 4))


@pytest.mark.parametrize(
    ("quantiles", "error", "message"),
    [
        ([], ValueError, "at least one"),
        ([0.0], ValueError, r"quantiles\[0\]"),
        ([0.5, 1.0], ValueError, r"quantiles\[1\]"),
        ([math.nan], ValueError, r"quantiles\[0\]"),
        ([True], TypeError, "bool"),
        ("0.5", TypeError, "sequence"),
        (0.5, TypeError, "sequence"),
    ],
)
def test_bad_quantiles_are_named(quantiles: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        parse_quantiles(quantiles)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"epsilon": 0.0}, "'epsilon' must be > 0"),
        ({"epsilon": math.nan}, "'epsilon' must be > 0"),
        ({"epsilon": math.inf}, "'epsilon' must be > 0"),
        ({"relation": "swap"}, "'relation'"),
        ({"method": "laplace"}, "'method'"),
        ({"split": "joint"}, "'split'"),
        ({"confidence": 1.0}, "'confidence'"),
        ({"max_contributions": 0}, "'max_contributions'"),
        ({"num_candidates": 0}, "'num_candidates'"),
    ],
)
def test_bad_plan_parameters_are_named(options: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"epsilon": 1.0, "num_candidates": 10}
    arguments.update(options)
    with pytest.raises(ValueError, match=message):
        plan_quantiles([0.5], **arguments)


def test_recursive_plan_spends_epsilon_once_per_level() -> None:
    quantiles = [i / 8 for i in range(1, 8)]  # 7 quantiles: a full tree of depth 3

    plan = plan_quantiles(quantiles, epsilon=1.5, num_candidates=100)

    assert plan.split == "recursive" and plan.levels == plan.rounds == 3
    for level in (1, 2, 3):
        nodes = [n for n in plan.nodes if n.level == level]
        assert len(nodes) == 2 ** (level - 1)
        assert all(n.epsilon == Fraction(1, 2) for n in nodes)  # parallel within a level
    root = plan.nodes[0]
    assert root.alpha == Fraction(1, 2) and root.sensitivity == Fraction(1, 2)
    children = {plan.nodes[i].alpha for i in (root.left, root.right) if i is not None}
    assert children == {Fraction(1, 2)}  # 1/4 of the data below, 3/4 above: re-normalised


@pytest.mark.parametrize(("m", "split"), [(1, "independent"), (2, "independent"), (3, "recursive")])
def test_auto_split_recurses_when_that_composes_fewer_rounds(m: int, split: str) -> None:
    quantiles = [(i + 1) / (m + 1) for i in range(m)]

    plan = plan_quantiles(quantiles, epsilon=1.0, num_candidates=10)

    assert plan.split == split
    assert plan.rounds == min(m, math.ceil(math.log2(m + 1)))


def test_replace_plan_uses_the_replace_sensitivity_at_the_root_only() -> None:
    plan = plan_quantiles([0.25, 0.5, 0.75], epsilon=1.0, num_candidates=10, relation="replace")

    root, *deeper = plan.nodes
    assert (root.relation, root.epsilon, root.sensitivity) == ("replace", Fraction(1, 2), 1)
    for node in deeper:
        assert node.relation == "add_remove" and node.epsilon == Fraction(1, 4)


def test_independent_plan_splits_epsilon_over_the_quantiles() -> None:
    plan = plan_quantiles(
        [0.1, 0.5, 0.9, 0.5], epsilon=Fraction(9, 10), num_candidates=10, split="independent"
    )

    assert plan.rounds == 3 and plan.distinct == (Fraction(1, 10), Fraction(1, 2), Fraction(9, 10))
    assert all(node.epsilon == Fraction(3, 10) for node in plan.nodes)
    expected = [Fraction(9, 10), Fraction(1, 2), Fraction(9, 10)]
    assert [node.sensitivity for node in plan.nodes] == expected


def test_one_quantile_rank_error_is_the_utility_guarantee() -> None:
    plan = plan_quantiles([0.5], epsilon=0.5, num_candidates=1000, max_contributions=3)

    expected = score_loss_bound(1000, epsilon=0.5, sensitivity=1.5, confidence=0.95)
    assert plan.rank_error == pytest.approx(expected)
    assert plan.rank_errors() == (plan.rank_error,)


def test_recursive_rank_errors_sum_the_losses_along_each_path() -> None:
    plan = plan_quantiles([0.25, 0.5, 0.75], epsilon=1.0, num_candidates=100)

    root = plan.nodes[0]
    per_selection = 1 - 0.05 / 3
    loss = score_loss_bound(100, epsilon=0.5, sensitivity=0.5, confidence=per_selection)
    assert root.loss_bound == pytest.approx(loss)
    errors = plan.rank_errors()
    assert errors[1] == pytest.approx(loss)
    assert errors[0] == pytest.approx(2 * loss) == errors[2]


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
def test_ties_at_a_split_point_are_shared_not_lost(
    values: np.ndarray, quantiles: list[float], expected: float
) -> None:
    grid = Grid.uniform(0.0, 10.0, 11)
    plan = plan_quantiles(quantiles, epsilon=1e4, num_candidates=11)

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


def draws(sampler: Any, num_candidates: int, num_samples: int) -> np.ndarray:
    counts = np.zeros(num_candidates, dtype=np.int64)
    for _ in range(num_samples):
        counts[sampler()] += 1
    return counts


@pytest.mark.parametrize("method", ["permute_and_flip", "exponential"])
@pytest.mark.parametrize("relation", ["add_remove", "replace"])
def test_one_quantile_follows_the_exact_distribution(method: str, relation: str) -> None:
    grid = Grid.explicit([0.0, 1.0, 2.0, 2.5, 3.0, 4.0, 6.0, 8.0, 10.0])
    values = np.array([0.5, 1.0, 2.0, 2.0, 2.2, 3.5, 7.0, 9.0, 9.5, 1.5, 2.6])
    alpha = Fraction(2, 5)
    plan = plan_quantiles([alpha], epsilon=2.0, num_candidates=9, method=method, relation=relation)
    histogram = grid.histogram(values)
    less, greater = less_greater(histogram.counts())
    score = QuantileScore(alpha=alpha, grid=grid.points)
    expected = selection_probabilities(
        score.compute_from_counts(less, greater),
        epsilon=2.0,
        sensitivity=score.scaled_sensitivity(relation),  # type: ignore[arg-type]
        method=method,  # type: ignore[arg-type]
    )

    counts = draws(lambda: select_quantiles(histogram, grid, plan).indices[0], 9, 4000)

    assert chi_square_pvalue(counts, expected) > FPR


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
        less, greater = less_greater(histogram.counts())
        n = values.size
        selection = select_quantiles(histogram, grid, plan)
        for alpha, value, bound in zip(
            quantiles, selection.values, selection.rank_errors, strict=True
        ):
            low = np.searchsorted(values, value, "left")
            high = np.searchsorted(values, value, "right")
            error = max(0.0, low - alpha * n, alpha * n - high)
            best = float(np.abs((1 - alpha) * less - alpha * greater).min())  # OPT
            misses += error > bound + best
    assert misses <= 0.05 * runs


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


# -------------------------------------------------------------------------------- mean


def test_mean_plans_need_n_exactly_under_replace() -> None:
    grid = Grid.uniform(0.0, 10.0, 101)
    with pytest.raises(ValueError, match="'n'"):
        plan_mean(grid, epsilon=1.0, relation="replace")
    with pytest.raises(ValueError, match="only used with relation='replace'"):
        plan_mean(grid, epsilon=1.0, n=10)
    replace = plan_mean(grid, epsilon=1.0, relation="replace", n=50, max_contributions=2)
    assert replace.sensitivity == Fraction(2 * 10, 50)
    assert plan_mean(grid, epsilon=1.0).sensitivity == 10


def test_mean_at_huge_epsilon_is_the_nearest_grid_point() -> None:
    grid = Grid.uniform(0.0, 10.0, 101)
    values = np.array([1.0, 2.0, 3.3, 4.0, 25.0, math.nan])  # clamps to 10, drops NaN: mean 4.06
    summary = ExactSum(0.0, 10.0).add(values)
    for relation, n in (("add_remove", None), ("replace", 5)):
        plan = plan_mean(grid, epsilon=1e6, relation=relation, n=n)
        assert select_mean(summary, plan).value == pytest.approx(4.1)


def test_replace_mean_releases_whatever_the_number_of_values() -> None:
    # Issue 8: the number of values kept (after bounding and dropping NaN) is private. A
    # neighbour that turns one value into NaN, or sends one row fewer or more, must not turn a
    # release into an error: that would be a one-bit leak through the job's success.
    grid = Grid.uniform(0.0, 10.0, 11)
    plan = plan_mean(grid, epsilon=1e6, relation="replace", n=3)
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
    selection = select_mean(summary, plan_mean(grid, epsilon=1.0))
    assert selection.value == 5.0  # every other score sits at the floor -(2**62 - 1)


def sum_deviation_scores(values: np.ndarray, grid: Grid, k: int) -> np.ndarray:
    """floor(-|sum - n r| / unit), unit = k (upper - lower) / 2**16, by exact arithmetic."""
    from beam_dp.summaries.quantiles.mean import _sum_deviation_scores

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
    plan = plan_mean(grid, epsilon=3.0, relation=relation, n=n)
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


def test_plans_refuse_an_unknown_option_before_anything_runs() -> None:
    # The options shared by every plan are declared once (PlanOptions); a typo is an error.
    grid = Grid.uniform(0.0, 1.0, 11)
    for call in (
        lambda: plan_quantiles([0.5], epsilon=1.0, num_candidates=11, max_contribution=2),
        lambda: plan_cells([0.5], epsilon=1.0, num_cells=10, relations="replace"),
        lambda: plan_mean(grid, epsilon=1.0, methods="exponential"),
    ):
        with pytest.raises(TypeError, match="unexpected keyword argument"):
            call()
    plan = plan_quantiles(
        [0.5], epsilon=1.0, num_candidates=11, relation="replace", max_contributions=2
    )
    assert (plan.relation, plan.max_contributions, plan.method) == (
        "replace",
        2,
        "permute_and_flip",
    )
