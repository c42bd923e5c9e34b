"""Contribution bounds chosen privately from the per-unit count histogram (pure; no Beam).

A statistic bounded at ``k`` rows per privacy unit has a sensitivity proportional to ``k``; the
right ``k`` depends on how many rows units hold, which is private. This module chooses ``k``
among public candidates (:func:`candidate_bounds`: powers of two up to a public cap) with one
exact private selection (:func:`beam_dp.mechanisms.selection.select`) over the merged
**per-unit count histogram**: ``counts[c]`` is the number of privacy units that hold ``c``
rows (or keys, or candidates), ``c`` capped at the public cap (``counts[cap]`` holds every
unit with ``cap`` or more). Units with no row do not exist in the data and are not counted
(``counts[0]`` is always 0). The histogram is an exact, mergeable summary of ``cap + 1``
integers (:func:`count_histogram`, :func:`merge_counts`): the selection runs at any scale.

Buckets
-------
Both rules see each unit through the *bucket* of its count: the smallest candidate ``b`` with
``c <= b`` (unit counts in ``(b/2, b]`` are in bucket ``b``), a public per-unit rounding. With
``L(b) = #(c <= b/2)``, ``E(b) = #(b/2 < c <= b)`` and ``G(b) = #(c > b)``, a unit's bucket is
where it ties with a candidate. Without it, every candidate beyond the data scores like the
best one (a quantile score only tells candidates apart by the units between them): on units
of 40-60 rows the median rule would choose 64 and 1024 equally often.

Rules (``rule=``)
-----------------
``"quantile"`` (the default, chosen by measurement; benchmarks/RESULTS.md, "Real data")
    The bound is a private, conservative ``alpha``-quantile of the buckets of rows per unit.
    Bucket ``b`` holds the ranks ``[L(b), F(b)]``, ``F(b) = L(b) + E(b) = #(c <= b)``; the
    utility is ``-max(T - F(b), L(b) - T)`` for a target rank ``T``: minus the distance of
    ``T`` from them outside the bucket that holds it, and inside it the depth of ``T`` (its
    distance to the nearer end, >= 0). With
    ``T = alpha n`` (``margin`` 0 in :func:`bound_scores`) its maximiser is
    ``best = b* = min{b : #(c <= b) >= alpha n}``, the smallest bound that at least a fraction
    ``alpha`` of the units fit in (:func:`best_bound`; larger bounds tie with it only where
    exactly ``alpha n`` units fit in ``b*``, up to the next bucket that holds a unit).
    :func:`choice_scores` lowers the target by a public **margin** of ``M`` ranks,
    ``T = alpha n - M``, and subtracts a **tail penalty** ``tau * i`` from the ``i``-th
    candidate:

        ``M = 2 * sensitivity * ln(1/t) / epsilon`` (``t = TAIL_PROBABILITY = 1/1000``,
        :func:`tail_margin`: ``ln(1/t)`` replaced by a rational upper bound, ``M`` rounded up
        to an integer), ``tau = 2 * (7/10) * sensitivity / epsilon`` rounded up to the score's
        unit (``7/10 > ln 2``: each doubling at least halves a weight).

    Both are fixed functions of the candidate's position and of the public epsilon, alpha and
    sensitivity: the utility's sensitivity is that of the distance (below).

    **Tail bound.** For every histogram with ``alpha n >= M``, every epsilon, both relations
    and both methods, ``P(bound >= 2 b*) <= t``. Proof: the rank intervals of the buckets
    tile ``[0, n]``, so some bucket ``b_T <= b*`` holds ``T`` (``0 <= T <= alpha n <=
    F(b*)``) and its utility is >= 0, and the top score is at least ``-tau i(b_T)``. A bound
    ``b = 2^j b*`` (``j >= 1``) has ``L(b) >= F(b*) >= alpha n``, so its utility is at most
    ``-(L(b) - T) <= -M`` and its score is at least ``M + j tau`` below the top. The
    exponential mechanism gives a candidate probability at most
    ``exp(-epsilon (s_max - s_r) / (2 sensitivity))`` (the normaliser holds the top, of weight
    1); permute-and-flip at most its coin's probability, the same number (McKenna and Sheldon
    2020). Summing, ``P(bound >= 2 b*) <= exp(-epsilon M / (2 sensitivity)) * sum_{j>=1}
    2^-j <= t``. Where ``alpha n < M`` (few units at a small epsilon: ``n < 139`` at epsilon
    0.1, alpha 0.9) the bucket of rank 0 is bound 1, and the same sum gives
    ``P(bound >= 2 b*) <= exp(-epsilon alpha n / (2 sensitivity))``: the choice drifts to
    small bounds, dropping rows rather than adding noise.

    **Its cost.** The choice targets rank ``alpha n - M``, not ``alpha n``: ``M`` = 125 ranks
    at epsilon 0.1 (the jobs' default at epsilon 1), sensitivity 0.9, i.e. the 0.65-quantile
    at 500 units, 0.875 at 5 000, 0.8975 at 50 000. Some such cost is unavoidable: a unit set
    ``D`` of 500 units at 4 rows and ``D'`` = ``D`` plus 56 units at 8 rows (``b*`` 4 and 8)
    are 56 additions apart, so any 0.1-DP choice with ``P_D(bound >= 8) <= 1/1000`` has
    ``P_D'(bound >= 8) <= e^5.6 / 1000 = 0.27``. Measured with the exact pmf
    (:func:`choice_probabilities`; tests/summaries/test_bound_tail.py) at epsilon 0.1,
    add/remove, permute-and-flip, before (the utility ``-|(1-alpha) L(b) - alpha G(b)|`` of
    :class:`~beam_dp.scores.QuantileScore` with ``tau``) and after: ``P(bound >= 2 b*)`` at
    500 units 0.12 / 0.16 / 0.15 (1-8 rows, 1-50 rows, a panel of 1-4) became 5e-7 / 1e-5 /
    7e-6; ``P(bound = b*)`` 0.88 / 0.84 / 0.85 became 1.00 / 0.43 / 0.94 (the 1-50 choice
    mostly 32, dropping rows of the 36% of units above 32); at 5 000 and 50 000 units
    ``P(bound = b*)`` is 1.000 before and after, and the tail went from at most 2e-5 to below
    1e-30. (The depth inside the bucket of ``T`` keeps the old utility's property that one
    added unit can move two candidates' scores apart by twice the sensitivity: the call-site
    audit's neighbours see it.)

``"tradeoff"``
    Trades rows kept against the noise the bound implies. Bounding at ``b`` drops
    ``D(b) = sum_u max(0, c_u - b)`` rows; the statistic's noise grows as ``lambda * b`` for a
    public ``lambda`` (``noise_per_bound``, in rows per unit of bound; for a quantile,
    :func:`quantile_noise_per_bound`). ``D(b) + lambda b`` is convex in ``b`` with slope
    ``lambda - #(c > b)``, so its minimisers are the counts of the ``lambda``-th largest unit;
    over the candidates, the bucket ``b`` with ``G(b) <= lambda <= G(b) + E(b)`` holds them.
    The utility is minus the distance of ``lambda`` from that interval,
    ``-max(0, G(b) - lambda, lambda - G(b) - E(b))``, zero at the optimum. For a quantile
    ``D(b) + lambda b`` is, up to ``max(alpha, 1-alpha)``, the worst-case rank error of the
    release: dropping ``D`` rows moves any quantile of the kept rows by at most
    ``max(alpha, 1-alpha) D`` ranks of the whole data, and the selection's loss bound is
    ``max(alpha, 1-alpha) b lambda``. (PipelineDP scores ``-(D(b) + noise(b))`` directly,
    whose sensitivity is the cap; the slope form has sensitivity 1.) Candidates beyond the
    largest unit all score ``-lambda``: with ``lambda`` small against the selection's own
    noise, they keep a real chance (measured: RESULTS.md).

Sensitivity
-----------
Each privacy unit contributes exactly one count to the histogram, whatever its rows.

* ``"quantile"``: ``max(alpha, 1-alpha)`` under ``add_remove``: an added unit moves ``T``
  by ``alpha`` and each of ``L(b)``, ``F(b)`` by 0 or 1, the same 1 for both where the unit
  is below ``b``'s bucket, so ``T - F(b)`` and ``L(b) - T`` each move by ``alpha`` or
  ``1 - alpha`` (the margin is a constant), and a maximum of two terms moves by at most
  their larger move. ``1`` under ``replace``: ``n`` and ``T`` are fixed and ``L``, ``F``
  move by at most one.
* ``"tradeoff"``: ``1`` under both relations: ``G(b)`` and ``G(b) + E(b)`` each move by at
  most one when one unit is added, removed or changed, and the distance of a fixed
  ``lambda`` from an interval moves by at most the largest move of its ends.

Neither utility is monotone. The choice is ``epsilon``-DP under the relation its sensitivity
was derived for; it composes sequentially with the statistic that then runs at the chosen
bound (basic composition, adaptively: the statistic is ``epsilon_s``-DP for every fixed
bound), so a statistic with ``max_contributions="auto"`` spends ``share * epsilon`` here and
``(1 - share) * epsilon`` on itself, ``epsilon`` in total. The chosen bound is released
(it must be, to state the statistic's sensitivity) and belongs in the ledger record.

Sampling is exact: integer scores, exact rational ``epsilon / sensitivity``, exact coins.

Which bounds are worth choosing
-------------------------------
A private choice pays ``share * epsilon`` and can only pay it back where the statistic's
noise grows with the bound: rows per unit for a quantile (sensitivity times ``b``), keys
per unit for a ``.PerKey`` release (each key runs at ``epsilon / (m w)``), distinct labels
per unit for DP key selection (its noise scale and threshold grow with the bound). It is
*not* offered for ``TopCandidates`` over public candidates (``max_candidates_per_unit``):
the distinct-unit count has sensitivity 1 whatever a unit names
(:class:`~beam_dp.scores.DistinctUnitCount`), so the noise is the same at every bound: a
bound only drops the candidates of units that name many (it changes what is counted, never
the noise), and a chosen one would also spend ``share * epsilon``. No bound (``None``, the
default) is the accurate setting. Measured on synthetic units (50 candidates, 2 000 units
naming 1 + Poisson(6) each, exact permute-and-flip pmf; tests/beam/test_auto_candidates.py):
P(true top) 0.89 without a bound at epsilon 0.02, against 0.84 / 0.80 / 0.41 bounded at
16 / 8 / 4 (16 is the 0.9-quantile rule's choice) with the remaining 0.9 epsilon.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np
import numpy.typing as npt

from beam_dp._validation import (
    Relation,
    check_positive_finite,
    check_positive_int,
    check_probability_open,
    check_relation,
    to_fraction,
)
from beam_dp.mechanisms.randomness import RandomSource, as_random_source
from beam_dp.mechanisms.selection import (
    Method,
    check_method,
    score_loss_bound,
    select,
    selection_probabilities,
)

__all__ = [
    "BOUND_RULES",
    "DEFAULT_ALPHA",
    "DEFAULT_CAP",
    "DEFAULT_RULE",
    "DEFAULT_SHARE",
    "TAIL_PROBABILITY",
    "BoundChoice",
    "BoundRule",
    "BoundScores",
    "best_bound",
    "bound_scores",
    "candidate_bounds",
    "choice_probabilities",
    "choice_scores",
    "choose_bound",
    "count_histogram",
    "merge_counts",
    "quantile_noise_per_bound",
    "split_epsilon",
    "tail_log_odds",
    "tail_margin",
]

BoundRule = Literal["quantile", "tradeoff"]
BOUND_RULES: tuple[BoundRule, ...] = ("quantile", "tradeoff")

#: The rule used unless one is asked for (by measurement: benchmarks/RESULTS.md, "Real data").
DEFAULT_RULE: BoundRule = "quantile"
#: The quantile of rows per unit the ``"quantile"`` rule targets. Measured (benchmarks/RESULTS.md,
#: "Real data"): 0.9 was within noise of the best rule on every dataset, and 2.5x better
#: than 0.5 where values depend on the unit (flight distances: heavy units fly short routes,
#: so a low bound drops their rows and biases the median).
DEFAULT_ALPHA = Fraction(9, 10)
#: The public cap on counts (and the largest candidate bound) unless one is given.
DEFAULT_CAP = 1024
#: The share of a statistic's epsilon spent on choosing its bound (``max_contributions="auto"``).
DEFAULT_SHARE = Fraction(1, 10)

IntArray = npt.NDArray[np.int64]


def _check_rule(rule: object) -> BoundRule:
    if rule == "quantile":
        return "quantile"
    if rule == "tradeoff":
        return "tradeoff"
    raise ValueError(f"'rule' must be one of {list(BOUND_RULES)}; received {rule!r}")


def candidate_bounds(cap: int) -> tuple[int, ...]:
    """The public candidate bounds: the powers of two ``1, 2, 4, ...`` up to ``cap``.

    Raises:
        ValueError: ``cap`` not a positive integer.
    """
    check_positive_int(cap, "cap")
    return tuple(1 << i for i in range(int(cap).bit_length()))


def count_histogram(per_unit_counts: npt.ArrayLike, cap: int = DEFAULT_CAP) -> IntArray:
    """The histogram of per-unit counts, each capped at ``cap``: ``counts[c]`` units hold ``c``.

    Args:
        per_unit_counts: rows (or keys, candidates) of each privacy unit, integers >= 1.
        cap: the public cap; counts above it are counted at ``cap``.

    Returns:
        int64 array of length ``cap + 1`` (``counts[0] == 0``).

    Raises:
        ValueError: a count below 1 or not an integer (the message shows no value).
    """
    check_positive_int(cap, "cap")
    array = np.asarray(per_unit_counts)
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError("'per_unit_counts' must be integers")
    array = array.astype(np.int64).ravel()
    if array.size and int(array.min()) < 1:
        raise ValueError("'per_unit_counts' must be >= 1 (a unit with no row is not in the data)")
    return np.bincount(np.minimum(array, int(cap)), minlength=int(cap) + 1).astype(np.int64)


def _check_histogram(counts: npt.ArrayLike) -> IntArray:
    array = np.asarray(counts)
    if array.ndim != 1 or array.size < 2:
        raise ValueError("'counts' must be one-dimensional with length cap + 1 >= 2")
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError("'counts' must hold integers")
    result = array.astype(np.int64)
    if int(result.min()) < 0:
        raise ValueError("'counts' must be non-negative")
    if result[0] != 0:
        raise ValueError("'counts[0]' must be 0 (a unit with no row is not in the data)")
    return result


def merge_counts(first: npt.ArrayLike, second: npt.ArrayLike) -> IntArray:
    """The sum of two count histograms of the same cap (the merge of the summary)."""
    a = _check_histogram(first)
    b = _check_histogram(second)
    if a.size != b.size:
        raise ValueError("cannot merge count histograms of different caps")
    merged: IntArray = a + b
    return merged


def quantile_noise_per_bound(
    epsilon: float | Fraction, num_candidates: int, confidence: float = 0.95
) -> Fraction:
    """``lambda`` for a quantile: rank loss per unit of bound, over ``max(alpha, 1-alpha)``.

    A quantile selection at ``epsilon`` over ``num_candidates`` grid points, bounded at ``b``
    rows per unit, loses at most ``max(alpha, 1-alpha) * b * 2 (ln d + t) / epsilon`` ranks
    with probability ``confidence`` (:func:`~beam_dp.mechanisms.score_loss_bound`). The value
    is public (parameters only) and rounded to a fraction with denominator <= 1000.
    """
    per_bound = score_loss_bound(
        num_candidates, epsilon=float(epsilon), sensitivity=1.0, confidence=confidence
    )
    return Fraction(per_bound).limit_denominator(1000)


def _check_lambda(value: object) -> Fraction:
    check_positive_finite(value, "noise_per_bound")
    fraction = to_fraction(value, "noise_per_bound")
    return fraction.limit_denominator(1 << 20) if fraction.denominator > (1 << 20) else fraction


def _check_alpha(alpha: object) -> Fraction:
    """``alpha`` as an exact fraction: a float read as the decimal it was written as."""
    check_probability_open(alpha, "alpha")
    if isinstance(alpha, Fraction):
        return alpha
    return Fraction(str(float(alpha)))  # type: ignore[arg-type]


@dataclass(frozen=True)
class BoundScores:
    """Exact integer scores of the candidate bounds and their sensitivity.

    Attributes:
        scores: one int64 score per candidate (real score = ``scores * unit``).
        unit: the real value of one integer step.
        sensitivity: the utility's sensitivity, in real units.
        bounds: the candidate bounds.
    """

    scores: IntArray
    unit: Fraction
    sensitivity: Fraction
    bounds: tuple[int, ...]

    @property
    def scaled_sensitivity(self) -> Fraction:
        """The sensitivity in integer steps (what the sampler is given)."""
        return self.sensitivity / self.unit


def bound_scores(
    counts: npt.ArrayLike,
    *,
    rule: str = DEFAULT_RULE,
    alpha: float | Fraction = DEFAULT_ALPHA,
    noise_per_bound: float | Fraction | None = None,
    relation: str = "add_remove",
    margin: int = 0,
) -> BoundScores:
    """The exact integer scores of the candidate bounds, with their sensitivity.

    Args:
        counts: the merged count histogram (:func:`count_histogram`); its length fixes the cap.
        rule: ``"quantile"`` or ``"tradeoff"`` (module docstring).
        alpha: the quantile of rows per unit (``"quantile"``).
        noise_per_bound: ``lambda`` (``"tradeoff"``), public, > 0.
        relation: ``"add_remove"`` or ``"replace"``.
        margin: ``"quantile"``: the public number of ranks the target ``alpha n`` is lowered
            by (:func:`tail_margin`; 0 for the plain quantile utility), an integer >= 0.
    """
    histogram = _check_histogram(counts)
    chosen_rule = _check_rule(rule)
    rel: Relation = check_relation(relation)
    bounds = candidate_bounds(histogram.size - 1)
    positions = np.array(bounds, dtype=np.int64)
    cumulative = np.cumsum(histogram)
    total = int(cumulative[-1])
    less = cumulative[positions // 2]  # #(c <= b/2): units below b's bucket (b/2, b]
    greater = total - cumulative[positions]  # #(c > b)
    if chosen_rule == "quantile":
        if isinstance(margin, bool) or not isinstance(margin, int) or margin < 0:
            raise ValueError(f"'margin' must be an integer >= 0; received {margin!r}")
        fraction = _check_alpha(alpha)
        p, q = fraction.numerator, fraction.denominator
        target = p * total - q * int(margin)  # q * (alpha n - margin)
        at_most = cumulative[positions]  # #(c <= b) = L(b) + E(b)
        distance = np.maximum(target - q * at_most, q * less - target)
        quantile_scores: IntArray = -distance.astype(np.int64)  # > 0 inside the bucket of T
        sensitivity = Fraction(1) if rel == "replace" else max(fraction, 1 - fraction)
        return BoundScores(quantile_scores, Fraction(1, q), sensitivity, bounds)
    if noise_per_bound is None:
        raise ValueError("'noise_per_bound' is required with rule='tradeoff'")
    lam = _check_lambda(noise_per_bound)
    p, q = lam.numerator, lam.denominator
    at_least = total - less  # G(b) + E(b), E(b) = the units in b's bucket
    distance = np.maximum(q * greater - p, p - q * at_least)
    scores: IntArray = -np.maximum(distance, 0).astype(np.int64)
    return BoundScores(scores, Fraction(1, q), Fraction(1), bounds)


#: An upper bound of ln 2: a tail penalty of ``2 * LN2_ABOVE * sensitivity / epsilon`` per
#: candidate at least halves the exponential-mechanism weight of each next doubling.
LN2_ABOVE = Fraction(7, 10)

#: The tail target of the ``"quantile"`` rule: ``P(bound >= 2 * best) <= TAIL_PROBABILITY``
#: whenever ``alpha * n`` reaches the margin (module docstring, "Tail bound").
TAIL_PROBABILITY = Fraction(1, 1000)


def tail_log_odds(tail: Fraction = TAIL_PROBABILITY) -> Fraction:
    """A rational upper bound of ``ln(1/tail)``, within ``2e-6`` of it (public).

    ``math.log`` is correct to within an ulp; rounding up to ``1e-6`` and adding ``1e-6``
    keeps the result above the real logarithm.
    """
    check_probability_open(tail, "tail")
    value = -math.log(float(tail))
    return Fraction(math.ceil(value * 1_000_000) + 1, 1_000_000)


def tail_margin(epsilon: Fraction, sensitivity: Fraction) -> int:
    """The ``"quantile"`` rule's margin in ranks: ``2 sensitivity ln(1/t) / epsilon`` rounded
    up to an integer (public: parameters only)."""
    margin = 2 * tail_log_odds() * sensitivity / epsilon
    return -(-margin.numerator // margin.denominator)


def choice_scores(
    counts: npt.ArrayLike,
    *,
    epsilon: float | Fraction,
    rule: str = DEFAULT_RULE,
    alpha: float | Fraction = DEFAULT_ALPHA,
    noise_per_bound: float | Fraction | None = None,
    relation: str = "add_remove",
    counts_per_unit: int = 1,
) -> BoundScores:
    """The exact scores :func:`choose_bound` selects over: :func:`bound_scores`, with the
    ``"quantile"`` rule's margin and tail penalty (module docstring) and the sensitivity of
    ``counts_per_unit`` counts per unit.

    Privacy: the margin and the penalty depend only on the candidate's position,
    ``epsilon``, ``alpha`` and the sensitivity (all public), so each score moves by the same
    amount as the distance's (module docstring, "Sensitivity").
    """
    check_positive_finite(epsilon, "epsilon")
    check_positive_int(counts_per_unit, "counts_per_unit")
    eps = to_fraction(epsilon, "epsilon")
    scored = bound_scores(
        counts, rule=rule, alpha=alpha, noise_per_bound=noise_per_bound, relation=relation
    )
    sensitivity = scored.sensitivity * int(counts_per_unit)
    scores = scored.scores
    if _check_rule(rule) == "quantile":
        margin = tail_margin(eps, sensitivity)  # ranks of counts below alpha n
        scores = bound_scores(counts, alpha=alpha, relation=relation, margin=margin).scores
        tau = 2 * LN2_ABOVE * sensitivity / eps / scored.unit  # in integer score steps
        step = -(-tau.numerator // tau.denominator)  # rounded up: at least halving
        scores = scores - step * np.arange(scores.size, dtype=np.int64)
    return BoundScores(scores, scored.unit, sensitivity, scored.bounds)


def best_bound(
    counts: npt.ArrayLike,
    *,
    rule: str = DEFAULT_RULE,
    alpha: float | Fraction = DEFAULT_ALPHA,
    noise_per_bound: float | Fraction | None = None,
) -> int:
    """The best bound of a rule on known data: the smallest maximiser of its utility without
    margin or penalty; for ``"quantile"``, ``b* = min{b : #(c <= b) >= alpha n}`` (module
    docstring). For tests and for public data: it reads the exact histogram and is never
    released."""
    scored = bound_scores(counts, rule=rule, alpha=alpha, noise_per_bound=noise_per_bound)
    top = np.flatnonzero(scored.scores == scored.scores.max())
    return scored.bounds[int(top[0])]


def choice_probabilities(
    counts: npt.ArrayLike,
    *,
    epsilon: float | Fraction,
    rule: str = DEFAULT_RULE,
    alpha: float | Fraction = DEFAULT_ALPHA,
    noise_per_bound: float | Fraction | None = None,
    relation: str = "add_remove",
    counts_per_unit: int = 1,
    method: str = "permute_and_flip",
) -> dict[int, float]:
    """The exact probability law of :func:`choose_bound`'s bound on a given histogram.

    The scores :func:`choose_bound` selects over, through
    :func:`~beam_dp.mechanisms.selection.selection_probabilities` (the exponential
    mechanism's closed form; permute-and-flip's, integrated numerically), as floats. For
    tests and for public data; never used to sample a release.

    Returns:
        ``{bound: probability}`` over the candidate bounds, summing to 1.
    """
    check_positive_finite(epsilon, "epsilon")
    eps = to_fraction(epsilon, "epsilon")
    scored = choice_scores(
        counts,
        epsilon=eps,
        rule=rule,
        alpha=alpha,
        noise_per_bound=noise_per_bound,
        relation=relation,
        counts_per_unit=counts_per_unit,
    )
    probabilities = selection_probabilities(
        scored.scores,
        epsilon=eps,
        sensitivity=scored.scaled_sensitivity,
        monotonic=False,
        method=check_method(method),
    )
    return {bound: float(p) for bound, p in zip(scored.bounds, probabilities, strict=True)}


@dataclass(frozen=True)
class BoundChoice:
    """A privately chosen contribution bound and what it cost (public; for the ledger).

    Attributes:
        bound: the chosen bound (released).
        candidates: the public candidate bounds.
        epsilon: epsilon spent on the choice.
        rule: the utility used.
        alpha: the quantile (``"quantile"``) or None.
        noise_per_bound: ``lambda`` (``"tradeoff"``) or None.
        sensitivity: the utility's sensitivity in its own units (not integer steps).
        relation: the neighbouring relation it was calibrated for.
        method: the selection mechanism.
        cap: the public cap on counts.
        secure: whether the randomness came from the OS CSPRNG.
    """

    bound: int
    candidates: tuple[int, ...]
    epsilon: Fraction
    rule: BoundRule
    alpha: Fraction | None
    noise_per_bound: Fraction | None
    sensitivity: Fraction
    relation: Relation
    method: Method
    cap: int
    secure: bool

    def ledger_record(self) -> dict[str, object]:
        """The public facts of the choice, as JSON-ready values."""
        return {
            "mechanism": self.method,
            "statistic": "contribution_bound",
            "rule": self.rule,
            "value": self.bound,
            "candidates": list(self.candidates),
            "cap": self.cap,
            "epsilon": float(self.epsilon),
            "sensitivity": float(self.sensitivity),
            "neighbouring": self.relation,
            "alpha": None if self.alpha is None else str(self.alpha),
            "noise_per_bound": None
            if self.noise_per_bound is None
            else float(self.noise_per_bound),
        }


def choose_bound(
    counts: npt.ArrayLike,
    *,
    epsilon: float | Fraction,
    rule: str = DEFAULT_RULE,
    alpha: float | Fraction = DEFAULT_ALPHA,
    noise_per_bound: float | Fraction | None = None,
    relation: str = "add_remove",
    counts_per_unit: int = 1,
    method: str = "permute_and_flip",
    rng: RandomSource | np.random.Generator | None = None,
) -> BoundChoice:
    """Choose a contribution bound privately from the merged per-unit count histogram.

    Args:
        counts: ``counts[c]`` = number of units holding ``c`` rows, ``c`` capped at the public
            cap ``len(counts) - 1`` (:func:`count_histogram`, :func:`merge_counts`).
        epsilon: the epsilon spent on the choice (the statistic's share, > 0).
        rule: ``"quantile"`` (default) or ``"tradeoff"``.
        alpha: the quantile of rows per unit for ``"quantile"``.
        noise_per_bound: ``lambda`` for ``"tradeoff"`` (:func:`quantile_noise_per_bound`).
        relation: ``"add_remove"`` (default) or ``"replace"``.
        counts_per_unit: how many counts of the histogram one unit may hold, enforced
            upstream (1 for rows per unit; ``max_keys_per_unit`` for a histogram of rows per
            (unit, key), as ``.PerKey`` would build): the sensitivity is multiplied by it.
        method: ``"permute_and_flip"`` (default) or ``"exponential"``.
        rng: ``None`` for the OS CSPRNG; a seeded source only in tests.

    Returns:
        The :class:`BoundChoice` (its ``bound`` is released).

    Privacy:
        ``epsilon``-DP under ``relation``: one exact selection whose utility has the
        sensitivity derived in the module docstring (``max(alpha, 1-alpha)`` or 1 for
        ``"quantile"`` under add/remove or replace; 1 for ``"tradeoff"``), each unit adding one
        count to the histogram (``counts_per_unit`` counts: the sensitivity times that).
        Only the chosen bound is released.

    Raises:
        ValueError / TypeError: naming the bad parameter; never showing a count.
    """
    check_positive_finite(epsilon, "epsilon")
    eps = to_fraction(epsilon, "epsilon")
    chosen_rule = _check_rule(rule)
    chosen_method = check_method(method)
    rel: Relation = check_relation(relation)
    scored = choice_scores(
        counts,
        epsilon=eps,
        rule=chosen_rule,
        alpha=alpha,
        noise_per_bound=noise_per_bound,
        relation=rel,
        counts_per_unit=counts_per_unit,
    )
    source = as_random_source(rng)
    index = select(
        scored.scores,
        epsilon=eps,
        sensitivity=scored.scaled_sensitivity,
        monotonic=False,
        method=chosen_method,
        rng=source,
    )
    return BoundChoice(
        bound=scored.bounds[index],
        candidates=scored.bounds,
        epsilon=eps,
        rule=chosen_rule,
        alpha=_check_alpha(alpha) if chosen_rule == "quantile" else None,
        noise_per_bound=_check_lambda(noise_per_bound) if chosen_rule == "tradeoff" else None,
        sensitivity=scored.sensitivity,
        relation=rel,
        method=chosen_method,
        cap=int(np.asarray(counts).size) - 1,
        secure=source.secure,
    )


def split_epsilon(
    epsilon: float | Fraction, share: float | Fraction = DEFAULT_SHARE
) -> tuple[Fraction, Fraction]:
    """``(epsilon for the bound, epsilon for the statistic)``: ``share`` and the rest, exactly."""
    check_positive_finite(epsilon, "epsilon")
    check_probability_open(share, "share")
    eps = to_fraction(epsilon, "epsilon")
    part = to_fraction(share, "share") if isinstance(share, Fraction) else Fraction(str(share))
    return eps * part, eps * (1 - part)
