"""Many quantiles from one histogram: the recursive split (Kaplan, Schnapp, Stemmer 2022).

The split
---------
Select the middle requested quantile on the whole data; values below the chosen point ``s``
form the left branch, values above it the right branch, and each branch recursively selects its
quantiles, re-normalised to the branch (``alpha' = (alpha - alpha_lo) / (alpha_hi -
alpha_lo)``), among the grid points of its side (so the outputs come out sorted). Values
*equal* to ``s`` count one half in each branch (our tie rule: the split stays symmetric and a
branch is never emptied by a block of ties). A branch is a :class:`_Branch`: a range of
histogram slots whose two end slots carry the weights (powers of 1/2) left by earlier splits.

Privacy (:func:`level_budget`)
------------------------------
Each value has total weight at most 1 across the branches of a level (:meth:`_Branch.split`
gives each side half of the tied slot and nothing else is shared), so one privacy unit's change
moves the scores of the branches of a level by at most its ``k`` weighted values in total: with
each branch calibrated to its own add/remove sensitivity ``max(alpha', 1-alpha') k``, a whole
level costs ``epsilon_level`` (parallel composition), and the ``D = ceil(log2(m + 1))`` levels
cost ``D * epsilon_level = epsilon``. Under *replace*, the root uses the replace sensitivity at
``epsilon / D``; deeper levels see up to ``2k`` weighted additions and removals per changed unit
(the changed values may move between branches), so each of their branches runs at
``epsilon / (2D)`` with the add/remove sensitivity. The same accounting holds in zCDP for the
exponential mechanism (each level is ``epsilon_level``-bounded-range).

Independent selections (``split="independent"``) are ``m`` selections on the whole histogram
at ``epsilon / m`` each (basic composition); the outputs are sorted (post-processing).

Accuracy
--------
For the recursive split, a branch ``B`` whose ends are earlier outputs ``s_lo, s_hi`` holds
the weighted values between them; ``C_B`` is the weight to its left. For every candidate ``r``
of ``B`` the global rank interval of ``r`` contains ``C_B + [L_B, L_B + E_B]`` (also at the two
end points, where ``B`` holds only part of the tie), so
``e(r) <= e_B(r) + |alpha N - C_B - alpha_B n_B|``. The second term is an affine function of
``alpha`` on ``[alpha_lo, alpha_hi]`` that is bounded at each end by the rank error of that
end's output plus its ties, and is 0 at the global ends. By induction along the path from the
root, the rank error of a quantile at depth ``h`` is at most the sum of ``l + OPT + ties``
over the ``h`` selections on its path (see :mod:`.utility` for one selection);
``rank_error`` reports the sum of the ``l`` terms.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from beam_dp._validation import Relation
from beam_dp.mechanisms import RandomSource, as_random_source
from beam_dp.summaries.histogram import Grid
from beam_dp.summaries.quantiles.joint import pair_scores, select_pair
from beam_dp.summaries.quantiles.parameters import HistogramLike, RngLike, dense_counts
from beam_dp.summaries.quantiles.utility import QuantileSelection, select_point

if TYPE_CHECKING:
    from beam_dp.summaries.quantiles.planning import QuantileNode, QuantilePlan

__all__ = ["level_budget", "recursion_levels", "select_quantiles"]

IntArray = npt.NDArray[np.int64]


def recursion_levels(num_quantiles: int, branching: int = 2) -> int:
    """The smallest ``D >= 1`` with ``branching**D - 1 >= m``."""
    levels = 1
    while branching**levels - 1 < num_quantiles:
        levels += 1
    return levels


def level_budget(
    level: int, relation: Relation, level_epsilon: Fraction
) -> tuple[Relation, Fraction]:
    """The relation whose sensitivity calibrates a node at ``level``, and the node's epsilon.

    Privacy:
        The root (level 1) sees the data as the release does: ``relation`` at
        ``level_epsilon``. Deeper nodes are calibrated to the add/remove sensitivity of their
        branch (a changed unit adds and removes weighted values across the branches of a
        level): at ``level_epsilon`` under add/remove, and at ``level_epsilon / 2`` under
        replace, where one changed unit is up to ``k`` removals plus ``k`` additions (the
        halving). See the module docstring for the parallel composition over a level.
    """
    if level == 1:
        return relation, level_epsilon
    if relation == "replace":
        return "add_remove", level_epsilon / 2
    return "add_remove", level_epsilon


@dataclass(frozen=True)
class _Branch:
    """The weighted part of the histogram a node selects on: slots ``[first, last]``.

    Interior slots have weight 1; ``first`` and ``last`` have weights ``first_weight`` and
    ``last_weight`` (powers of 1/2: halves of tied values at earlier split points). When
    ``first == last`` the one slot's weight is ``first_weight``.
    """

    first: int
    last: int
    first_weight: Fraction = Fraction(1)
    last_weight: Fraction = Fraction(1)

    def weight(self, slot: int) -> Fraction:
        if slot == self.first:
            return self.first_weight
        if slot == self.last:
            return self.last_weight
        return Fraction(1)

    @property
    def candidates(self) -> tuple[int, int]:
        """The first and last grid index whose point slot (``2j + 1``) is in the branch."""
        return (self.first) // 2, (self.last - 1) // 2

    def split(self, index: int) -> tuple[_Branch, _Branch]:
        """The two branches below the chosen grid point ``index``.

        Privacy:
            The tied slot ``2 index + 1`` goes to both sides at half its weight and every
            other slot to exactly one side, so a value's weights over the branches of a
            level add up to at most 1 (the parallel composition of the module docstring).
        """
        slot = 2 * index + 1
        half = self.weight(slot) / 2
        if slot == self.first:
            left = _Branch(slot, slot, half, half)
        else:
            left = _Branch(self.first, slot, self.first_weight, half)
        if slot == self.last:
            right = _Branch(slot, slot, half, half)
        else:
            right = _Branch(slot, self.last, half, self.last_weight)
        return left, right

    def less_greater(self, counts: IntArray) -> tuple[IntArray, IntArray, int]:
        """Weighted ``(L, G)`` of the branch's candidates, as integers times ``scale``."""
        less, _, greater, scale = self.less_equal_greater(counts)
        return less, greater, scale

    def less_equal_greater(self, counts: IntArray) -> tuple[IntArray, IntArray, IntArray, int]:
        """Weighted ``(L, E, G)`` of the branch's candidates, as integers times ``scale``."""
        scale = max(self.first_weight.denominator, self.last_weight.denominator)
        segment = counts[self.first : self.last + 1] * scale
        segment[0] = counts[self.first] * int(self.first_weight * scale)
        if self.last != self.first:
            segment[-1] = counts[self.last] * int(self.last_weight * scale)
        cumulative = np.cumsum(segment)
        total = cumulative[-1]
        low, high = self.candidates
        positions = 2 * np.arange(low, high + 1, dtype=np.int64) + 1 - self.first
        equal: IntArray = segment[positions]
        less: IntArray = cumulative[positions] - equal
        greater: IntArray = total - cumulative[positions]
        return less, equal, greater, scale


