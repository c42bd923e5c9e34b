"""A private mean over a public grid, from an :class:`~beam_dp.summaries.histogram.ExactSum`.

Utilities and privacy
---------------------
``replace`` (``n`` public): :class:`~beam_dp.scores.MeanScore`'s exact integer scores of
``-|T(x) - r|`` (docs/mechanisms.md, "Scores and their sensitivities") with ``T`` the
centred sum over the public ``n``,
``T = mid + sum_i (x_i - mid) / n`` (``mid`` the middle of ``[lower, upper]``, clamped to it),
which is the mean when ``n`` values are kept and is defined whatever the count (so the release
never fails on the data); sensitivity ``k (upper - lower) / n`` (proved in ``MeanScore``).

``add_remove`` (the add/remove mean utility): the mean is the root of
``S(r) = sum_i (x_i - r)``; its utility ``-|S(r)| = -|sum(x) - N r|`` needs no public ``N``:
adding or removing one value ``x`` moves ``S(r)`` by ``x - r``, at most ``upper - lower``
since ``r`` and the clamped ``x`` lie in ``[lower, upper]``. So its sensitivity is
``k (upper - lower)`` under either relation, and its loss ``l`` bounds
``|mean - out| <= (l + OPT) / N``: the same order as the replace mechanism's
``2 k (upper - lower) (ln d + t) / (N epsilon)``. Its integer scores are
``floor(-|S(r)| / unit)`` with ``unit = k (upper - lower) / resolution``
(:func:`_sum_deviation_scores`), which moves every score by less than one step and keeps the
sensitivity exactly ``resolution`` steps (as ``MeanScore`` does); they are capped at
``-(2**62 - 1)`` (a public, 1-Lipschitz floor) so that they fit in int64 for any number of
values.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Unpack

import numpy as np
import numpy.typing as npt

from beam_dp._validation import Relation, check_positive_int, check_probability_open
from beam_dp.mechanisms import Method, as_random_source
from beam_dp.scores import MeanScore
from beam_dp.summaries.histogram import ExactSum, Grid
from beam_dp.summaries.quantiles.parameters import (
    PlanOptions,
    RngLike,
    check_release,
    private_choice,
    selection_loss,
)

__all__ = ["MEAN_RESOLUTION", "MeanPlan", "MeanSelection", "plan_mean", "select_mean"]

#: Integer score steps per sensitivity for the mean scores (as MeanScore's default).
MEAN_RESOLUTION = 2**16

#: Integer mean scores are capped at ``-_STEP_CAP``: a public floor that keeps them in int64
#: whatever the number of values (see :func:`_sum_deviation_scores`).
_STEP_CAP = 2**62 - 1


@dataclass(frozen=True)
class MeanPlan:
    """Parameters of a private mean (fixed before any data is read). See :func:`plan_mean`."""

    grid: Grid
    epsilon: Fraction
    relation: Relation
    n: int | None
    max_contributions: int
    max_partitions: int
    method: Method
    confidence: float
    sensitivity: Fraction
    score_loss: float


def plan_mean(
    grid: Grid,
    *,
    epsilon: float | Fraction,
    n: int | None = None,
    max_partitions: int = 1,
    confidence: float = 0.95,
    **options: Unpack[PlanOptions],
) -> MeanPlan:
    """Validate the parameters of a private mean over ``grid`` (see the module docstring).

    Args:
        n: the public number of values; required with ``relation="replace"`` and refused
            with ``"add_remove"`` (where the number of values is private).
        max_partitions: keys one unit may contribute to (sensitivity times it).
        confidence: the probability with which ``score_loss`` holds.
        **options: ``relation``, ``max_contributions`` and ``method``
            (:class:`~.parameters.PlanOptions`).
    """
    if not isinstance(grid, Grid):
        raise TypeError(f"'grid' must be a Grid; received type {type(grid).__name__}")
    eps, rel, k_values, chosen_method = check_release(epsilon, options, max_partitions)
    check_probability_open(confidence, "confidence")
    width = Fraction(grid.upper) - Fraction(grid.lower)
    k = k_values * int(max_partitions)
    if rel == "replace":
        if n is None:
            raise ValueError(
                "'n' (the public number of values) is required with relation='replace'"
            )
        check_positive_int(n, "n")
        sensitivity = k * width / int(n)
    else:
        if n is not None:
            raise ValueError(
                "'n' is only used with relation='replace'; under 'add_remove' the number of "
                "values is private and the mean uses the utility -|sum(x) - N r| instead"
            )
        sensitivity = k * width
    return MeanPlan(
        grid=grid,
        epsilon=eps,
        relation=rel,
        n=None if n is None else int(n),
        max_contributions=k_values,
        max_partitions=int(max_partitions),
        method=chosen_method,
        confidence=float(confidence),
        sensitivity=sensitivity,
        score_loss=selection_loss(grid.num_points, eps, sensitivity, float(confidence)),
    )


@dataclass(frozen=True)
class MeanSelection:
    """The outcome of :func:`select_mean`."""

    value: float
    index: int
    score_loss: float
    cell_width: float
    sensitivity: float
    epsilon: float
    num_candidates: int
    secure: bool


def _sum_deviation_scores(
    total: Fraction, count: int, grid: Grid, unit: Fraction
) -> npt.NDArray[np.int64]:
    """``max(floor(-|total - count * r| / unit), -_STEP_CAP)`` for every grid point, exactly.

    The cap is public and ``s -> max(s, -cap)`` is 1-Lipschitz, so it keeps the sensitivity of
    the scores; it only matters beyond ``2**46`` values (``2**62`` steps of ``unit``), and it
    makes the scores fit in int64 whatever the data, instead of an error that would depend on
    the (private) number of values.
    """
    points = [Fraction(float(p)) for p in grid.points]
    denominator = max(point.denominator for point in points)  # powers of two
    numerators = np.array(
        [point.numerator * (denominator // point.denominator) for point in points], dtype=object
    )
    # |total - count r| / unit = |t_num D - count t_den r_num| * u_den / (t_den D u_num)
    distance = np.abs(total.numerator * denominator - (count * total.denominator) * numerators)
    numerator = distance * unit.denominator
    divisor = total.denominator * denominator * unit.numerator
    steps = -((-numerator) // divisor)  # ceil
    return np.array([-min(int(step), _STEP_CAP) for step in steps.tolist()], dtype=np.int64)


def select_mean(summary: ExactSum, plan: MeanPlan, *, rng: RngLike = None) -> MeanSelection:
    """The private mean of the summarised values (see :func:`plan_mean`).

    Privacy:
        ``plan.epsilon``-DP under ``plan.relation``: ``replace`` uses
        :class:`~beam_dp.scores.MeanScore` (the centred sum over the public ``n``, which is
        the mean when ``n`` values are kept; sensitivity ``k (upper - lower) / n``),
        ``add_remove`` the utility ``-|sum(x) - N r|`` (sensitivity ``k (upper - lower)``).
        Only a grid point is released. Nothing here depends on the data's count being anything
        in particular: a release never fails because of the data.
    """
    if not isinstance(summary, ExactSum):
        raise TypeError(f"'summary' must be an ExactSum; received {type(summary).__name__}")
    grid = plan.grid
    if (summary.lower, summary.upper) != (grid.lower, grid.upper):
        raise ValueError("the summary's clamping bounds differ from the grid's")
    source = as_random_source(rng)
    if plan.relation == "replace":
        assert plan.n is not None
        score = MeanScore(
            grid=grid.points,
            lower=grid.lower,
            upper=grid.upper,
            n=plan.n,
            max_contributions=plan.max_contributions,
            resolution=MEAN_RESOLUTION,
        )
        scores = score.compute_from_sum(summary.total, summary.count)
        sensitivity: Fraction = score.scaled_sensitivity("replace") * plan.max_partitions
    else:
        width = Fraction(grid.upper) - Fraction(grid.lower)
        unit = plan.max_contributions * width / MEAN_RESOLUTION
        scores = _sum_deviation_scores(summary.total, summary.count, grid, unit)
        sensitivity = Fraction(MEAN_RESOLUTION * plan.max_partitions)
    index = private_choice(scores, plan.epsilon, sensitivity, plan.method, source)
    return MeanSelection(
        value=float(grid.points[index]),
        index=index,
        score_loss=plan.score_loss,
        cell_width=grid.cell_width(index),
        sensitivity=float(plan.sensitivity),
        epsilon=float(plan.epsilon),
        num_candidates=grid.num_points,
        secure=source.secure,
    )
