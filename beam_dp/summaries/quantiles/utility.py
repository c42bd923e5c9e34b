"""The single-quantile utility: one private grid point for one quantile, and its accuracy.

Utility and sensitivity
-----------------------
Let ``N`` be the number of values and, for a grid point ``r``, ``L = #(x < r)``,
``E = #(x = r)`` and ``G = #(x > r)``; the values equal to ``r`` hold the ranks
``[L, L + E]``. The score of ``r`` for quantile ``alpha`` is minus the distance from
``alpha N`` to those ranks (:class:`~beam_dp.scores.QuantileScore`)::

    u(r) = -max(0, (1-alpha) L - alpha (G + E), alpha G - (1-alpha) (L + E))
         = -dist(alpha N, [L, L + E]),

the classical ``-|(1-alpha) L - alpha G|`` (Smith, STOC 2011) wherever ``E = 0``, and 0 at a
point whose tied values hold the quantile's rank. Its sensitivity is the classical score's,
``max(alpha, 1-alpha) k`` under add/remove and ``k`` under replace, for ``k`` values per privacy
unit (:func:`point_sensitivity`, proof there). Scores are the exact integers of
:class:`~beam_dp.scores.QuantileScore`; no float score is ever sampled from. (The classical
score ignores ``E``: a point inside a block of tied values at the median scored no better than
the empty points beside it, and a 300-value block at the median of 450 values was missed in
every release at epsilon 0.5; this score releases it in every one.)

Accuracy: from score loss to ranks
----------------------------------
A grid point's *rank error* is ``e(r) = dist(alpha N, [L, L + E])``, so **e(r) = |u(r)|**.

The utility guarantee (Dwork-Roth 3.11, also valid for permute-and-flip) gives, with
probability ``1 - beta``, ``|u(out)| <= OPT + l`` with ``l = 2 Delta (ln d + ln(1/beta)) /
epsilon`` and ``OPT = min_r |u(r)|``, the best the grid allows. ``OPT = 0`` when values equal
to a grid point hold the rank ``alpha N`` (a tie block at the quantile); otherwise, if the
alpha-quantile lies in the grid cell ``[r_j, r_{j+1}]`` with ``c`` values strictly inside it,
the distances from ``alpha N`` to the ranks of its two end points add up to ``c``, so one of
them is at most ``c / 2``. So::

    e(out) <= l + OPT,    OPT <= c / 2  (0 on a tie block or when the values are grid points).

``l`` depends only on public parameters and is what releases report as ``rank_error``
(with ``beta = (1 - confidence) / (number of selections)``, a union bound); ``OPT`` is the grid
resolution term, data-dependent and never released: releases report ``cell_width`` (the
wider cell next to each output, the max over outputs) so readers can judge it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from beam_dp._validation import Relation
from beam_dp.mechanisms import Method, RandomSource
from beam_dp.scores import QuantileScore
from beam_dp.summaries.histogram import Grid
from beam_dp.summaries.quantiles.parameters import private_choice

__all__ = ["QuantileSelection", "point_sensitivity", "select_point"]

IntArray = npt.NDArray[np.int64]


def point_sensitivity(alpha: Fraction, relation: Relation, k: Fraction | int) -> Fraction:
    """Sensitivity of ``u`` for quantile ``alpha`` with ``k`` values per privacy unit.

    Privacy:
        ``u = -max(0, L - alpha N, alpha N - (L + E))``, and ``max(0, s, t)`` moves by at most
        the largest move of ``s`` and ``t``. Adding or removing one value moves ``N`` by one
        and one of ``L``, ``E``, ``G`` alike, so ``L - alpha N`` moves by ``1 - alpha`` or
        ``alpha``, and so does ``alpha N - (L + E)``: ``max(alpha, 1 - alpha)`` per value under
        add/remove. Replacing one value (``N`` fixed) moves ``L`` and ``L + E`` by at most one
        each: 1 per value. A unit holds at most ``k`` values, so both scale by ``k``. (The same
        bounds as the tie-blind ``-|(1 - alpha) L - alpha G|``, so no accounting changed.)
    """
    if relation == "replace":
        return Fraction(k)
    return max(alpha, 1 - alpha) * k


@functools.lru_cache(maxsize=2)
def _whole_grid_score(grid: Grid, alpha: Fraction, max_contributions: int) -> QuantileScore:
    """The score over a whole grid, reused across keys and windows (building one for a
    10^6-point grid costs about as much as the selection itself)."""
    return QuantileScore(alpha=alpha, grid=grid.points, max_contributions=max_contributions)


def select_point(
    grid: Grid,
    candidates: tuple[int, int],
    less: IntArray,
    greater: IntArray,
    scale: int,
    *,
    equal: IntArray,
    alpha: Fraction,
    relation: Relation,
    epsilon: Fraction,
    max_contributions: int,
    max_partitions: int,
    method: Method,
    source: RandomSource,
) -> int:
    """One private grid index among ``candidates = (low, high)`` for quantile ``alpha``.

    ``less``, ``equal`` and ``greater`` are ``scale`` times the (weighted) ``L``, ``E`` and
    ``G`` of the candidates ``low..high`` (``equal`` is required: the score sees tie blocks).

    Privacy:
        ``epsilon``-DP under ``relation``: the integer scores are ``b * scale * u`` for
        ``alpha = a/b``, so their sensitivity is :func:`point_sensitivity` scaled alike
        (:meth:`QuantileScore.scaled_sensitivity`), times the partitions one unit reaches.
    """
    low, high = candidates
    if low == 0 and high == grid.num_points - 1:
        score = _whole_grid_score(grid, alpha, max_contributions)
    else:
        score = QuantileScore(
            alpha=alpha, grid=grid.points[low : high + 1], max_contributions=max_contributions
        )
    scores = score.compute_from_counts(less, greater, equal=equal)
    sensitivity = score.scaled_sensitivity(relation) * scale * max_partitions
    return low + private_choice(scores, epsilon, sensitivity, method, source)


@dataclass(frozen=True)
class QuantileSelection:
    """The outcome of a quantile release: released grid points and public accuracy.

    Attributes:
        values: the released points, one per requested quantile (in request order).
        indices: their grid indices.
        rank_errors: per-quantile rank-error bounds (``l`` part; see the module docstring).
        rank_error: the largest of them.
        rank_error_shares: per-quantile share of ``N`` (the values kept) that the tie cuts of
            the recursive and joint splits add to ``rank_errors`` (:mod:`.planning`): the
            bound is ``rank_errors[i] + rank_error_shares[i] * N``; empty: none.
        rank_error_share: the largest of them (0 when empty).
        cell_width: the widest grid cell next to any output.
        score_loss: the largest per-selection score-loss bound (value counts).
        sensitivity: the largest selection sensitivity (value counts, times partitions).
        epsilon: epsilon spent in total.
        rounds: sequential rounds composed.
        num_candidates: grid size.
        secure: whether the randomness came from the OS CSPRNG.
        fine_rank_error: the second pass's alone, for a coarse-to-fine release.
    """

    values: tuple[float, ...]
    indices: tuple[int, ...]
    rank_errors: tuple[float, ...]
    cell_width: float
    score_loss: float
    sensitivity: float
    epsilon: float
    rounds: int
    num_candidates: int
    secure: bool
    fine_rank_error: float | None = field(default=None)
    rank_error_shares: tuple[float, ...] = field(default=())

    @property
    def rank_error(self) -> float:
        return max(self.rank_errors)

    @property
    def rank_error_share(self) -> float:
        return max(self.rank_error_shares, default=0.0)