def _select_node(
    counts: IntArray,
    grid: Grid,
    branch: _Branch,
    node: QuantileNode,
    plan: QuantilePlan,
    source: RandomSource,
) -> int:
    less, greater, scale = branch.less_greater(counts)
    return select_point(
        grid,
        branch.candidates,
        less,
        greater,
        scale,
        alpha=node.alpha,
        relation=node.relation,
        epsilon=node.epsilon,
        max_contributions=plan.max_contributions,
        max_partitions=plan.max_partitions,
        method=plan.method,
        source=source,
    )


def _select_pair_node(
    counts: IntArray,
    branch: _Branch,
    node: QuantileNode,
    plan: QuantilePlan,
    source: RandomSource,
) -> tuple[int, int]:
    assert node.second_alpha is not None
    less, equal, greater, scale = branch.less_equal_greater(counts)
    first, second, common = pair_scores(less, equal, greater, (node.alpha, node.second_alpha))
    rate = node.epsilon / (2 * node.sensitivity * common * scale)
    low, _ = branch.candidates
    i, j = select_pair(first, second, rate, source)
    return low + i, low + j


def select_quantiles(
    histogram: HistogramLike, grid: Grid, plan: QuantilePlan, *, rng: RngLike = None
) -> QuantileSelection:
    """Run ``plan`` on a merged histogram: the private quantile release.

    Args:
        histogram: the merged :class:`GridHistogram` of the (bounded) values over ``grid``, or
            its dense slot counts.
        grid: the grid the histogram was built on (``len(grid) == plan.num_candidates``
            or fewer).
        plan: from :func:`~beam_dp.summaries.quantiles.plan_quantiles`.
        rng: ``None`` for the OS CSPRNG (production); a seeded source only in tests.

    Returns:
        The released grid points with their public accuracy bounds.

    Privacy:
        ``plan.epsilon``-DP under ``plan.relation`` for the contribution bounds in the plan,
        as laid out in the module docstring. Only grid points are released.
    """
    if grid.num_points > plan.num_candidates:
        raise ValueError(
            f"the grid has {grid.num_points} points but the plan was made for at most "
            f"{plan.num_candidates}"
        )
    counts = dense_counts(histogram, grid)
    source = as_random_source(rng)
    chosen: dict[int, int] = {}
    root = _Branch(0, grid.num_slots - 1)
    if plan.split == "independent":
        for node in plan.nodes:
            chosen[node.target] = _select_node(counts, grid, root, node, plan, source)
        chosen = dict(enumerate(sorted(chosen.values())))
    else:
        stack: list[tuple[int, _Branch]] = [(0, root)]
        while stack:
            index, branch = stack.pop()
            node = plan.nodes[index]
            if node.second_target is None:
                picked = _select_node(counts, grid, branch, node, plan, source)
                chosen[node.target] = picked
                left, right = branch.split(picked)
                children = [(node.left, left), (node.right, right)]
            else:
                first, second = _select_pair_node(counts, branch, node, plan, source)
                chosen[node.target], chosen[node.second_target] = first, second
                left, rest = branch.split(first)
                middle, right = rest.split(second)
                children = [(node.left, left), (node.middle, middle), (node.right, right)]
            stack.extend((child, part) for child, part in children if child is not None)
    position = {q: i for i, q in enumerate(plan.distinct)}
    indices = tuple(chosen[position[q]] for q in plan.quantiles)
    return QuantileSelection(
        values=tuple(float(grid.points[i]) for i in indices),
        indices=indices,
        rank_errors=plan.rank_errors(),
        cell_width=max(grid.cell_width(i) for i in indices),
        score_loss=plan.score_loss,
        sensitivity=float(plan.sensitivity),
        epsilon=float(plan.epsilon),
        rounds=plan.rounds,
        num_candidates=grid.num_points,
        secure=source.secure,
    )
