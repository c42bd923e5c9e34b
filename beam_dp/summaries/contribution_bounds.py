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
``"quantile"`` (the default, chosen by measurement; RESULTS.md "Real data (issue 14)")
    The bound is a private ``alpha``-quantile of the buckets of rows per unit: the quantile
    utility ``-|(1-alpha) L(b) - alpha G(b)|`` of :class:`~beam_dp.scores.QuantileScore`,
    each unit one value. Its best candidate is the smallest bound that at least a fraction
    ``alpha`` of the units fit in (up to ties).

    **Tail penalty.** Every candidate above the largest unit scores the same, ``-(1-alpha)``
    times the number of units, only ``(1-alpha) E(b)`` below the best one: with few units or
    a small epsilon the flat tail keeps real mass (measured on the bundled sample, 3 000 units
    of 1-5 rows at epsilon 0.08: the exact pmf put 0.22 on bounds 16 ... 1024, 0.03 on 1024,
    whose noise is 128 times that of 8 for the same rows). :func:`choice_scores` subtracts
    ``tau * i`` from the ``i``-th candidate, ``tau = 2 * (7/10) * sensitivity / epsilon``
    (``7/10 > ln 2``), rounded up to the score's unit: each doubling at least halves a
    candidate's exponential-mechanism weight (``exp(-epsilon tau / (2 sensitivity))``), so the
    tail's mass is at most about twice that of its first candidate (0.06 there, 0.0006 on
    1024). The penalty is a fixed function of the candidate and of the public epsilon and
    sensitivity: the utility's sensitivity is unchanged. Its cost is a pull of ``tau`` per
    doubling towards smaller bounds, small against the score gaps of data with many units
    (12.6 units per doubling at epsilon 0.1, against gaps of hundreds on the flights).

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

* ``"quantile"``: ``max(alpha, 1-alpha)`` under ``add_remove`` (a unit, in one bucket,
  moves ``L`` or ``G`` of every candidate by one, or neither); ``1`` under ``replace`` (a
  changed unit may leave ``L`` and join ``G``: ``(1-alpha) + alpha``). These are
  ``QuantileScore``'s sensitivities with one value per unit.
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
from beam_dp.mechanisms.selection import Method, check_method, score_loss_bound, select
from beam_dp.scores import QuantileScore

__all__ = [
    "BOUND_RULES",
    "DEFAULT_ALPHA",
    "DEFAULT_CAP",
    "DEFAULT_RULE",
    "DEFAULT_SHARE",
    "BoundChoice",
    "BoundRule",
    "BoundScores",
    "bound_scores",
    "candidate_bounds",
    "choice_scores",
    "choose_bound",
    "count_histogram",
    "merge_counts",
    "quantile_noise_per_bound",
    "split_epsilon",
]

BoundRule = Literal["quantile", "tradeoff"]
BOUND_RULES: tuple[BoundRule, ...] = ("quantile", "tradeoff")

#: The rule used unless one is asked for (by measurement: RESULTS.md "Real data (issue 14)").
DEFAULT_RULE: BoundRule = "quantile"
#: The quantile of rows per unit the ``"quantile"`` rule targets. Measured (RESULTS.md "Real
#: data (issue 14)"): 0.9 was within noise of the best rule on every dataset, and 2.5x better
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
) -> BoundScores:
    """The exact integer scores of the candidate bounds, with their sensitivity.

    Args:
        counts: the merged count histogram (:func:`count_histogram`); its length fixes the cap.
        rule: ``"quantile"`` or ``"tradeoff"`` (module docstring).
        alpha: the quantile of rows per unit (``"quantile"``).
        noise_per_bound: ``lambda`` (``"tradeoff"``), public, > 0.
        relation: ``"add_remove"`` or ``"replace"``.
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
        score = QuantileScore(alpha=_check_alpha(alpha), grid=[float(b) for b in bounds])
        return BoundScores(
            score.compute_from_counts(less, greater), score.unit, score.sensitivity(rel), bounds
        )
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
    ``"quantile"`` rule's tail penalty (module docstring) and the sensitivity of
    ``counts_per_unit`` counts per unit.

    Privacy: the penalty depends only on the candidate's position, ``epsilon`` and the
    sensitivity (all public), so each score moves by the same amount as without it.
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
        tau = 2 * LN2_ABOVE * sensitivity / eps / scored.unit  # in integer score steps
        step = -(-tau.numerator // tau.denominator)  # rounded up: at least halving
        scores = scores - step * np.arange(scores.size, dtype=np.int64)
    return BoundScores(scores, scored.unit, sensitivity, scored.bounds)


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
