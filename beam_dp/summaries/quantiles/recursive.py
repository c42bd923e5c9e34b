"""Many quantiles from one histogram: the recursive and joint splits, on cuts of the values.

The split
---------
Select the middle requested quantile on the whole data (or, in the joint split, sometimes two
quantiles at once: :mod:`.joint`); the values below the chosen point form the left branch,
those above it the right branch, and each branch recursively selects its quantiles,
re-normalised to the branch (``alpha' = (alpha - alpha_lo) / (alpha_hi - alpha_lo)``), among
the grid points of its side (so the outputs come out sorted) (Kaplan, Schnapp, Stemmer 2022).

Cuts: where a block of tied values goes
---------------------------------------
The values *equal* to the chosen point ``s`` must be shared between the two branches, and how
they are shared sets the children's targets: the left branch should hold ``alpha N`` values
when ``s`` was chosen for ``alpha``. A fixed share (half each) is off by up
to half the block: on hours worked, where 54% of the rows are 40 and the median is inside that
block, the left branch held 60% of the rows instead of 50%, and its median, released for the
0.25-quantile, sat 4% of the rows (about 1 000 ranks) above the true one in every run. The
right share depends on the data, so it is chosen privately, by the same selection as ``s``.

A *cut* ``(j, t)`` holds every value below grid point ``j`` and ``t / Q`` of the values equal
to it; ``Q`` (``plan.tie_parts``) is public, from the grid size alone. Its position
``C(j, t) = Q #(x < r_j) + t #(x = r_j)`` counts those values in units of ``1 / Q``. A node
with children selects a cut among the ``Q + 1`` cuts of every grid point of its branch
(:meth:`_Branch.cuts`), scored by the distance from its target to the cut, and releases the
cut's grid point; the cut itself is not released, but bounds the branches below it. A node
without children selects a grid point by the distance from its target to the point's rank
range in the branch (:meth:`_Branch.ranks`; 0 when some value equal to the point has the
target rank). A branch is the values between two cuts: the ends' tied values count at the
share of the tie between the cuts.

Privacy (:func:`~.planning.level_budget`)
-----------------------------------------
Given the cuts chosen by the earlier levels, the branches of a level are disjoint ranges of
cuts: every value lies in one branch, except values tied at a cut's grid point, whose shares
over the branches add up to 1. So a value's weights over the branches of a level add up to at
most 1, and one privacy unit's change moves the branches' weighted counts by at most its ``k``
values in total. A value of weight ``w`` moves a cut's position in its branch by ``f w``
(``f`` in ``[0, 1]``: the share of the value below the cut) and the branch's weight ``n`` by
``w``, so ``C - alpha n`` moves by at most ``max(alpha, 1 - alpha) w`` (add/remove); so do both
ends of a rank range, hence the distance to it; with ``n`` fixed (replace) a removal and an
addition move it by at most ``w``. These are the single-quantile sensitivities
(:func:`~.utility.point_sensitivity`; :func:`~.joint.pair_sensitivity` for a pair), so with
each branch calibrated to its own add/remove sensitivity, a whole level costs
``epsilon_level`` (parallel composition, adaptive: each level's mechanisms are chosen given
the earlier levels' outputs, cuts included), and the ``D`` levels cost ``D * epsilon_level =
epsilon``. Under *replace*, the root uses the replace sensitivity at ``epsilon / D``; deeper
levels see up to ``2k`` weighted additions and removals per changed unit (the changed values
may move between branches), so each of their branches runs at ``epsilon / (2D)`` with the
add/remove sensitivity. The same accounting holds in zCDP for the exponential mechanism (each
level is ``epsilon_level``-bounded-range). The release drops the cuts (post-processing).

Independent selections (``split="independent"``) are ``m`` selections on the whole histogram
at ``epsilon / m`` each (basic composition); the outputs are sorted (post-processing). They use
the single-quantile score of :mod:`.utility`, which is tie-aware like the ranges above: minus the
distance from the target to a point's rank range.

Accuracy
--------
In value units (``C / Q``, written ``C`` here): a node at ``alpha_B`` in the branch between
the cuts ``lo`` and ``hi``, whose targets are ``alpha_lo`` and ``alpha_hi`` (0 and 1 at the
global ends), aims at ``C(lo) + alpha_B (C(hi) - C(lo))``, and

    alpha N - C(lo) - alpha_B (C(hi) - C(lo))
        = (1 - alpha_B) (alpha_lo N - C(lo)) + alpha_B (alpha_hi N - C(hi)),

so the distance from ``alpha N`` to its output (a cut, or the point's rank range) is at most
its own selection's distance in the branch plus ``1 - alpha_B`` and ``alpha_B`` times the
errors of the cuts at the branch's ends (0 at the global ends). A selection's own distance is
at most its score loss ``l`` (with probability ``1 - beta``) plus the best its candidates
allow: 0 for a grid point whose rank range holds the target, at most ``1 / (2Q)`` of the
values tied at that point for a cut (for a pair, the best pair's, where the two best distances
can add up), when the values are grid points. A block holds at most ``N`` values, so the
recursion's bound is ``l``'s part, :meth:`QuantilePlan.rank_errors`, plus a public share of
``N``, :meth:`QuantilePlan.rank_error_shares` (``1 / (2Q)`` per cut, ``1 / Q`` per pair of
cuts, weighted alike; see :mod:`.planning`); releases state both (with the share left
out of the number, a 47% tie block exceeded it in every release). ``Q`` grows on small
grids (:func:`~.planning.tie_parts`: 1 024 on 101 points), so the share is small.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from beam_dp.mechanisms import RandomSource, as_random_source
from beam_dp.scores._exact import check_fits_int64
from beam_dp.summaries.histogram import Grid, less_greater
from beam_dp.summaries.quantiles.joint import range_errors, select_on_errors, select_pair
from beam_dp.summaries.quantiles.parameters import (
    HistogramLike,
    RngLike,
    dense_counts,
    private_choice,
)
from beam_dp.summaries.quantiles.utility import QuantileSelection, select_point

if TYPE_CHECKING:
    from beam_dp.summaries.quantiles.planning import QuantileNode, QuantilePlan

__all__ = ["ENVELOPE_GRID", "Cut", "select_quantiles"]

IntArray = npt.NDArray[np.int64]

#: Single nodes on grids of more than this many points draw with
#: :func:`~.joint.select_on_errors`: the exponential mechanism by rejection from a dyadic
#: envelope, a fixed number of rounds whatever the candidates (``docs/timing.md``), where
#: ``plan.method`` (permute-and-flip by default) flips a coin per candidate: 4 million
#: candidates at the root of a 2**21-point grid took seconds. Both are ``epsilon``-DP with
#: the node's sensitivity and within the node's score-loss bound (Dwork-Roth 3.11, the
#: exponential mechanism's, which permute-and-flip's is below); the exponential mechanism is
#: also ``epsilon``-bounded-range (zCDP accounting of ``method="exponential"``).
ENVELOPE_GRID = 1 << 16


@dataclass(frozen=True, order=True)
class Cut:
    """Every value below grid point ``point`` and ``part / Q`` of the values equal to it.

    Cuts are ordered as their positions are: by point, then by part.
    """

    point: int
    part: int


class _Lattice:
    """The position of every cut of one histogram, in units of ``1 / parts`` value.

    Attributes:
        parts: ``Q``.
        below: ``Q #(x < r_j)`` for every grid point ``j``.
        equal: ``#(x = r_j)``.
        total: ``Q N``.
    """

    def __init__(self, counts: IntArray, parts: int) -> None:
        cumulative = np.cumsum(counts)
        check_fits_int64(8 * parts * int(cumulative[-1]), "quantile cut positions")
        self.parts = parts
        self.below: IntArray = cumulative[0:-1:2] * parts
        self.equal: IntArray = counts[1::2].astype(np.int64)
        self.total = int(cumulative[-1]) * parts
        self._cuts: IntArray | None = None

    @property
    def cuts(self) -> IntArray:
        """The position of every cut ``(j, t)`` of the grid, at ``j (Q + 1) + t`` (computed
        once per release: a branch's cuts are a slice of it)."""
        if self._cuts is None:
            steps = np.arange(self.parts + 1, dtype=np.int64)
            self._cuts = (self.below[:, None] + steps * self.equal[:, None]).reshape(-1)
        return self._cuts

    @property
    def num_points(self) -> int:
        return int(self.equal.size)

    def position(self, cut: Cut) -> int:
        return int(self.below[cut.point]) + cut.part * int(self.equal[cut.point])


@dataclass(frozen=True)
class _Branch:
    """The values between two cuts (``None``: the global end)."""

    low: Cut | None = None
    high: Cut | None = None

    def points(self, num_points: int) -> tuple[int, int]:
        """The first and last grid point of the branch (its candidates)."""
        first = 0 if self.low is None else self.low.point
        last = num_points - 1 if self.high is None else self.high.point
        return first, last

    def split(self, cut: Cut) -> tuple[_Branch, _Branch]:
        """The two branches either side of ``cut``.

        Privacy:
            Every value of this branch is in exactly one of them, except the values tied at
            ``cut.point``, which are shared between them (their shares add up to this branch's
            share): a value's weights over the branches of a level add up to at most 1.
        """
        return _Branch(self.low, cut), _Branch(cut, self.high)

    def _ends(self, lattice: _Lattice) -> tuple[int, int]:
        start = 0 if self.low is None else lattice.position(self.low)
        end = lattice.total if self.high is None else lattice.position(self.high)
        return start, end

    def ranks(self, lattice: _Lattice) -> tuple[int, IntArray, IntArray, int]:
        """``(first, low, high, n)``: each grid point's rank range ``[low, high]`` in the branch.

        ``low[i]`` and ``high[i]`` are the branch's weighted values below point ``first + i``
        and below or equal to it, and ``n`` the branch's weight, all in units of ``1 / Q``.
        """
        first, last = self.points(lattice.num_points)
        start, end = self._ends(lattice)
        low: IntArray = lattice.below[first : last + 1] - start
        high: IntArray = low + lattice.equal[first : last + 1] * lattice.parts
        if self.low is not None:
            low[0] = 0
        if self.high is not None:
            high[-1] = end - start
        return first, low, high, end - start

    def cuts(self, lattice: _Lattice) -> tuple[IntArray, IntArray, IntArray, int]:
        """``(points, parts, positions, n)``: every cut in the branch, in order, with its
        position in the branch (units of ``1 / Q``) and the branch's weight ``n``."""
        offset, positions, start, n = self.cut_positions(lattice)
        width = lattice.parts + 1
        first, _ = self.points(lattice.num_points)
        index = np.arange(offset, offset + positions.size, dtype=np.int64)
        points, parts = np.divmod(index, width)
        return points + first, parts, positions - start, n

    def cut_positions(self, lattice: _Lattice) -> tuple[int, IntArray, int, int]:
        """``(offset, positions, start, n)``: the positions of :meth:`cuts` in the whole data
        (a view of :attr:`_Lattice.cuts`; minus ``start`` in the branch); cut ``i`` of the
        branch is part ``(offset + i) % (Q + 1)`` of grid point ``first + (offset + i) //
        (Q + 1)`` (:meth:`cut_at`)."""
        first, last = self.points(lattice.num_points)
        start, end = self._ends(lattice)
        width = lattice.parts + 1
        offset = 0 if self.low is None else self.low.part
        stop = (last + 1) * width if self.high is None else last * width + self.high.part + 1
        return offset, lattice.cuts[first * width + offset : stop], start, end - start

    def cut_at(self, lattice: _Lattice, offset: int, i: int) -> Cut:
        """Cut ``i`` of :meth:`cut_positions`."""
        first, _ = self.points(lattice.num_points)
        point, part = divmod(offset + i, lattice.parts + 1)
        return Cut(first + point, part)


def signed_errors(
    low: IntArray, high: IntArray, n: int, alpha: Fraction, shift: int = 0
) -> tuple[IntArray, int]:
    """The signed distance from ``alpha n`` to every candidate's range ``[low - shift, high -
    shift]`` (0 when it holds it, positive above), as integers times ``common`` (``alpha``'s
    denominator): minus :func:`range_scores` below the target, plus above it; non-decreasing.
    """
    common = alpha.denominator
    check_fits_int64(2 * common * (abs(shift) + max(n, 1)), "quantile scores")
    target = alpha.numerator * n + common * shift
    if low is high:
        return common * low - target, common
    errors: IntArray = np.maximum(common * low - target, 0)
    errors += np.minimum(common * high - target, 0)
    return errors, common


def range_scores(low: IntArray, high: IntArray, n: int, alpha: Fraction) -> tuple[IntArray, int]:
    """``-dist(alpha n, [low, high])`` for every candidate, as integers times ``common``.

    ``common`` is ``alpha``'s denominator. A cut is a range with ``low == high``.
    """
    common = alpha.denominator
    check_fits_int64(2 * common * max(n, 1), "quantile scores")
    target = alpha.numerator * n
    above = np.maximum(common * low - target, 0)
    below = np.maximum(target - common * high, 0)
    return -(above + below), common


def _select_single(
    lattice: _Lattice,
    branch: _Branch,
    node: QuantileNode,
    plan: QuantilePlan,
    source: RandomSource,
) -> tuple[int, Cut | None]:
    """One quantile in ``branch``: its grid point, and its cut when the node has children.

    On grids of more than :data:`ENVELOPE_GRID` points (public), the exponential mechanism
    by :func:`~.joint.select_on_errors` (work of a fixed number of rounds) instead of
    ``plan.method`` over every candidate (work linear in them).
    """
    shift = 0
    if node.cuts:
        offset, positions, shift, n = branch.cut_positions(lattice)
        low = high = positions
    else:
        first, low, high, n = branch.ranks(lattice)
    if plan.num_candidates > ENVELOPE_GRID:
        errors, common = signed_errors(low, high, n, node.alpha, shift)
        rate = node.epsilon / (2 * node.sensitivity * common * lattice.parts)
        i = select_on_errors(errors, rate, source)
    else:
        if node.cuts:
            low = high = positions - shift
        scores, common = range_scores(low, high, n, node.alpha)
        sensitivity = node.sensitivity * common * lattice.parts
        i = private_choice(scores, node.epsilon, sensitivity, plan.method, source)
    if node.cuts:
        cut = branch.cut_at(lattice, offset, i)
        return cut.point, cut
    return first + i, None


def _select_pair_node(
    lattice: _Lattice,
    branch: _Branch,
    node: QuantileNode,
    plan: QuantilePlan,
    source: RandomSource,
) -> tuple[tuple[int, int], tuple[Cut, Cut] | None]:
    """Two quantiles in ``branch`` at once (:mod:`.joint`): their grid points, and their cuts
    when the node has children."""
    assert node.second_alpha is not None
    alphas = (node.alpha, node.second_alpha)
    if node.cuts:
        offset, positions, shift, n = branch.cut_positions(lattice)
        first_scores, second_scores, common = range_errors(positions, None, n, alphas, shift)
    else:
        first, low, high, n = branch.ranks(lattice)
        first_scores, second_scores, common = range_errors(low, high, n, alphas)
    scale = lattice.parts
    rate = node.epsilon / (2 * node.sensitivity * common * scale)
    i, j = select_pair(first_scores, second_scores, rate, source)
    if node.cuts:
        cuts = (branch.cut_at(lattice, offset, i), branch.cut_at(lattice, offset, j))
        return (cuts[0].point, cuts[1].point), cuts
    return (first + i, first + j), None


def _select_independent(
    counts: IntArray, grid: Grid, node: QuantileNode, plan: QuantilePlan, source: RandomSource
) -> int:
    less, greater = less_greater(counts)
    return select_point(
        grid,
        (0, grid.num_points - 1),
        less,
        greater,
        1,
        equal=counts[1::2],
        alpha=node.alpha,
        relation=node.relation,
        epsilon=node.epsilon,
        max_contributions=plan.max_contributions,
        max_partitions=plan.max_partitions,
        method=plan.method,
        source=source,
    )


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
    if plan.split == "independent":
        for node in plan.nodes:
            chosen[node.target] = _select_independent(counts, grid, node, plan, source)
        chosen = dict(enumerate(sorted(chosen.values())))
    else:
        lattice = _Lattice(counts, plan.tie_parts)
        stack: list[tuple[int, _Branch]] = [(0, _Branch())]
        while stack:
            index, branch = stack.pop()
            node = plan.nodes[index]
            children: list[tuple[int | None, _Branch]] = []
            if node.second_target is None:
                chosen[node.target], cut = _select_single(lattice, branch, node, plan, source)
                if cut is not None:
                    left, right = branch.split(cut)
                    children = [(node.left, left), (node.right, right)]
            else:
                picked, cuts = _select_pair_node(lattice, branch, node, plan, source)
                chosen[node.target], chosen[node.second_target] = picked
                if cuts is not None:
                    left, rest = branch.split(cuts[0])
                    middle, right = rest.split(cuts[1])
                    children = [(node.left, left), (node.middle, middle), (node.right, right)]
            stack.extend((child, part) for child, part in children if child is not None)
    position = {q: i for i, q in enumerate(plan.distinct)}
    indices = tuple(chosen[position[q]] for q in plan.quantiles)
    return QuantileSelection(
        values=tuple(float(grid.points[i]) for i in indices),
        indices=indices,
        rank_errors=plan.rank_errors(),
        rank_error_shares=plan.rank_error_shares(),
        cell_width=max(grid.cell_width(i) for i in indices),
        score_loss=plan.score_loss,
        sensitivity=float(plan.sensitivity),
        epsilon=float(plan.epsilon),
        rounds=plan.rounds,
        num_candidates=grid.num_points,
        secure=source.secure,
    )
