"""Sampling error apart: a private interval for the *population* quantile (optional field).

:mod:`.intervals` bounds the error the mechanism adds: its interval holds the data's own
alpha-quantile. When the ``N`` values are an i.i.d. sample of a population (of bounded values:
the clamping applies to the population too), the population quantile
``xi_alpha = inf{x : F(x) >= alpha}`` differs from the data's by sampling error. This module
releases ``[lo, hi]`` holding ``xi_alpha`` with probability at least ``confidence`` over the
sample *and* the mechanism: the nonparametric order-statistic interval, bracketed privately.
Pure: numpy, scipy's binomial quantiles (public parameters only) and the exact samplers.

The order-statistic interval
----------------------------
For a sample of size ``n`` let ``l(n)`` be the smallest integer with
``P(Bin(n, alpha) <= l(n)) >= gamma`` and ``u(n)`` one more than the smallest with
``P(Bin(n, alpha) <= u - 1) >= 1 - gamma`` (scipy's ``binom.ppf``). Then
``P(x_(l) > xi) = P(#(X <= xi) < l) <= P(Bin(n, alpha) <= l - 1) < gamma``, because
``#(X <= xi)`` is binomial with a success probability ``F(xi) >= alpha``, and likewise
``P(x_(u) < xi) = P(#(X < xi) >= u) <= gamma`` (``F(xi-) <= alpha``): ``[x_(l), x_(u)]`` holds
``xi`` with probability at least ``1 - 2 gamma``, for any distribution (``x_(0)`` is ``lower``
and ``x_(n+1)`` is ``upper``). Write ``w_lo(n) = alpha n - l(n)`` and
``w_hi(n) = u(n) - alpha n``, the interval's reach in ranks on each side.

The private bracket
-------------------
As in :mod:`.intervals`, each end is one exact selection among the grid's points by the distance
from a target rank to the candidate's rank range (:func:`~.intervals.end_candidates`,
:func:`~.intervals.target_scores`): the lower end aims at ``alpha N - w_lo(n) - e - s``, the
upper end at ``alpha N + w_hi(n) + e + s``, where ``s`` is the selection's shift
(:func:`~.intervals.rank_shift`) and ``n`` and ``e`` depend on the relation:

* **replace**: ``N`` is public, so ``n = N`` and ``e = 0``; the targets ``l(N) - s`` and
  ``u(N) + s`` are public constants and a changed unit moves the ranks by at most ``k``:
  ``Delta = k``.
* **add/remove**: ``N`` is not public. A share of epsilon releases a noisy count
  ``n = max(N + Z, 0)``, ``Z`` exact discrete Laplace of scale ``k / epsilon_n``
  (:func:`~beam_dp.mechanisms.partition_selection.discrete_laplace`), with ``|Z| <= e_n`` with
  probability ``1 - beta_n`` for ``e_n = ceil(scale ln(2 / beta_n))``. Since ``l`` moves by 0
  or 1 when ``n`` grows by one, ``w_lo`` (and ``w_hi``) moves by at most
  ``max(alpha, 1 - alpha)``, so ``|w(n) - w(N)| <= e = ceil(max(alpha, 1 - alpha) e_n)`` on that
  event. The target depends on the data through ``alpha N`` only (the rest is public after the
  count): ``Delta = max(alpha, 1 - alpha) k``, as for the randomization interval.

Both sensitivities are multiplied by ``max_partitions``.

Privacy
-------
Add/remove: the count (sensitivity ``k`` times the partitions: ``epsilon_n``-DP) and ``2 m``
end selections at ``(epsilon - epsilon_n) / (2 m)`` each, chosen given the count (adaptive basic
composition): ``epsilon`` in total. Replace: ``2 m`` selections at ``epsilon / (2 m)``. The
tightening across quantiles and the union with the released values are post-processing (see
:mod:`.intervals`). The count itself is not part of the release (its use is: the shift).

Coverage
--------
**Claim.** With probability at least ``confidence`` over the sample and the mechanism, every
interval holds its population quantile.

**Proof.** The failure probability ``1 - confidence`` is split: half over the ``2 m`` sides of
the order-statistic intervals (``gamma`` each), half over the ``2 m`` selections and the count
(``beta_e`` each). On the event that ``x_(l(N)) <= xi`` and the count is within ``e_n``: the
lower end is *bad* when ``lo > x_(l(N))`` (for ``l(N) <= 0``: when it is not the first
candidate, ``lower``); then ``#(X < lo) >= l(N) = alpha N - w_lo(N) >= alpha N - w_lo(n) - e``,
so its range starts at least ``s`` above the target, and, exactly as in :mod:`.intervals`, this
has probability at most ``beta_e``. Otherwise ``lo <= x_(l(N)) <= xi``. The upper end is
symmetric (bad: ``hi < x_(u(N))``, so ``#(X <= hi) <= u(N) - 1`` and its range ends at least
``s + 1`` below the target). A union bound over all the events gives the claim.

The sample is assumed i.i.d. in the values (rows). Contribution bounding keeps a uniform sample
of each unit's rows; units with several rows make the rows dependent, which the order-statistic
interval does not model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Unpack

from scipy import stats

from beam_dp._rational import positive_fraction
from beam_dp._validation import Relation, check_probability_open
from beam_dp.mechanisms import Method, as_random_source
from beam_dp.mechanisms.partition_selection import discrete_laplace
from beam_dp.summaries.histogram import Grid
from beam_dp.summaries.quantiles import QuantilePlan
from beam_dp.summaries.quantiles.intervals import (
    IntervalRelease,
    assemble_intervals,
    count_candidates,
    end_candidates,
    endpoint_sensitivity,
    rank_shift,
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
    "sampling_ranks",
    "select_population_intervals",
]

#: The name releases record for the method.
POPULATION_METHOD = "population_rank_bracket"

#: The share of the interval's epsilon spent on the noisy count under add/remove (the count's
#: error reaches each side at ``max(alpha, 1 - alpha)`` per value; the ends' shifts grow as
#: ``1 / epsilon``: about a fifth balances the two for a few quantiles).
DEFAULT_COUNT_FRACTION = Fraction(1, 5)


def sampling_ranks(n: int, alpha: Fraction, gamma: float) -> tuple[int, int]:
    """``(l(n), u(n))``: ``P(Bin(n, alpha) <= l - 1) < gamma`` and ``P(Bin(n, alpha) >= u)
    <= gamma`` (module docstring). ``l`` may be 0 (no lower order statistic qualifies) and
    ``u`` may be ``n + 1`` (no upper one does)."""
    if n <= 0:
        return 0, 1
    p = float(alpha)
    low = int(stats.binom.ppf(gamma, n, p))
    high = int(stats.binom.ppf(1.0 - gamma, n, p)) + 1
    return max(low, 0), min(high, n + 1)


@dataclass(frozen=True)
class PopulationPlan:
    """Everything about the population intervals fixed before any data is read (public).

    Attributes:
        quantiles, distinct, epsilon, confidence, relation, method, max_contributions,
            max_partitions, num_candidates, selection_epsilon, sensitivities, shifts: as in
            :class:`~.intervals.IntervalPlan`.
        count_epsilon: epsilon of the noisy count (add/remove), or None (replace).
        count_scale: the count's discrete Laplace scale, or None.
        count_error: ``e_n``, the count's error bound at its share of the failure
            probability, or None.
        sampling_failure: ``gamma``, each side's share of the failure probability.
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
    shifts: tuple[int, ...]
    count_epsilon: Fraction | None
    count_scale: Fraction | None
    count_error: int | None
    sampling_failure: float

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
    """Validate the parameters of the population intervals and fix their shifts.

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
    events = 2 * m + int(counted)
    beta = failure / 2 / events
    gamma = failure / 2 / (2 * m)
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
    shifts = tuple(rank_shift(candidates, per, d, beta, base.method) for d in sensitivities)
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
        shifts=shifts,
        count_epsilon=count_epsilon,
        count_scale=count_scale,
        count_error=count_error,
        sampling_failure=gamma,
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
    plan: PopulationPlan, alpha: Fraction, shift: int, total: int, noisy: int | None
) -> tuple[int, int, int]:
    """``(lower target, upper target, common)``, ranks times ``common`` (module docstring)."""
    if noisy is None:  # replace: N is public
        low, high = sampling_ranks(total, alpha, plan.sampling_failure)
        return low - shift, high + shift, 1
    assert plan.count_error is not None
    a, b = alpha.numerator, alpha.denominator
    n = max(noisy, 0)
    low, high = sampling_ranks(n, alpha, plan.sampling_failure)
    reach = math.ceil(max(alpha, 1 - alpha) * plan.count_error)
    # alpha N - w_lo(n) - e - s with w_lo(n) = alpha n - l(n); times b.
    lower = a * total - (a * n - b * low) - b * (reach + shift)
    upper = a * total + (b * high - a * n) + b * (reach + shift)
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
    for alpha, delta, shift in zip(plan.distinct, plan.sensitivities, plan.shifts, strict=True):
        lower, upper, common = _targets(plan, alpha, shift, total, noisy)
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
