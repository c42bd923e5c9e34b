"""Quantile plans: epsilon per level, the auto split, sensitivities and rank-error bounds."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from beam_dp.mechanisms import score_loss_bound
from beam_dp.summaries.quantiles import (
    plan_quantiles,
    quantile_rounds,
)
from beam_dp.summaries.quantiles.planning import (
    CUT_WORK,
    MAX_CUTS,
    MAX_TIE_PARTS,
    TIE_PARTS,
    tie_parts,
)


def test_recursive_plan_spends_epsilon_once_per_level() -> None:
    quantiles = [i / 8 for i in range(1, 8)]  # 7 quantiles: a full tree of depth 3

    plan = plan_quantiles(quantiles, epsilon=1.5, num_candidates=100, split="recursive")

    assert plan.split == "recursive" and plan.levels == plan.rounds == 3
    for level in (1, 2, 3):
        nodes = [n for n in plan.nodes if n.level == level]
        assert len(nodes) == 2 ** (level - 1)
        assert all(n.epsilon == Fraction(1, 2) for n in nodes)  # parallel within a level
    root = plan.nodes[0]
    assert root.alpha == Fraction(1, 2) and root.sensitivity == Fraction(1, 2)
    children = {plan.nodes[i].alpha for i in (root.left, root.right) if i is not None}
    assert children == {Fraction(1, 2)}  # 1/4 of the data below, 3/4 above: re-normalised


@pytest.mark.parametrize(
    ("m", "split", "rounds"),
    [(1, "independent", 1), (2, "joint", 1), (3, "joint", 2), (8, "joint", 2), (9, "joint", 3)],
)
def test_auto_split_is_the_joint_split_from_two_quantiles(m: int, split: str, rounds: int) -> None:
    quantiles = [(i + 1) / (m + 1) for i in range(m)]

    plan = plan_quantiles(quantiles, epsilon=1.0, num_candidates=10)

    assert plan.split == split
    assert plan.rounds == rounds == quantile_rounds(quantiles)
    assert rounds <= min(m, math.ceil(math.log2(m + 1)))


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


def test_rank_errors_add_the_weighted_errors_of_the_branch_ends() -> None:
    """Quartiles: the root (0.5) chooses among the d (Q + 1) cuts, each child among the d grid
    points, and a child's bound is its own l plus 1/2 of the root's (alpha = 1/2 in its
    branch, whose other end is a global end)."""
    plan = plan_quantiles([0.25, 0.5, 0.75], epsilon=1.0, num_candidates=100)

    root = plan.nodes[0]
    per_selection = 1 - 0.05 / 3
    cut_loss = score_loss_bound(
        100 * (plan.tie_parts + 1), epsilon=0.5, sensitivity=0.5, confidence=per_selection
    )
    point_loss = score_loss_bound(100, epsilon=0.5, sensitivity=0.5, confidence=per_selection)
    assert plan.tie_parts == 1024 and root.cuts
    assert root.loss_bound == pytest.approx(cut_loss)
    errors = plan.rank_errors()
    assert errors[1] == pytest.approx(cut_loss)
    assert errors[0] == pytest.approx(point_loss + cut_loss / 2) == errors[2]
    # The tie cut's term: 1/(2Q) of N at the root, half of it inherited by the children.
    shares = plan.rank_error_shares()
    half = 1 / (2 * plan.tie_parts)
    assert shares == pytest.approx((half / 2, half, half / 2))
    assert plan.rank_error_share == pytest.approx(half)


def test_a_pair_node_with_children_states_twice_the_tie_share() -> None:
    """Sevenths: the joint split's root chooses two cuts at once (the best pair's two
    distances can add up: 1/Q of N); its leaves inherit it weighted by their place."""
    plan = plan_quantiles([i / 7 for i in range(1, 7)], epsilon=1.0, num_candidates=100)
    root = plan.nodes[0]
    assert root.second_target is not None and root.cuts
    assert root.path_shares == pytest.approx((1 / plan.tie_parts, 1 / plan.tie_parts))
    leaves = [node for node in plan.nodes if not node.cuts]
    shares = sorted(share for node in leaves for share in node.path_shares)
    assert shares == pytest.approx([0.5 / plan.tie_parts] * 2 + [1 / plan.tie_parts] * 2)


def test_independent_selections_have_no_tie_share() -> None:
    plan = plan_quantiles([0.25, 0.75], epsilon=1.0, num_candidates=100, split="independent")
    assert plan.rank_error_shares() == (0.0, 0.0)


def test_deeper_bounds_weigh_both_ends_and_stay_below_the_path_sum() -> None:
    quantiles = [i / 8 for i in range(1, 8)]
    plan = plan_quantiles(quantiles, epsilon=1.0, num_candidates=1000, split="recursive")
    by_target = {node.target: node for node in plan.nodes}
    # 3/8 is the median of the branch between the cuts for 1/4 and 1/2.
    node = by_target[2]
    assert node.alpha == Fraction(1, 2) and not node.cuts
    quarter, half = by_target[1], by_target[3]
    assert node.path_loss == pytest.approx(
        node.loss_bound + quarter.path_loss / 2 + half.path_loss / 2
    )
    path_sum = node.loss_bound + quarter.loss_bound + half.loss_bound
    assert node.path_loss < path_sum


def test_pair_nodes_carry_one_bound_per_quantile() -> None:
    plan = plan_quantiles([i / 7 for i in range(1, 7)], epsilon=1.0, num_candidates=50)
    root = plan.nodes[0]
    assert root.second_target is not None and root.cuts
    assert root.path_losses == (root.loss_bound, root.loss_bound)  # both ends are global
    errors = plan.rank_errors()
    assert errors[root.target] == errors[root.second_target] == root.loss_bound
    middle = plan.nodes[root.middle]  # type: ignore[index]
    assert middle.second_path_loss is not None and not middle.cuts
    assert middle.path_losses == pytest.approx(
        tuple(
            middle.loss_bound + float(1 - a) * root.loss_bound + float(a) * root.loss_bound
            for a in (middle.alpha, middle.second_alpha)
        )
    )


@pytest.mark.parametrize(
    ("points", "parts"),
    [
        (2, MAX_TIE_PARTS),
        (31, MAX_TIE_PARTS),
        (101, 1024),
        (1001, 128),
        (2048, TIE_PARTS),
        (2000, TIE_PARTS),
        (32_263, 64),
        (32_264, 63),
        (10**6, 1),
        (3 * 10**6, 1),
    ],
)
def test_tie_parts_follow_the_grid_size(points: int, parts: int) -> None:
    """``Q`` grows on small grids to ``CUT_WORK`` cuts per selection (a power of two, capped
    at ``MAX_TIE_PARTS``), is ``TIE_PARTS`` where that is more, and shrinks on large grids."""
    assert tie_parts(points) == parts
    assert points * (parts + 1) <= max(MAX_CUTS, CUT_WORK, 2 * points)


@pytest.mark.parametrize("split", ["auto", "recursive", "independent"])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 7, 8, 20])
def test_rounds_are_known_without_a_plan(m: int, split: str) -> None:
    quantiles = [Fraction(i, m + 1) for i in range(1, m + 1)] + [Fraction(1, m + 1)]  # a repeat
    plan = plan_quantiles(quantiles, epsilon=1.0, num_candidates=100, split=split)
    assert quantile_rounds(quantiles, split) == plan.rounds
