"""Coarse-to-fine quantiles: a private cell of a coarse grid, then a fine grid inside it.

A first pass (:func:`select_cells`) chooses, for each quantile, a *cell* of a coarse grid by
its rank distance to the quantile (exact integer scores, the point utility's sensitivity; see
:func:`plan_cells`); :func:`refine_grid` puts a fine grid inside the chosen cells; a second
pass runs the usual plan on it (values outside count in the under/overflow slots, so scores
are still over the whole data). If a quantile's cell holds it, the second pass has the fine
grid's resolution; if not, the cell's nearer end (a fine point) is within the coarse loss of
it. The reported ``rank_error`` is the sum of both passes' ``l`` terms (each pass at half the
failure probability); ``fine_rank_error`` is the second pass's alone (:func:`combine_passes`).

Privacy: the coarse pass is ``m`` selections at ``epsilon_coarse / m`` (basic composition);
the fine grid is a function of public parameters and of the coarse pass's private outputs
(post-processing); the fine pass is an ordinary plan at ``epsilon - epsilon_coarse``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Unpack

import numpy as np
import numpy.typing as npt

from beam_dp._validation import check_positive_int, check_probability_open
from beam_dp.mechanisms import as_random_source
from beam_dp.summaries.histogram import MAX_GRID_POINTS, Grid, less_greater
from beam_dp.summaries.quantiles.parameters import (
    HistogramLike,
    PlanBase,
    PlanOptions,
    RngLike,
    base_fields,
    check_quantile_plan,
    dense_counts,
    private_choice,
    selection_loss,
)
from beam_dp.summaries.quantiles.utility import QuantileSelection, point_sensitivity

__all__ = [
    "DEFAULT_REFINE_FRACTION",
    "CellPlan",
    "CellSelection",
    "cell_scores",
    "combine_passes",
    "plan_cells",
    "refine_grid",
    "select_cells",
]

#: Fraction of epsilon spent by the coarse pass of the coarse-to-fine option.
DEFAULT_REFINE_FRACTION = 0.1

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class CellPlan(PlanBase):
    """The coarse pass of the coarse-to-fine option: one cell per quantile (public).

    Candidates are the ``d - 1`` cells ``[r_j, r_{j+1}]`` of the coarse grid; each distinct
    quantile gets an independent selection at ``epsilon / m``. See :func:`plan_cells`.
    """

    num_cells: int
    sensitivities: tuple[Fraction, ...]
    loss_bounds: tuple[float, ...]

    @property
    def rounds(self) -> int:
        return len(self.distinct)

    def rank_errors(self) -> tuple[float, ...]:
        """Bound on each requested quantile's distance (in ranks) to its chosen cell."""
        position = {q: i for i, q in enumerate(self.distinct)}
        return tuple(self.loss_bounds[position[q]] for q in self.quantiles)


def plan_cells(
    quantiles: Sequence[float | Fraction],
    *,
    epsilon: float | Fraction,
    num_cells: int,
    failure_probability: float = 0.025,
    **options: Unpack[PlanOptions],
) -> CellPlan:
    """Lay out the coarse pass: which cell of a coarse grid holds each quantile.

    The score of cell ``[r_j, r_{j+1}]`` is minus its rank distance to the quantile,
    ``-dist(alpha N, [#(x < r_j), #(x <= r_{j+1})])``: 0 for every cell that holds the
    alpha-quantile, whatever the values inside look like. (The point utility cannot do this:
    when all values fall inside one coarse cell, every grid point has ``|u| = N/2``.)

    Privacy:
        One value added or removed moves both ends of that distance by ``alpha`` or
        ``1 - alpha`` and the distance by at most ``max(alpha, 1 - alpha)``; one value
        replaced (``N`` fixed) by at most 1. So the sensitivity is that of the point utility
        (:func:`~.utility.point_sensitivity`, times ``max_contributions``), and the utility
        guarantee bounds the chosen cell's rank distance by ``l`` directly (``OPT = 0``).

    ``options`` are ``relation``, ``max_contributions`` and ``method``
    (:class:`~.parameters.PlanOptions`).
    """
    base = check_quantile_plan(quantiles, epsilon, options)
    check_positive_int(num_cells, "num_cells")
    check_probability_open(failure_probability, "failure_probability")
    distinct = base.distinct
    per = base.epsilon / len(distinct)
    k = base.max_contributions
    sensitivities = tuple(point_sensitivity(alpha, base.relation, k) for alpha in distinct)
    confidence = 1.0 - float(failure_probability) / len(distinct)
    losses = tuple(selection_loss(num_cells, per, delta, confidence) for delta in sensitivities)
    return CellPlan(
        **base_fields(base),
        num_cells=int(num_cells),
        sensitivities=sensitivities,
        loss_bounds=losses,
    )


