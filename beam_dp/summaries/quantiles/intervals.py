"""Quantile intervals in the column's units: ``[lo, hi]`` that holds the data's alpha-quantile.

A quantile release states a value ``v``; this module adds a *randomization interval*
``[lo, hi]`` in value units that contains the data's own alpha-quantile (of the bounded data
the release was computed from) with probability at least ``confidence`` over the mechanism's
randomness, for every requested quantile at once. Pure: numpy and the exact samplers; no Beam.
The population's quantile (sampling error too) is the optional second field:
:mod:`.population_intervals`.

What is an alpha-quantile of the data
-------------------------------------
For the ``N >= 1`` bounded values ``X`` (clamped to the grid's ``[lower, upper]``, as the
histogram holds them), a value ``x`` is an alpha-quantile when ``alpha N`` lies in its rank
range: ``#(X < x) <= alpha N <= #(X <= x)`` (the package's definition, see
:mod:`beam_dp.summaries.grids`). These values form the closed interval
``Q_alpha = [x_(ceil(alpha N)), x_(floor(alpha N) + 1)]`` of order statistics (one point unless
``alpha N`` is an integer). The interval released here contains all of ``Q_alpha``.

The method: a private bracket in ranks (``method = "rank_bracket"``)
--------------------------------------------------------------------
Each end is one exact selection among the grid's points, aimed ``s`` ranks beyond the
quantile: the lower end at the rank ``T = alpha N - s``, the upper end at ``T = alpha N + s``.
A candidate ``p`` for the lower end stands for the values from ``p`` up to the next candidate
``p'`` (excluded), its rank range ``[low, high] = [#(X < p), #(X < p')]``; a candidate for the
upper end for the values after the previous candidate ``p'`` up to ``p`` (included),
``[#(X <= p'), #(X <= p)]``. The lower end's candidates are the grid points, with ``lower``
before them when the grid does not reach it; the upper end's are the grid points, with
``upper`` after them (:func:`end_candidates`). The first range is open below and the last one
open above, so that the ranges tile the line. A candidate's score is minus the distance from
``T`` to its range::

    q = -dist(T, [low, high]) = -max(0, low - T, T - high)

and the chosen candidate is the end. (Values tied at ``p`` fall in one range per end, so an
end that falls inside a block of ties is the tied value itself.) The shift ``s`` is public: the
smallest integer with ``c (n - 1) exp(-epsilon_e s / (2 Delta)) <= beta_e`` for ``n``
candidates, the selection's ``epsilon_e`` and sensitivity ``Delta``, its share ``beta_e`` of
``1 - confidence``, and ``c = 1/2`` for permute-and-flip, 1 for the exponential mechanism
(:func:`rank_shift`).

Privacy
-------
*Sensitivity.* Under add/remove one privacy unit adds or removes at most ``k`` values
(``max_contributions``) per partition: ``N`` moves by ``w <= k``, ``T`` by ``alpha w``, and every
``low`` and ``high`` (counts of values below a point) by between 0 and ``w`` in the same direction.
So ``low - T`` and ``T - high`` each move by at most ``max(alpha, 1 - alpha) k``, and so does their
maximum with 0 (a 1-Lipschitz function of them): ``Delta = max(alpha, 1 - alpha) k``. Under replace
``N`` and ``T`` are fixed and the ranks move by at most ``k``: ``Delta = k``. Both are multiplied
by ``max_partitions`` when a unit reaches several keys (as every quantile selection is). The
integer scores are ``b`` times ``q`` for ``alpha = a / b`` (``T b = a N -+ b s``), with
``b Delta`` as their sensitivity (:func:`endpoint_sensitivity`; tested by brute force on neighbours
under both relations).

*Composition.* ``m`` distinct quantiles make ``2 m`` selections, each
``epsilon / (2 m)``-DP (permute-and-flip or the exponential mechanism on non-monotone scores,
``exp(epsilon_e q / (2 Delta))``); by basic composition the interval share costs ``epsilon``
in total. Everything else is post-processing of those selections and of the values the quantile
release already published: the tightening across quantiles and the union with the released
value below. So a quantile release with intervals costs its own epsilon plus the interval
share, no more. (With the exponential mechanism each selection is also
``epsilon_e**2 / 8``-zCDP; :attr:`IntervalPlan.rounds` says how many there are.)

*What is derived for free.* (1) The released value: ``[lo, hi]`` is widened to contain it, so
the statement "``v`` within ``[lo, hi]``" always reads right. (2) The order of the quantiles:
the lower end of ``alpha_j`` is raised to the largest lower end of any ``alpha_i <= alpha_j``
and the upper end lowered to the smallest upper end of any ``alpha_i >= alpha_j`` (valid on
the event that every end holds, since ``Q_alpha`` moves up with ``alpha``). (3) The clamping
bounds: an end at a bound says the data did not let the bracket stop sooner.

Why not the release's own rank bound: a quantile release reports a rank-error bound ``l``
*beyond the best grid point* (plus, in the recursive and joint splits, a share of the values
tied at a cut): the distance of the release from ``alpha N`` is at most ``l`` plus a
data-dependent grid term that is never released. An interval built around ``v`` from ``l``
would miss that term; where the term can be bounded (one quantile), such an interval still
needs ``l`` plus its own selection's margin on each side, ``l`` ranks more than the bracket
for the median. The bracket never needs ``v`` to be accurate.

Coverage
--------
**Claim.** With probability at least ``confidence`` over the selections, for every requested
alpha at once, ``lo <= x_(ceil(alpha N))`` and ``hi >= x_(floor(alpha N) + 1)``, so that
``Q_alpha`` lies inside ``[lo, hi]``.

**Proof.** Take the lower end of one alpha. It is *bad* when ``lo > x_(ceil(alpha N))``: then
``#(X < lo) >= ceil(alpha N) >= alpha N``, so its range starts at or above ``alpha N`` and its
distance to ``T = alpha N - s`` is at least ``s``; the first candidate (``lower``, or the first
grid point when that is ``lower``) is at or below every value and never bad. The best score is 0:
consecutive ranges share their ends and run from minus to plus infinity, so one of them holds
``T``. Permute-and-flip outputs a candidate with probability at most half its coin's,
``exp(-epsilon_e (0 - q) / (2 Delta)) / 2`` (the output is a uniform choice among the coins that
come up, and the best candidate's always does), and the exponential mechanism with probability at
most the coin's (its normaliser is at least the best weight, 1); so
``P(bad) <= c (n - 1) exp(-epsilon_e s / (2 Delta)) <= beta_e`` (``c = 1/2`` or 1). The upper end
is symmetric (bad: ``hi < x_(floor(alpha N) + 1)``, so ``#(X <= hi) <= floor(alpha N) <= alpha N``:
its range ends at or below ``alpha N``, at least ``s`` from ``alpha N + s``; the last candidate,
``upper``, is never bad). A union bound over the ``2 m`` ends, each at
``beta_e = (1 - confidence) / (2 m)``, gives the claim for the raw ends, and the post-processing
above keeps it. For ``N = 0`` there is no quantile and nothing to cover; the selections still run
(their outputs are then near ``[lower, upper]``), and no error reveals the data's size.

The bound is worst-case over the data (a data set whose values leave an empty stretch of the
grid just beyond the quantile needs the ``ln(n - 1)``); on most data the coverage is close to 1
and the rank width close to ``2 s``. The worst case is attained, so no shift fixed from public
parameters is calibrated (coverage near the nominal level) on both kinds of data: computed
exactly from the selection's output law for the median of 2 000 values on a 10 001-point grid at
an end's epsilon of 1/6, the plan's shift (74 ranks) fails with probability 0.022 of its share
0.025 on the worst data, about 0 on continuous data, whose nominal shift is 16-20 ranks, and
such a shift fails with probability above 1/2 on two modes with the median in the gap
(tests/test_interval_worst_case_issue38.py). The over-coverage on continuous data is the price
of the guarantee for every data set, not slack in the proof.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Real
from typing import Literal, Protocol, Unpack

import numpy as np
import numpy.typing as npt

from beam_dp._rational import float_at_most
from beam_dp._validation import Relation, check_positive_int, check_probability_open
from beam_dp.accounting.zcdp import epsilon_per_round_for_rho
from beam_dp.mechanisms import Method, as_random_source
from beam_dp.scores._exact import check_fits_int64
from beam_dp.summaries.histogram import Grid, less_greater
from beam_dp.summaries.quantiles import QuantilePlan
from beam_dp.summaries.quantiles.parameters import (
    HistogramLike,
    PlanOptions,
    RngLike,
    check_quantile_plan,
    dense_counts,
    private_choice,
)

__all__ = [
    "DEFAULT_INTERVAL_FRACTION",
    "INTERVAL_METHOD",
    "IntervalBudget",
    "IntervalPlan",
    "IntervalRelease",
    "QuantileInterval",
    "assemble_intervals",
    "count_candidates",
    "end_candidates",
    "endpoint_scores",
    "endpoint_sensitivity",
    "intervals_for_plan",
    "plan_intervals",
    "quantile_interval",
    "rank_shift",
    "released_values",
    "select_intervals",
    "split_interval_budget",
    "target_scores",
    "tighten",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Side = Literal["lower", "upper"]

#: The name releases record for the method.
INTERVAL_METHOD = "rank_bracket"

#: The share of a quantile release's epsilon that its interval is given when a caller asks for
#: intervals without naming a share: a third. Measured against PostRI at equal total epsilon
#: and coverage (benchmarks/quantile_intervals.py; RESULTS.md, "Quantile intervals"): at 1/3
#: the interval is 0.71-0.93 of PostRI's width and the median 0.3-0.8 of PostRI's error (about
#: 1.5 times the error of a median given the whole epsilon); at 1/2 the interval is 0.49-0.70 of
#: PostRI's width but the median's error about doubles against the whole epsilon. A third keeps
#: the statistic's accuracy, which every release pays for, closer to what it was without an
#: interval, and still leads PostRI on both counts in 11 of 12 cells.
DEFAULT_INTERVAL_FRACTION = Fraction(1, 3)


# ----------------------------------------------------------------------------- public facts


@dataclass(frozen=True)
class IntervalPlan:
    """Everything about the intervals of a release fixed before any data is read (public).

    Build with :func:`plan_intervals` or :func:`intervals_for_plan`.

    Attributes:
        quantiles: the requested quantiles, in request order (exact fractions).
        distinct: the distinct quantiles, sorted (two selections each).
        epsilon: epsilon of all the intervals together (the interval share).
        confidence: the probability that every interval holds its quantile, all at once.
        relation: the neighbouring relation the sensitivities are derived for.
        method: the selection method.
        max_contributions: values per privacy unit ``k``.
        max_partitions: keys one unit may reach.
        num_candidates: candidates of each selection (the grid's points, a bound added).
        selection_epsilon: epsilon of one end's selection, ``epsilon / (2 m)``.
        sensitivities: each distinct quantile's ``Delta``, in value counts.
        shifts: each distinct quantile's rank shift ``s`` (an integer number of values).
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

    @property
    def rounds(self) -> int:
        """Selections composed: two per distinct quantile."""
        return 2 * len(self.distinct)

    @property
    def failure_probability(self) -> float:
        """``1 - confidence``, split evenly over the :attr:`rounds` ends."""
        return 1.0 - self.confidence


@dataclass(frozen=True)
class QuantileInterval:
    """One quantile's interval, in the column's units, with what a release records about it.

    Attributes:
        alpha: the quantile.
        value: the released value the interval was widened to contain (None: no point).
        lower, upper: the interval ``[lower, upper]``.
        rank_shift: how many values beyond the quantile each end aimed (public; None for a
            population interval, whose reach depends on the data's size).
        sensitivity: ``Delta`` of each end's selection, in value counts.
    """

    alpha: Fraction
    value: float | None
    lower: float
    upper: float
    rank_shift: int | None
    sensitivity: Fraction

    @property
    def width(self) -> float:
        return self.upper - self.lower


@dataclass(frozen=True)
class IntervalRelease:
    """The intervals of one quantile release (request order) and the public facts to record.

    Attributes:
        intervals: one per requested quantile.
        epsilon: epsilon spent by all the intervals (the interval share).
        confidence: every interval holds its data quantile, all at once, with at least this
            probability over the mechanism's randomness.
        method: :data:`INTERVAL_METHOD`.
        relation, selection_method: as in the plan.
        rounds: selections composed (two per distinct quantile).
        num_candidates: candidates of each selection.
        secure: whether the randomness came from the OS CSPRNG.
    """

    intervals: tuple[QuantileInterval, ...]
    epsilon: float
    confidence: float
    method: str
    relation: Relation
    selection_method: Method
    rounds: int
    num_candidates: int
    secure: bool

    @property
    def bounds(self) -> tuple[tuple[float, float], ...]:
        """``(lower, upper)`` of each interval, in request order."""
        return tuple((item.lower, item.upper) for item in self.intervals)


@dataclass(frozen=True)
class IntervalBudget:
    """How one quantile release's budget is shared between its quantiles and their intervals.

    Built by :func:`split_interval_budget`; every field is public.

    Attributes:
        epsilon: the release's epsilon (over all its selections).
        share: the interval's share (of epsilon; of rho under zCDP).
        quantile_epsilon, interval_epsilon: epsilon of the quantile selections together and of
            the ``2 m`` interval ends together.
        quantile_rho, interval_rho: under zCDP, the cost of each part (None otherwise).
    """

    epsilon: Fraction
    share: Fraction
    quantile_epsilon: Fraction
    interval_epsilon: Fraction
    quantile_rho: Fraction | None = None
    interval_rho: Fraction | None = None


def split_interval_budget(
    epsilon: float | Fraction,
    *,
    share: Fraction,
    quantile_rounds: int,
    interval_rounds: int,
    zcdp_rate: Fraction | None = None,
) -> IntervalBudget:
    """Share one quantile release's budget between its quantiles and their intervals.

    Args:
        epsilon: the release's epsilon (> 0), over ``quantile_rounds + interval_rounds``
            rounds.
        share: the intervals' share, strictly between 0 and 1.
        quantile_rounds: the quantile release's sequential rounds
            (:func:`~beam_dp.summaries.quantiles.quantile_rounds`).
        interval_rounds: the interval's selections (:attr:`IntervalPlan.rounds`, ``2 m``).
        zcdp_rate: None under basic composition; under zCDP the rho per epsilon squared of one
            round of the release's mechanism (1/8 for the exponential mechanism, 1/2 for
            permute-and-flip).

    Privacy:
        Basic composition: ``interval_epsilon = share * epsilon`` and ``quantile_epsilon`` the
        rest, exactly: the two parts add up to ``epsilon``. zCDP: the release's ``epsilon`` over
        ``R = quantile_rounds + interval_rounds`` rounds costs ``rho = rate epsilon^2 / R``
        (what the budget charges for it); the intervals get ``share * rho`` and the quantiles
        the rest, each part running at the largest epsilon its rounds can have within its rho
        (``rate e^2 / rounds <= rho_part``, checked in exact rationals). The parts' rho add up
        to ``rho``, and their epsilons to at most ``epsilon`` (Cauchy-Schwarz).
    """
    total = Fraction(epsilon)
    if not total > 0:
        raise ValueError(f"'epsilon' must be > 0; received {epsilon!r}")
    part = Fraction(share)
    if not 0 < part < 1:
        raise ValueError(f"'interval_share' must be strictly between 0 and 1; received {share!r}")
    check_positive_int(quantile_rounds, "quantile_rounds")
    check_positive_int(interval_rounds, "interval_rounds")
    if zcdp_rate is None:
        interval_epsilon = total * part
        return IntervalBudget(total, part, total - interval_epsilon, interval_epsilon)
    rate = Fraction(zcdp_rate)
    rho = rate * total**2 / (quantile_rounds + interval_rounds)
    interval_rho = rho * part
    quantile_rho = rho - interval_rho

    def within(cost: Fraction, rounds: int) -> Fraction:
        found = Fraction(epsilon_per_round_for_rho(float_at_most(cost), rate / rounds, 1))
        assert rate * found**2 / rounds <= cost  # exact: the helper rounds down
        return found

    return IntervalBudget(
        total,
        part,
        within(quantile_rho, quantile_rounds),
        within(interval_rho, interval_rounds),
        quantile_rho,
        interval_rho,
    )


# ----------------------------------------------------------------------------- the scores


def endpoint_sensitivity(alpha: Fraction, relation: Relation, k: int | Fraction) -> Fraction:
    """``Delta`` of an end's score ``-dist(alpha N -+ s, [low_j, high_j])``, in value counts.

    Privacy:
        Add/remove: ``N`` moves by ``w <= k``, the target by ``alpha w``, every rank by between
        0 and ``w`` the same way: ``max(alpha, 1 - alpha) k``. Replace: the target is fixed and
        the ranks move by at most ``k``: ``k``. (Module docstring; brute-forced in the tests.)
    """
    if relation == "replace":
        return Fraction(k)
    return max(alpha, 1 - alpha) * Fraction(k)


def rank_shift(
    num_candidates: int,
    epsilon: Fraction,
    sensitivity: Fraction,
    failure_probability: float,
    method: Method = "permute_and_flip",
) -> int:
    """The smallest integer ``s`` with ``w exp(-epsilon s / (2 Delta)) <= beta``.

    ``w`` bounds the total probability weight of the candidates that can be bad for an end: the
    ``n - 1`` candidates other than the one at the bound, times 1/2 for permute-and-flip, where a
    bad candidate is output with probability at most half its coin's (the best candidate's coin
    always comes up, so a bad one that comes up shares the first place with at least one other).
    With one candidate nothing can be bad and ``s = 0``. Computed in floats, rounded up with a
    margin, so that ``s`` is never below the exact value.
    """
    check_positive_int(num_candidates, "num_candidates")
    check_probability_open(failure_probability, "failure_probability")
    if num_candidates == 1:
        return 0
    weight = (int(num_candidates) - 1) * (0.5 if method == "permute_and_flip" else 1.0)
    exact = (
        2.0
        * float(sensitivity)
        * (math.log(weight) - math.log(float(failure_probability)))
        / float(epsilon)
    )
    return max(0, math.ceil(exact * (1.0 + 1e-12) + 1e-9))


def end_candidates(
    counts: npt.ArrayLike, grid: Grid, side: Side
) -> tuple[FloatArray, IntArray, IntArray, int]:
    """The candidates of one end and their rank ranges: ``(values, low, high, N)``.

    Lower end: the grid points, with ``lower`` first when the grid starts above it;
    ``low[i] = #(X < values[i])`` and ``high[i] = low[i + 1]``. Upper end: the grid points,
    with ``upper`` last when the grid ends below it; ``high[i] = #(X <= values[i])`` and
    ``low[i] = high[i - 1]``. The first ``low`` and the last ``high`` are placeholders (the
    ranges are open there: see the module docstring); every other entry is a count read from
    the histogram (a value between a bound and the grid is in the underflow or overflow slot).

    Args:
        counts: the ``2d + 1`` slot counts of a histogram over ``grid``.
        grid: the grid.
        side: ``"lower"`` or ``"upper"``.
    """
    array = np.asarray(counts, dtype=np.int64)
    less, greater = less_greater(array)
    total = int(array.sum())
    points = np.asarray(grid.points, dtype=np.float64)
    zero = np.zeros(1, dtype=np.int64)
    if side == "lower":
        values, ranks = points, less
        if grid.lower < float(points[0]):
            values = np.concatenate([[grid.lower], points])
            ranks = np.concatenate([zero, less])
        low: IntArray = ranks.copy()
        high: IntArray = np.concatenate([ranks[1:], zero])
    else:
        at_most: IntArray = total - greater
        values, ranks = points, at_most
        if grid.upper > float(points[-1]):
            values = np.concatenate([points, [grid.upper]])
            ranks = np.concatenate([at_most, np.array([total], dtype=np.int64)])
        high = ranks.copy()
        low = np.concatenate([zero, ranks[:-1]])
    return np.asarray(values, dtype=np.float64), low, high, total


def count_candidates(grid: Grid) -> int:
    """The candidates of the end that has more of them (public: from the grid alone)."""
    extra = max(int(grid.lower < float(grid.points[0])), int(grid.upper > float(grid.points[-1])))
    return grid.num_points + extra


def target_scores(low: IntArray, high: IntArray, target: int, common: int) -> IntArray:
    """``-dist(target / common, [low, high])`` times ``common``, as exact integers.

    ``target`` is a rank times ``common``; the first range is open below and the last one open
    above (their placeholder ends are ignored).
    """
    largest = max(int(np.abs(low).max(initial=0)), int(np.abs(high).max(initial=0)))
    check_fits_int64(2 * (common * largest + abs(int(target))), "quantile interval scores")
    above: IntArray = np.maximum(common * low - target, 0)
    below: IntArray = np.maximum(target - common * high, 0)
    above[0] = 0
    below[-1] = 0
    scores: IntArray = -(above + below)
    return scores


def endpoint_scores(
    low: IntArray, high: IntArray, total: int, alpha: Fraction, shift: int, side: Side
) -> tuple[IntArray, int]:
    """Integer scores ``-b dist(T, [low, high])`` of every candidate of one end, and ``b``.

    ``T = alpha N - shift`` for the lower end and ``alpha N + shift`` for the upper end, with
    ``alpha = a / b``; the first candidate's range is open below and the last one's above.
    """
    a, b = alpha.numerator, alpha.denominator
    target = a * total - b * shift if side == "lower" else a * total + b * shift
    return target_scores(low, high, target, b), b


# ----------------------------------------------------------------------------- planning


def plan_intervals(
    quantiles: Sequence[float | Fraction],
    *,
    grid: Grid,
    epsilon: float | Fraction,
    confidence: float = 0.95,
    max_partitions: int = 1,
    **options: Unpack[PlanOptions],
) -> IntervalPlan:
    """Validate the parameters of the intervals of a quantile release and fix their shifts.

    Args:
        quantiles: the quantiles of the release (each strictly between 0 and 1).
        grid: the public grid the release's histogram is built on.
        epsilon: the interval share (> 0, finite), spent by all the intervals together.
        confidence: the probability that every interval holds its quantile, all at once.
        max_partitions: keys one unit may reach (sensitivities are multiplied by it).
        **options: ``relation``, ``max_contributions`` and ``method``
            (:class:`~beam_dp.summaries.quantiles.parameters.PlanOptions`).

    Raises:
        ValueError / TypeError: naming the bad parameter. Nothing here reads data.
    """
    if not isinstance(grid, Grid):
        raise TypeError(f"'grid' must be a Grid; received type {type(grid).__name__}")
    base = check_quantile_plan(quantiles, epsilon, options, max_partitions)
    check_probability_open(confidence, "confidence")
    m = len(base.distinct)
    per = base.epsilon / (2 * m)
    beta = (1.0 - float(confidence)) / (2 * m)
    check_probability_open(beta, "confidence")
    candidates = count_candidates(grid)
    k = base.max_contributions * int(max_partitions)
    sensitivities = tuple(endpoint_sensitivity(a, base.relation, k) for a in base.distinct)
    shifts = tuple(rank_shift(candidates, per, delta, beta, base.method) for delta in sensitivities)
    return IntervalPlan(
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
    )


def intervals_for_plan(
    plan: QuantilePlan, grid: Grid, *, epsilon: float | Fraction, confidence: float = 0.95
) -> IntervalPlan:
    """The intervals of a quantile plan's release: its quantiles, relation, bounds and method.

    ``epsilon`` is the interval share, spent on top of ``plan.epsilon``.
    """
    if not isinstance(plan, QuantilePlan):
        raise TypeError(f"'plan' must be a QuantilePlan; received type {type(plan).__name__}")
    return plan_intervals(
        plan.quantiles,
        grid=grid,
        epsilon=epsilon,
        confidence=confidence,
        max_partitions=plan.max_partitions,
        relation=plan.relation,
        max_contributions=plan.max_contributions,
        method=plan.method,
    )


# ----------------------------------------------------------------------------- selection


def released_values(
    values: Sequence[float] | None, count: int, grid: Grid
) -> tuple[float | None, ...]:
    """The released values, checked: ``count`` real numbers inside the grid's bounds (public).

    ``None`` (intervals without a point) gives ``count`` Nones.
    """
    if values is None:
        return (None,) * count
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError("'values' must be a sequence of released values")
    items: list[float] = []
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, Real):
            raise TypeError(f"'values[{i}]' must be a real number")
        items.append(float(value))
    if len(items) != count:
        raise ValueError(
            f"'values' must hold one released value per quantile ({count}); received {len(items)}"
        )
    for i, value in enumerate(items):
        if not grid.lower <= value <= grid.upper:  # also refuses NaN
            raise ValueError(f"'values[{i}]' must be a released value inside the grid's bounds")
    return tuple(items)


