"""A private mean from an :class:`~beam_dp.summaries.histogram.ExactSum`: noisy sums (default)
or a selection over a public grid.

Noisy sums (``estimator="noisy_sums"``, the default)
----------------------------------------------------
Values are clamped to ``[lower, upper]`` (NaN and infinities dropped) and centred at
``mid = (lower + upper) / 2``; the exact centred sum ``S = sum_i (x_i - mid)`` is read in the
public integer unit ``step = (upper - lower) / MEAN_SUM_STEPS`` and rounded once, to the
nearest integer ``s = floor(S / step + 1/2)``. The release is exact discrete Laplace noise
on ``s`` (and on the count ``N`` under ``add_remove``), then post-processing:

* ``add_remove``: ``s + Z_s`` at ``sum_share`` of epsilon and ``N + Z_c`` at the rest; the
  mean is ``mid + step (s + Z_s) / (N + Z_c)`` clamped to ``[lower, upper]`` (``mid`` when
  the noisy count is below 1). Sensitivities: one unit adds or removes at most ``k`` values
  (``k = max_contributions * max_partitions``), each moving ``S`` by at most
  ``(upper - lower) / 2``, so ``S / step`` by at most ``k MEAN_SUM_STEPS / 2`` (an integer),
  and rounding keeps that bound (``|floor(a) - floor(b)| <= D`` when ``|a - b| <= D`` and
  ``D`` is an integer); ``N`` moves by at most ``k``.
* ``replace`` (``n`` public): ``mid + step (s + Z_s) / n`` clamped, the whole epsilon on
  the sum and no count (the public ``n`` is the denominator whatever is kept). One unit's
  ``p <= k`` values become ``q <= k`` others: ``S`` moves by at most
  ``(p + q) (upper - lower) / 2 <= k (upper - lower)``, so ``k MEAN_SUM_STEPS`` steps.

Why not the selection below: discrete Laplace is the exponential mechanism over the public
candidates ℤ with score ``-|c - s|``, whose normaliser does not depend on the data (a shift
of ℤ; proof in :mod:`beam_dp.mechanisms.noise`), so it runs at the full epsilon; the
selection over a bounded grid pays the exponential mechanism's factor 2 for its
data-dependent normaliser. Measured on real panels: see ``benchmarks/RESULTS.md``.

Accuracy (stated in :func:`beam_dp.release.mean_statement`): with ``|Z_s| <= T_s`` and
``|Z_c| <= T_c`` (each with probability ``sqrt(confidence)``, independent), the released
mean ``out`` satisfies ``|out - mean| <= ((T_s + 1/2) step + (upper - lower) T_c / 2) /
(N - T_c)`` when ``N > T_c``, because ``out - mean = (step (r + Z_s) - c Z_c) / (N + Z_c)``
with ``|r| <= 1/2`` the rounding, ``c = mean - mid`` and ``|c| <= (upper - lower) / 2``; the
final clamp only moves ``out`` towards ``[lower, upper]``, which holds the mean. Under
``replace``: ``|out - T| <= (T_s + 1/2) step / n`` with ``T`` the centred sum's mean over
the public ``n`` (the mean when ``n`` values are kept), ``T_s`` at ``confidence``.

The selection (``estimator="selection"``)
-----------------------------------------
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

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, Unpack

import numpy as np
import numpy.typing as npt

from beam_dp._validation import Relation, check_positive_int, check_probability_open
from beam_dp.mechanisms import Method, as_random_source
from beam_dp.mechanisms.noise import discrete_laplace_tail, noisy_sum_and_count
from beam_dp.scores import MeanScore
from beam_dp.summaries.histogram import ExactSum, Grid
from beam_dp.summaries.quantiles.parameters import (
    PlanOptions,
    RngLike,
    check_release,
    private_choice,
    selection_loss,
)

__all__ = [
    "DEFAULT_MEAN_ESTIMATOR",
    "DEFAULT_SUM_SHARE",
    "MEAN_ESTIMATORS",
    "MEAN_RESOLUTION",
    "MEAN_SUM_STEPS",
    "MeanEstimator",
    "MeanPlan",
    "MeanSelection",
    "NoisyMean",
    "plan_mean",
    "release_mean",
    "release_noisy_mean",
    "select_mean",
]

#: How the mean is released: noisy sums (default) or a selection over the grid.
MeanEstimator = Literal["noisy_sums", "selection"]
MEAN_ESTIMATORS: tuple[MeanEstimator, ...] = ("noisy_sums", "selection")
DEFAULT_MEAN_ESTIMATOR: MeanEstimator = "noisy_sums"
#: The public integer unit of the noisy sums: ``(upper - lower) / MEAN_SUM_STEPS`` (even, so
#: that a centred value's steps ``<= MEAN_SUM_STEPS / 2`` are an integer bound).
MEAN_SUM_STEPS = 2**20
#: The sum's share of epsilon under ``add_remove`` (the count gets the rest), chosen by
#: measurement on six real panel columns at epsilon 0.5/1/2 and their true row bounds: the
#: median error at 0.6 was 0.94 of half/half's (geometric mean; 0.7: 0.96, 0.8: 1.13), best
#: where the mean lies far from the middle of the bounds, where the count's noise weighs
#: most (benchmarks/RESULTS.md, "Real panels").
DEFAULT_SUM_SHARE = Fraction(3, 5)

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
    estimator: MeanEstimator = "selection"
    sum_share: Fraction = Fraction(1)
    step: Fraction = Fraction(0)
    sum_sensitivity: int = 0
    count_sensitivity: int = 0
    sum_bound: int = 0
    count_bound: int = 0


def _check_estimator(estimator: object) -> MeanEstimator:
    if estimator not in MEAN_ESTIMATORS:
        raise ValueError(
            f"'estimator' must be one of {list(MEAN_ESTIMATORS)}; received {estimator!r}"
        )
    return estimator


def _check_sum_share(sum_share: object, relation: Relation) -> Fraction:
    if relation == "replace":
        if sum_share is not None:
            raise ValueError(
                "'sum_share' applies only with relation='add_remove': with the public n no "
                "count is released and the whole epsilon goes to the sum"
            )
        return Fraction(1)
    if sum_share is None:
        return DEFAULT_SUM_SHARE
    check_probability_open(sum_share, "sum_share")
    if isinstance(sum_share, Fraction):
        return sum_share
    return Fraction(repr(float(sum_share)))  # type: ignore[arg-type]


def _noisy_sums_plan(
    grid: Grid,
    eps: Fraction,
    rel: Relation,
    n: int | None,
    k_values: int,
    max_partitions: int,
    method: Method,
    confidence: float,
    sum_share: object,
) -> MeanPlan:
    """The plan of the noisy-sums mean (the module docstring): scales and stated bounds."""
    share = _check_sum_share(sum_share, rel)
    width = Fraction(grid.upper) - Fraction(grid.lower)
    k = k_values * int(max_partitions)
    if rel == "replace":
        assert n is not None  # checked by plan_mean
        sum_sensitivity, count_sensitivity = k * MEAN_SUM_STEPS, 0
        sum_bound = discrete_laplace_tail(Fraction(sum_sensitivity) / eps, confidence)
        count_bound = 0
        sensitivity = k * width / int(n)  # of the mean over the public n (as the selection's)
    else:
        sum_sensitivity, count_sensitivity = k * MEAN_SUM_STEPS // 2, k
        each = math.sqrt(confidence)  # independent draws: the product of both is confidence
        sum_bound = discrete_laplace_tail(Fraction(sum_sensitivity) / (share * eps), each)
        count_bound = discrete_laplace_tail(Fraction(count_sensitivity) / ((1 - share) * eps), each)
        sensitivity = k * width / 2
    step = width / MEAN_SUM_STEPS
    return MeanPlan(
        grid=grid,
        epsilon=eps,
        relation=rel,
        n=None if n is None else int(n),
        max_contributions=k_values,
        max_partitions=int(max_partitions),
        method=method,
        confidence=float(confidence),
        sensitivity=sensitivity,
        score_loss=float(sum_bound * step),
        estimator="noisy_sums",
        sum_share=share,
        step=step,
        sum_sensitivity=sum_sensitivity,
        count_sensitivity=count_sensitivity,
        sum_bound=sum_bound,
        count_bound=count_bound,
    )


def plan_mean(
    grid: Grid,
    *,
    epsilon: float | Fraction,
    n: int | None = None,
    max_partitions: int = 1,
    confidence: float = 0.95,
    estimator: MeanEstimator = DEFAULT_MEAN_ESTIMATOR,
    sum_share: float | Fraction | None = None,
    **options: Unpack[PlanOptions],
) -> MeanPlan:
    """Validate the parameters of a private mean over ``grid`` (see the module docstring).

    Args:
        n: the public number of values; required with ``relation="replace"`` and refused
            with ``"add_remove"`` (where the number of values is private).
        max_partitions: keys one unit may contribute to (sensitivity times it).
        confidence: the probability with which ``score_loss`` holds.
        estimator: ``"noisy_sums"`` (default: noisy centred sum and count, exact discrete
            Laplace; the grid is unused) or ``"selection"`` (a grid point by the
            exponential mechanism or permute-and-flip, ``method``).
        sum_share: the sum's share of epsilon under ``add_remove`` with ``"noisy_sums"``
            (default :data:`DEFAULT_SUM_SHARE`); refused under ``replace`` (no count).
        **options: ``relation``, ``max_contributions`` and ``method``
            (:class:`~.parameters.PlanOptions`).
    """
    if not isinstance(grid, Grid):
        raise TypeError(f"'grid' must be a Grid; received type {type(grid).__name__}")
    eps, rel, k_values, chosen_method = check_release(epsilon, options, max_partitions)
    check_probability_open(confidence, "confidence")
    chosen_estimator = _check_estimator(estimator)
    if chosen_estimator == "selection" and sum_share is not None:
        raise ValueError("'sum_share' applies only with estimator='noisy_sums'")
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
    if chosen_estimator == "noisy_sums":
        return _noisy_sums_plan(
            grid, eps, rel, n, k_values, max_partitions, chosen_method, confidence, sum_share
        )
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
    if plan.estimator != "selection":
        raise ValueError("select_mean needs a plan with estimator='selection'")
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


@dataclass(frozen=True)
class NoisyMean:
    """The outcome of :func:`release_noisy_mean` (public: the release and its parameters).

    ``num_candidates`` is 1 (no candidate set is searched); ``sensitivity`` is the centred
    sum's, in value units.
    """

    value: float
    sensitivity: float
    epsilon: float
    secure: bool
    num_candidates: int = 1


def _centred_steps(summary: ExactSum, step: Fraction) -> int:
    """``floor(S / step + 1/2)`` with ``S`` the exact centred sum of the clamped values."""
    middle = (Fraction(summary.lower) + Fraction(summary.upper)) / 2
    ratio = (summary.total - summary.count * middle) / step
    return (2 * ratio.numerator + ratio.denominator) // (2 * ratio.denominator)


def release_noisy_mean(summary: ExactSum, plan: MeanPlan, *, rng: RngLike = None) -> NoisyMean:
    """The private mean by noisy sums (the module docstring), clamped to ``[lower, upper]``.

    Privacy:
        ``plan.epsilon``-DP under ``plan.relation``: one call of
        :func:`~beam_dp.mechanisms.noise.noisy_sum_and_count` on the integer centred sum
        (sensitivity ``plan.sum_sensitivity`` steps) and, under ``add_remove``, the count
        (``plan.count_sensitivity``); the rest is post-processing. The count is never
        released on its own and never compared with anything public.
    """
    if not isinstance(summary, ExactSum):
        raise TypeError(f"'summary' must be an ExactSum; received {type(summary).__name__}")
    if plan.estimator != "noisy_sums":
        raise ValueError("release_noisy_mean needs a plan with estimator='noisy_sums'")
    grid = plan.grid
    if (summary.lower, summary.upper) != (grid.lower, grid.upper):
        raise ValueError("the summary's clamping bounds differ from the grid's")
    source = as_random_source(rng)
    lower, upper = Fraction(grid.lower), Fraction(grid.upper)
    middle = (lower + upper) / 2
    count = None if plan.relation == "replace" else summary.count
    noisy_sum, noisy_count = noisy_sum_and_count(
        _centred_steps(summary, plan.step),
        count,
        epsilon=plan.epsilon,
        sum_share=plan.sum_share,
        sum_sensitivity=plan.sum_sensitivity,
        count_sensitivity=max(plan.count_sensitivity, 1),
        rng=source,
    )
    denominator = plan.n if noisy_count is None else noisy_count
    assert denominator is not None
    mean = middle if denominator < 1 else middle + plan.step * noisy_sum / denominator
    return NoisyMean(
        value=float(min(max(mean, lower), upper)),
        sensitivity=float(plan.sensitivity),
        epsilon=float(plan.epsilon),
        secure=source.secure,
    )


def release_mean(
    summary: ExactSum, plan: MeanPlan, *, rng: RngLike = None
) -> MeanSelection | NoisyMean:
    """The private mean by the plan's estimator (:func:`release_noisy_mean` or
    :func:`select_mean`)."""
    if plan.estimator == "noisy_sums":
        return release_noisy_mean(summary, plan, rng=rng)
    return select_mean(summary, plan, rng=rng)
