"""Sampling error apart: a private interval for the *population* quantile (optional field).

:mod:`.intervals` bounds the error the mechanism adds: its interval holds the data's own
alpha-quantile. When the ``N`` values are an i.i.d. sample of a population (of bounded values:
the clamping applies to the population too), the population quantile
``xi = inf{x : F(x) >= alpha}`` differs from the data's by sampling error. This module releases
``[lo, hi]`` that holds ``xi`` with probability at least ``confidence`` over the sample *and*
the mechanism, for every requested quantile at once. Pure: numpy and the exact samplers (the
binomial law used is of public parameters only).

Both errors at once
-------------------
As in :mod:`.intervals`, each end is one exact selection among the grid's points by the
distance from a target rank ``T`` to the candidate's rank range (:func:`~.intervals.
end_candidates`, :func:`~.intervals.target_scores`). Let ``M = #(X <= xi)``: a binomial count
with success probability ``F(xi) >= alpha``, so ``M`` is stochastically at least
``B ~ Bin(N, alpha)``. If the lower end is above ``xi``, every value up to ``xi`` is below it:
its rank range starts at ``#(X < lo) >= M``, at least ``M - T`` from the target; the chosen
end has such a range with probability at most ``w exp(-epsilon_e (M - T) / (2 Delta))``
(``w = c (n - 1)``: the bound of :func:`~.intervals.rank_shift`). So, with ``g(x) =
min(1, w exp(-epsilon_e x / (2 Delta)))`` non-increasing,

    P(lo > xi) <= E[g(M - T)] <= E[g(B - T)] = sum_m P(B = m) g(m - T),

and :func:`population_targets` takes ``T_lo(N)``, the largest integer for which the sum is at
most the end's share ``beta_e`` of ``1 - confidence``: the sampling and the privacy error are
paid once, together (Drechsler et al.'s "simultaneous" idea, here with the exact mechanism's
tail). The upper end mirrors it with ``M' = #(X < xi)``, stochastically at most ``B``: the
smallest ``T_hi(N)`` with ``sum_m P(B = m) g(T_hi - m) <= beta_e``.

``T_lo(N)`` grows by 0 or 1 when ``N`` grows by one (``B`` gains at most one success), and so
does ``T_hi(N)``; hence ``w_lo(N) = alpha N - T_lo(N)`` and ``w_hi(N) = T_hi(N) - alpha N``
move by at most ``max(alpha, 1 - alpha)`` per value.

* **replace**: ``N`` is public: the targets are ``T_lo(N)`` and ``T_hi(N)``, public
  constants, and a changed unit moves the ranks by at most ``k``: ``Delta = k``.
* **add/remove**: a share of epsilon releases a noisy count ``n = max(N + Z, 0)``, ``Z`` exact
  discrete Laplace of scale ``k / epsilon_n``
  (:func:`~beam_dp.mechanisms.partition_selection.discrete_laplace`), within
  ``e_n = ceil(scale ln(2 / beta_n))`` of ``N`` with probability ``1 - beta_n``. The targets
  are ``alpha N - w_lo(n) - r`` and ``alpha N + w_hi(n) + r`` with ``r = ceil(max(alpha,
  1 - alpha) e_n)``: on the count's event they are at most ``T_lo(N)`` and at least
  ``T_hi(N)``, so the bound above holds for them. They depend on the data through ``alpha N``
  only (the rest is public once the count is): ``Delta = max(alpha, 1 - alpha) k``, as for the
  randomization interval.

Both sensitivities are multiplied by ``max_partitions`` (and ``k`` includes it in the count's).

Privacy
-------
Add/remove: the count (``epsilon_n``-DP) and ``2 m`` end selections at ``(epsilon - epsilon_n)
/ (2 m)`` each, chosen given the count (adaptive basic composition): ``epsilon`` in total.
Replace: ``2 m`` selections at ``epsilon / (2 m)``. The tightening across quantiles and the
union with the released values are post-processing (:mod:`.intervals`). The count is not
released.

Coverage
--------
**Claim.** With probability at least ``confidence`` over the sample and the mechanism, every
interval holds its population quantile. **Proof.** ``1 - confidence`` is split evenly over the
``2 m`` ends and, under add/remove, the count. Each end fails with probability at most its
share (above; under add/remove on the count's event, whose failure is the count's share); a
union bound gives the claim, and post-processing keeps it (:mod:`.intervals`).

The sample is assumed i.i.d. in the values (rows). Contribution bounding keeps a uniform sample
of each unit's rows; units with several rows make the rows dependent, which this does not model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Unpack

import numpy as np
import numpy.typing as npt

from beam_dp._rational import positive_fraction
from beam_dp._validation import Relation, check_probability_open
from beam_dp.mechanisms import Method, as_random_source
from beam_dp.mechanisms.partition_selection import discrete_laplace
from beam_dp.summaries.histogram import Grid
from beam_dp.summaries.quantiles import QuantilePlan
from beam_dp.summaries.quantiles.intervals import (
    IntervalRelease,
    Side,
    assemble_intervals,
    count_candidates,
    end_candidates,
    endpoint_sensitivity,
    released_values,
    target_scores,
)
from beam_dp.summaries.quantiles.parameters import (
    HistogramLike,
    PlanOptions,
    RngLike,
    check_quantile_plan,
    dense_counts,
    private_choice,
)

__all__ = [
    "DEFAULT_COUNT_FRACTION",
    "POPULATION_METHOD",
    "PopulationPlan",
    "plan_population_intervals",
    "population_intervals_for_plan",
    "population_targets",
    "select_population_intervals",
]

#: The name releases record for the method.
POPULATION_METHOD = "population_rank_bracket"

#: The share of the interval's epsilon spent on the noisy count under add/remove (the count's
#: error reaches each side at ``max(alpha, 1 - alpha)`` per value; the ends' margins grow as
#: ``1 / epsilon``: about a fifth balances the two for a few quantiles).
DEFAULT_COUNT_FRACTION = Fraction(1, 5)


def _binomial_pmf(first: int, last: int, n: int, p: float) -> npt.NDArray[np.float64]:
    """``P(Bin(n, p) = m)`` for ``m = first..last``, by the ratio of consecutive terms (numpy
    only: the package does not depend on scipy), scaled to sum to 1 over the window. The window
    of :func:`population_targets` leaves out less than ``1e-30`` of the mass, while log-gamma
    at ``n = 10**9`` is good to about ``1e-6``: the scaling keeps the larger error out."""
    start = (
        math.lgamma(n + 1)
        - math.lgamma(first + 1)
        - math.lgamma(n - first + 1)
        + first * math.log(p)
        + (n - first) * math.log1p(-p)
    )
    m = np.arange(first, last, dtype=np.float64)
    steps = np.log((n - m) / (m + 1)) + (math.log(p) - math.log1p(-p))
    logs = start + np.concatenate([[0.0], np.cumsum(steps)])
    pmf: npt.NDArray[np.float64] = np.exp(logs - logs.max())
    scaled: npt.NDArray[np.float64] = pmf / pmf.sum()
    return scaled


def _failure(
    pmf: npt.NDArray[np.float64],
    ranks: npt.NDArray[np.int64],
    target: int,
    weight: float,
    rate: float,
    side: Side,
) -> float:
    """``sum_m P(B = m) g(gap)`` over the bulk."""
    gaps = ranks - target if side == "lower" else target - ranks
    tail = np.minimum(1.0, weight * np.exp(-rate * np.maximum(gaps, 0)))
    tail[gaps <= 0] = 1.0
    return float((pmf * tail).sum())


def population_targets(
    n: int,
    alpha: Fraction,
    *,
    epsilon: Fraction,
    sensitivity: Fraction,
    num_candidates: int,
    method: Method,
    failure_probability: float,
) -> tuple[int, int]:
    """``(T_lo(n), T_hi(n))``: the ends' target ranks for a sample of ``n`` (module docstring).

    ``T_lo`` is the largest integer with ``sum_m P(B = m) g(m - T) <= beta`` and ``T_hi`` the
    smallest with ``sum_m P(B = m) g(T - m) <= beta``, ``B ~ Bin(n, alpha)``; both are found by
    bisection (the sums are monotone in ``T``) over the binomial's bulk, 12 standard deviations
    and 50 either side of the mean (the rest of the mass, below ``1e-30``, is left out).
    """
    n = max(int(n), 0)
    weight = (max(int(num_candidates) - 1, 1)) * (0.5 if method == "permute_and_flip" else 1.0)
    rate = float(epsilon) / (2.0 * float(sensitivity))
    p = float(alpha)
    spread = 12.0 * math.sqrt(n * p * (1 - p)) + 50.0
    first = max(0, math.floor(p * n - spread))
    last = min(n, math.ceil(p * n + spread))
    ranks = np.arange(first, last + 1, dtype=np.int64)
    pmf = _binomial_pmf(first, last, n, p)
    beta = float(failure_probability)
    # Lower: the largest T with failure <= beta; T = first - 1 - (a bound) always qualifies.
    margin = math.ceil(math.log(weight / beta) / rate) + 1
    low, high = first - margin, last
    while low < high:
        middle = (low + high + 1) // 2
        if _failure(pmf, ranks, middle, weight, rate, "lower") <= beta:
            low = middle
        else:
            high = middle - 1
    lower = low
    low, high = first, last + margin
    while low < high:
        middle = (low + high) // 2
        if _failure(pmf, ranks, middle, weight, rate, "upper") <= beta:
            high = middle
        else:
            low = middle + 1
    return lower, low


@dataclass(frozen=True)
class PopulationPlan:
    """Everything about the population intervals fixed before any data is read (public).

    Attributes:
        quantiles, distinct, epsilon, confidence, relation, method, max_contributions,
            max_partitions, num_candidates, selection_epsilon, sensitivities: as in
            :class:`~.intervals.IntervalPlan`.
        shifts: None for each distinct quantile: an end's reach beyond the quantile depends
            on the data's size here (module docstring).
        count_epsilon: epsilon of the noisy count (add/remove), or None (replace).
        count_scale: the count's discrete Laplace scale, or None.
        count_error: ``e_n``, the count's error bound at its share of the failure
            probability, or None.
        end_failure: ``beta_e``, each end's share of the failure probability (sampling and
            privacy together).
    """

    quantiles: tuple[Fraction, ...]
    distinct: tuple[Fraction, ...]
    epsilon: Fraction
    confidence: float
    relation: Relation
    method: Method
    max_contributions: int
    max_partitions: int
    num_candidates: int
    selection_epsilon: Fraction
    sensitivities: tuple[Fraction, ...]
    shifts: tuple[None, ...]
    count_epsilon: Fraction | None
    count_scale: Fraction | None
    count_error: int | None
    end_failure: float

    @property
    def rounds(self) -> int:
        """Selections composed: two per distinct quantile, and the count under add/remove."""
        return 2 * len(self.distinct) + (self.count_epsilon is not None)


def plan_population_intervals(
    quantiles: Sequence[float | Fraction],
    *,
    grid: Grid,
    epsilon: float | Fraction,
    confidence: float = 0.95,
    count_fraction: float | Fraction = DEFAULT_COUNT_FRACTION,
    max_partitions: int = 1,
    **options: Unpack[PlanOptions],
) -> PopulationPlan:
    """Validate the parameters of the population intervals (nothing here reads data).

    Args:
        quantiles: the quantiles of the release (each strictly between 0 and 1).
        grid: the public grid of the release's histogram.
        epsilon: the share (> 0, finite) spent by all the population intervals together.
        confidence: the probability that every interval holds its population quantile.
        count_fraction: the share of ``epsilon`` for the noisy count (add/remove only).
        max_partitions: keys one unit may reach.
        **options: ``relation``, ``max_contributions`` and ``method``.

    Raises:
        ValueError / TypeError: naming the bad parameter. Nothing here reads data.
    """
    if not isinstance(grid, Grid):
        raise TypeError(f"'grid' must be a Grid; received type {type(grid).__name__}")
    base = check_quantile_plan(quantiles, epsilon, options, max_partitions)
    check_probability_open(confidence, "confidence")
    check_probability_open(count_fraction, "count_fraction")
    m = len(base.distinct)
    failure = 1.0 - float(confidence)
    counted = base.relation == "add_remove"
    beta = failure / (2 * m + int(counted))
    k = base.max_contributions * int(max_partitions)
    count_epsilon = count_scale = None
    count_error = None
    ends_epsilon = base.epsilon
    if counted:
        count_epsilon = base.epsilon * positive_fraction(count_fraction, "count_fraction")
        ends_epsilon = base.epsilon - count_epsilon
        count_scale = Fraction(k) / count_epsilon
        count_error = math.ceil(float(count_scale) * math.log(2.0 / beta) * (1 + 1e-12))
    per = ends_epsilon / (2 * m)
    candidates = count_candidates(grid)
    sensitivities = tuple(endpoint_sensitivity(a, base.relation, k) for a in base.distinct)
    return PopulationPlan(
        quantiles=base.quantiles,
        distinct=base.distinct,
        epsilon=base.epsilon,
        confidence=float(confidence),
        relation=base.relation,
        method=base.method,
        max_contributions=base.max_contributions,
        max_partitions=int(max_partitions),
        num_candidates=candidates,
        selection_epsilon=per,
        sensitivities=sensitivities,
        shifts=(None,) * m,
        count_epsilon=count_epsilon,
        count_scale=count_scale,
        count_error=count_error,
        end_failure=beta,
    )


def population_intervals_for_plan(
    plan: QuantilePlan, grid: Grid, *, epsilon: float | Fraction, confidence: float = 0.95
) -> PopulationPlan:
    """The population intervals of a quantile plan's release (its quantiles, relation, bounds
    and method); ``epsilon`` is their own share."""
    if not isinstance(plan, QuantilePlan):
        raise TypeError(f"'plan' must be a QuantilePlan; received type {type(plan).__name__}")
    return plan_population_intervals(
        plan.quantiles,
        grid=grid,
        epsilon=epsilon,
        confidence=confidence,
        max_partitions=plan.max_partitions,
        relation=plan.relation,
        max_contributions=plan.max_contributions,
        method=plan.method,
    )


def _targets(
    plan: PopulationPlan, alpha: Fraction, delta: Fraction, total: int, noisy: int | None
) -> tuple[int, int, int]:
    """``(lower target, upper target, common)``, ranks times ``common`` (module docstring)."""
    n = total if noisy is None else max(noisy, 0)
    low, high = population_targets(
        n,
        alpha,
        epsilon=plan.selection_epsilon,
        sensitivity=delta,
        num_candidates=plan.num_candidates,
        method=plan.method,
        failure_probability=plan.end_failure,
    )
    if noisy is None:  # replace: N is public
        return low, high, 1
    assert plan.count_error is not None
    a, b = alpha.numerator, alpha.denominator
    reach = math.ceil(max(alpha, 1 - alpha) * plan.count_error)
    # alpha N - w_lo(n) - r, with w_lo(n) = alpha n - T_lo(n); and the upper mirror; times b.
    lower = a * total - (a * n - b * low) - b * reach
    upper = a * total + (b * high - a * n) + b * reach
    return lower, upper, b


def select_population_intervals(
    histogram: HistogramLike,
    grid: Grid,
    plan: PopulationPlan,
    values: Sequence[float] | None,
    *,
    rng: RngLike = None,
) -> IntervalRelease:
    """The private population intervals of a quantile release (request order).

    Privacy:
        ``plan.epsilon``-DP under ``plan.relation`` (module docstring). Only grid points and
        the clamping bounds are released.
    """
    if count_candidates(grid) != plan.num_candidates:
        raise ValueError(
            f"the grid gives {count_candidates(grid)} candidates; the plan was made for "
            f"{plan.num_candidates}"
        )
    released = released_values(values, len(plan.quantiles), grid)
    counts = dense_counts(histogram, grid)
    source = as_random_source(rng)
    lower_values, lower_low, lower_high, total = end_candidates(counts, grid, "lower")
    upper_values, upper_low, upper_high, _ = end_candidates(counts, grid, "upper")
    noisy = None
    if plan.count_scale is not None:
        noisy = total + int(discrete_laplace(plan.count_scale, 1, source)[0])
    lowers: list[float] = []
    uppers: list[float] = []
    for alpha, delta in zip(plan.distinct, plan.sensitivities, strict=True):
        lower, upper, common = _targets(plan, alpha, delta, total, noisy)
        sensitivity = delta * common
        below = target_scores(lower_low, lower_high, lower, common)
        above = target_scores(upper_low, upper_high, upper, common)
        i = private_choice(below, plan.selection_epsilon, sensitivity, plan.method, source)
        j = private_choice(above, plan.selection_epsilon, sensitivity, plan.method, source)
        lowers.append(float(lower_values[i]))
        uppers.append(float(upper_values[j]))
    return IntervalRelease(
        intervals=assemble_intervals(plan, lowers, uppers, released),
        epsilon=float(plan.epsilon),
        confidence=plan.confidence,
        method=POPULATION_METHOD,
        relation=plan.relation,
        selection_method=plan.method,
        rounds=plan.rounds,
        num_candidates=plan.num_candidates,
        secure=source.secure,
    )