def tighten(
    lowers: Sequence[float], uppers: Sequence[float]
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Post-processing across quantiles sorted by alpha: each lower end raised to the largest
    lower end at or before it, each upper end lowered to the smallest upper end at or after it.

    Valid on the event that every raw end holds: ``Q_alpha`` moves up with ``alpha``, so a
    lower end below ``Q_alpha_i`` is below ``Q_alpha_j`` for every ``alpha_j >= alpha_i``
    (module docstring, "What is derived for free").
    """
    if len(lowers) != len(uppers):
        raise ValueError("'lowers' and 'uppers' must have one length")
    raised = np.maximum.accumulate(np.asarray(lowers, dtype=np.float64))
    lowered = np.minimum.accumulate(np.asarray(uppers, dtype=np.float64)[::-1])[::-1]
    return tuple(float(x) for x in raised), tuple(float(x) for x in lowered)


class _EndsPlan(Protocol):
    """What :func:`assemble_intervals` reads from a plan (frozen dataclasses: read-only)."""

    @property
    def quantiles(self) -> tuple[Fraction, ...]: ...

    @property
    def distinct(self) -> tuple[Fraction, ...]: ...

    @property
    def sensitivities(self) -> tuple[Fraction, ...]: ...

    @property
    def shifts(self) -> tuple[int | None, ...]: ...


def assemble_intervals(
    plan: _EndsPlan,
    lowers: Sequence[float],
    uppers: Sequence[float],
    released: Sequence[float | None],
) -> tuple[QuantileInterval, ...]:
    """The intervals in request order from the raw ends of the distinct quantiles: tightened
    across quantiles (:func:`tighten`) and widened to hold each released value (post-processing:
    module docstring, "What is derived for free")."""
    tight_lowers, tight_uppers = tighten(lowers, uppers)
    position = {q: i for i, q in enumerate(plan.distinct)}
    intervals = []
    for alpha, value in zip(plan.quantiles, released, strict=True):
        i = position[alpha]
        intervals.append(
            QuantileInterval(
                alpha=alpha,
                value=value,
                lower=tight_lowers[i] if value is None else min(tight_lowers[i], value),
                upper=tight_uppers[i] if value is None else max(tight_uppers[i], value),
                rank_shift=plan.shifts[i],
                sensitivity=plan.sensitivities[i],
            )
        )
    return tuple(intervals)


def select_intervals(
    histogram: HistogramLike,
    grid: Grid,
    plan: IntervalPlan,
    values: Sequence[float] | None,
    *,
    rng: RngLike = None,
) -> IntervalRelease:
    """The private intervals of a quantile release.

    Args:
        histogram: the merged :class:`~beam_dp.summaries.histogram.GridHistogram` the release
            was computed from (or its dense slot counts).
        grid: its grid (the one :func:`plan_intervals` was given).
        plan: from :func:`plan_intervals` or :func:`intervals_for_plan`.
        values: the released values, one per requested quantile (public: already released);
            each interval is widened to hold its value. ``None`` for intervals released
            without a point.
        rng: ``None`` for the OS CSPRNG (production); a seeded source only in tests.

    Returns:
        One interval per requested quantile (request order) and the facts to record.

    Privacy:
        ``plan.epsilon``-DP under ``plan.relation`` (module docstring): ``2 m`` exact
        selections at ``epsilon / (2 m)``; the rest is post-processing. Only grid points and
        the clamping bounds are released.
    """
    if count_candidates(grid) != plan.num_candidates:
        raise ValueError(
            f"the grid gives {count_candidates(grid)} candidates; the interval plan was made "
            f"for {plan.num_candidates}"
        )
    released = released_values(values, len(plan.quantiles), grid)
    counts = dense_counts(histogram, grid)
    source = as_random_source(rng)
    lower_values, lower_low, lower_high, total = end_candidates(counts, grid, "lower")
    upper_values, upper_low, upper_high, _ = end_candidates(counts, grid, "upper")
    lowers: list[float] = []
    uppers: list[float] = []
    for alpha, delta, shift in zip(plan.distinct, plan.sensitivities, plan.shifts, strict=True):
        below, common = endpoint_scores(lower_low, lower_high, total, alpha, shift, "lower")
        above, _ = endpoint_scores(upper_low, upper_high, total, alpha, shift, "upper")
        sensitivity = delta * common
        i = private_choice(below, plan.selection_epsilon, sensitivity, plan.method, source)
        j = private_choice(above, plan.selection_epsilon, sensitivity, plan.method, source)
        lowers.append(float(lower_values[i]))
        uppers.append(float(upper_values[j]))
    intervals = assemble_intervals(plan, lowers, uppers, released)
    return IntervalRelease(
        intervals=intervals,
        epsilon=float(plan.epsilon),
        confidence=plan.confidence,
        method=INTERVAL_METHOD,
        relation=plan.relation,
        selection_method=plan.method,
        rounds=plan.rounds,
        num_candidates=plan.num_candidates,
        secure=source.secure,
    )


def quantile_interval(
    histogram: HistogramLike,
    grid: Grid,
    *,
    alpha: float | Fraction,
    value: float,
    epsilon: float | Fraction,
    confidence: float = 0.95,
    max_partitions: int = 1,
    rng: RngLike = None,
    **options: Unpack[PlanOptions],
) -> IntervalRelease:
    """The interval of one released quantile ``value`` (:func:`plan_intervals` for ``[alpha]``,
    then :func:`select_intervals`).

    Privacy:
        ``epsilon``-DP under ``relation``: two selections at ``epsilon / 2``.
    """
    plan = plan_intervals(
        [alpha],
        grid=grid,
        epsilon=epsilon,
        confidence=confidence,
        max_partitions=max_partitions,
        **options,
    )
    return select_intervals(histogram, grid, plan, [value], rng=rng)