@dataclass(frozen=True)
class CellSelection:
    """The outcome of :func:`select_cells`: a coarse cell per requested quantile (public)."""

    cells: tuple[int, ...]
    rank_errors: tuple[float, ...]
    epsilon: float
    rounds: int
    secure: bool


def cell_scores(counts: npt.ArrayLike, alpha: Fraction) -> tuple[IntArray, Fraction]:
    """Exact integer cell scores ``-b * dist(alpha N, [L_j, C_{j+1}])`` for ``alpha = a/b``.

    ``counts`` are the ``2d + 1`` slot counts; ``L_j = #(x < r_j)``, ``C_j = #(x <= r_j)``.
    Returns the ``d - 1`` scores and the real value of one integer step (``1 / b``).
    """
    array = np.asarray(counts, dtype=np.int64)
    less, greater = less_greater(array)
    total = int(array.sum())
    a, b = alpha.numerator, alpha.denominator
    if b * max(total, 1) >= 2**62:
        raise ValueError("cell scores would exceed the int64 range of exact scores")
    at_most_next = total - greater[1:]
    below = b * less[:-1] - a * total
    above = a * total - b * at_most_next
    distance = np.maximum(0, np.maximum(below, above))
    scores: IntArray = -distance
    return scores, Fraction(1, b)


def select_cells(
    histogram: HistogramLike, grid: Grid, plan: CellPlan, *, rng: RngLike = None
) -> CellSelection:
    """Run the coarse pass: for each quantile, a private choice of coarse cell.

    Privacy:
        ``plan.epsilon``-DP under ``plan.relation`` (``m`` selections at ``epsilon / m``).
    """
    if grid.num_points - 1 != plan.num_cells:
        raise ValueError(
            f"the grid has {grid.num_points - 1} cells; the plan was made for {plan.num_cells}"
        )
    counts = dense_counts(histogram, grid)
    source = as_random_source(rng)
    per = plan.epsilon / len(plan.distinct)
    chosen = {}
    for alpha, delta in zip(plan.distinct, plan.sensitivities, strict=True):
        scores, unit = cell_scores(counts, alpha)
        chosen[alpha] = private_choice(scores, per, delta / unit, plan.method, source)
    return CellSelection(
        cells=tuple(chosen[q] for q in plan.quantiles),
        rank_errors=plan.rank_errors(),
        epsilon=float(plan.epsilon),
        rounds=plan.rounds,
        secure=source.secure,
    )


def refine_grid(grid: Grid, cells: Sequence[int], points_per_cell: int) -> Grid:
    """The fine grid of the coarse-to-fine option: ``points_per_cell`` points in each cell.

    Cell ``j`` is ``[points[j], points[j+1]]``; its points are log-spaced on a log grid and
    evenly spaced otherwise, both ends included. The union is sorted; the clamping bounds stay
    those of ``grid``. Public: a function of public parameters and of the coarse cells (which
    are already private outputs).
    """
    check_positive_int(points_per_cell, "refine_points")
    if points_per_cell < 2:
        raise ValueError(f"'refine_points' must be >= 2; received {points_per_cell}")
    p = grid.points
    pieces = []
    for j in sorted(set(int(i) for i in cells)):
        if not 0 <= j < p.size - 1:
            raise ValueError(f"cell {j} is outside the grid's {p.size - 1} cells")
        a, b = float(p[j]), float(p[j + 1])
        if grid.kind == "log":
            piece = np.geomspace(a, b, points_per_cell)
        else:
            piece = np.linspace(a, b, points_per_cell)
        piece[0], piece[-1] = a, b
        pieces.append(piece)
    points = np.unique(np.concatenate(pieces))
    if points.size > MAX_GRID_POINTS:
        raise ValueError(
            f"the refined grid would have {points.size} points (more than {MAX_GRID_POINTS:,}); "
            "lower 'refine_points'"
        )
    return Grid.explicit(points, grid.lower, grid.upper)


def combine_passes(coarse: CellSelection, fine: QuantileSelection) -> QuantileSelection:
    """The accuracy of a coarse-to-fine release: the fine outputs, both passes' losses.

    If a quantile's coarse cell holds it, the fine pass alone bounds its rank error
    (``fine_rank_error``); otherwise the quantile is within the cell's rank distance of the
    cell's nearer end, a fine grid point, which adds the coarse loss: ``rank_error`` is the sum.
    """
    return QuantileSelection(
        values=fine.values,
        indices=fine.indices,
        rank_errors=tuple(a + b for a, b in zip(coarse.rank_errors, fine.rank_errors, strict=True)),
        cell_width=fine.cell_width,
        score_loss=fine.score_loss,
        sensitivity=fine.sensitivity,
        epsilon=coarse.epsilon + fine.epsilon,
        rounds=fine.rounds,
        num_candidates=fine.num_candidates,
        secure=coarse.secure and fine.secure,
        fine_rank_error=fine.rank_error,
        rank_error_shares=fine.rank_error_shares,
    )
