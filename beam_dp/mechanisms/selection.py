"""Exact private selection: permute-and-flip, the exponential mechanism, top-k by peeling.

Both mechanisms choose one candidate from a public finite set given a score per candidate.
With ``gamma_r = epsilon * (q_max - q_r) / (2 * sensitivity)`` (``/ sensitivity`` for monotone
scores):

* the **exponential mechanism** (McSherry-Talwar 2007) outputs r with probability proportional
  to ``exp(-gamma_r)``. It is epsilon-DP, and also epsilon**2/8-zCDP (bounded range,
  Cesar-Rogers 2021).
* **permute-and-flip** (McKenna-Sheldon 2020) visits candidates in a uniformly random order and
  stops at the first r whose coin of probability ``exp(-gamma_r)`` comes up. It is epsilon-DP,
  never worse than the exponential mechanism in expected score and up to twice as good. It has
  no zCDP bound better than pure DP's.

Sampling is exact. Scores become exact integers in a public unit (integers as they are, floats
and Fractions floored onto a grid of ``sensitivity / 2**24``:
:func:`~.exact_scores.scores_in_public_steps`, which has the argument), epsilon and the
sensitivity are converted from floats exactly, and every coin is an exact Bernoulli(exp(-x))
(:mod:`.bernoulli`) fed by uniform bits from the OS CSPRNG (:mod:`.randomness`).

* Permute-and-flip uses an equivalent form: the coins are independent of the visiting order,
  and the candidate of the best score has a coin of probability 1, so the first success in a
  uniformly random order is the success of smallest rank in a uniformly random permutation.
  We flip every coin (vectorised), draw the permutation's ranks and take that success (see
  :func:`_permute_and_flip`).
* The exponential mechanism is sampled by rejection: propose a uniformly random candidate,
  accept it with probability ``exp(-gamma_r)`` (at most 1 since gammas are measured from the
  maximum), repeat. A padded number of rounds of ``d`` proposals is always drawn and flipped;
  the first accepted proposal in draw order is returned, which is exactly the sequential
  algorithm (see :func:`_exponential`).

Running time (``docs/timing.md``): every read of random bits, inside the coins too, has a
size that is a function of the number of candidates, ``rate`` and bits already read (the
coins draw one geometric per candidate: :func:`~.bernoulli.bernoulli_exp_multiples`), except,
for the exponential mechanism, when all padded rounds fail (probability at most ``e**-32``).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from beam_dp._validation import (
    check_positive_finite,
    check_positive_int,
    check_probability_open,
    to_fraction,
)
from beam_dp.mechanisms.bernoulli import bernoulli_exp_multiples
from beam_dp.mechanisms.exact_scores import ExactScores, ScoresLike, scores_in_public_steps
from beam_dp.mechanisms.randomness import RandomSource, as_random_source

__all__ = [
    "EXPONENTIAL_ROUNDS",
    "METHODS",
    "Method",
    "check_method",
    "random_ranks",
    "score_loss_bound",
    "select",
    "selection_probabilities",
    "top_k",
]

Method = Literal["permute_and_flip", "exponential"]
METHODS: tuple[Method, ...] = ("permute_and_flip", "exponential")

_MAX_BATCH = 1 << 20


def check_method(method: object, parameter: str = "method") -> Method:
    """Return ``method`` as a :data:`Method` if it names one of :data:`METHODS`.

    The one rule for method names: every transform, summary and job validates through it.

    Raises:
        ValueError: naming ``parameter`` and the accepted names.
    """
    if method == "permute_and_flip":
        return "permute_and_flip"
    if method == "exponential":
        return "exponential"
    raise ValueError(f"'{parameter}' must be one of {list(METHODS)}; received {method!r}")


def _rate(
    epsilon: float | Fraction, sensitivity: float | Fraction, monotonic: bool, unit: Fraction
) -> Fraction:
    """The exact c with gamma_r = c * integer_gap_r."""
    check_positive_finite(epsilon, "epsilon")
    check_positive_finite(sensitivity, "sensitivity")
    divisor = 1 if monotonic else 2
    return (
        to_fraction(epsilon, "epsilon") * unit / (divisor * to_fraction(sensitivity, "sensitivity"))
    )


def _in_public_steps(scores: ScoresLike, sensitivity: float | Fraction) -> ExactScores:
    """``scores`` as exact integers in a unit fixed by their type and ``sensitivity`` only."""
    check_positive_finite(sensitivity, "sensitivity")
    return scores_in_public_steps(scores, to_fraction(sensitivity, "sensitivity"))


#: Rounds of ``d`` proposals the exponential mechanism always draws (see :func:`_exponential`).
EXPONENTIAL_ROUNDS = 32

_RANK_SENTINEL = np.uint64((1 << 64) - 1)  # above every 63-bit rank


def random_ranks(n: int, source: RandomSource) -> npt.NDArray[np.uint64]:
    """``n`` distinct 63-bit integers whose order is a uniformly random permutation.

    Draws ``n`` i.i.d. uniform 63-bit words and starts again if any two are equal (checked over
    all ``n``). Conditioned on being distinct, i.i.d. words are exchangeable, so their ranks are
    a uniform permutation. The work is a function of ``n`` only: one draw of ``n`` words, and a
    redraw with probability below ``n**2 / 2**64`` (a law that depends on ``n`` alone).
    """
    while True:
        ranks: npt.NDArray[np.uint64] = source.words64(n) >> np.uint64(1)
        ordered = np.sort(ranks)
        if not np.any(ordered[1:] == ordered[:-1]):
            return ranks


def _permute_and_flip(gaps: npt.NDArray[Any], rate: Fraction, source: RandomSource) -> int:
    """Permute-and-flip, exactly, with work fixed by ``d``.

    Flip every candidate's coin, give every candidate a rank of a uniformly random permutation
    (:func:`random_ranks`), and return the success of smallest rank: the first success in a
    uniformly random visiting order, which is permute-and-flip (the coins are independent of
    the order; the best candidate's coin has probability 1, so a success exists).

    Work: one call of :func:`~.bernoulli.bernoulli_exp_multiples` on all ``d`` gaps (whose
    reads do not depend on the gaps: see ``docs/timing.md``), ``d`` random 63-bit ranks
    (redrawn with probability below ``d**2 / 2**64``), and ``O(d)`` array operations. No
    rejection depends on how many coins succeed: the pick is a minimum over a public number of
    ranks.
    """
    coins = bernoulli_exp_multiples(rate, gaps, source)
    ranks = random_ranks(int(gaps.shape[0]), source)
    return int(np.argmin(np.where(coins, ranks, _RANK_SENTINEL)))


def _exponential(
    gaps: npt.NDArray[Any], rate: Fraction, source: RandomSource, rounds: int = EXPONENTIAL_ROUNDS
) -> int:
    """The exponential mechanism by rejection, with a padded, public number of proposals.

    Proposals are i.i.d. uniform over the ``d`` candidates; a proposal ``r`` is accepted with
    probability ``exp(-gamma_r) <= 1``, and the first accepted proposal in draw order is
    returned: the sequential rejection sampler exactly, whose output has law
    ``exp(-gamma_r) / sum_s exp(-gamma_s)``.

    Work: ``rounds`` rounds of ``d`` proposals each are always drawn and flipped, in calls of
    at most :data:`_MAX_BATCH` proposals (whole rounds; the sizes are a function of ``d``),
    whatever round the first acceptance falls in. A proposal is accepted with probability
    ``sum_s exp(-gamma_s) / d >= 1 / d`` (the best candidate's coin is 1), so a round of ``d``
    has no acceptance with probability at most ``(1 - 1/d)**d <= e**-1``, and all ``rounds``
    rounds fail with probability at most ``e**-rounds`` (``e**-32``, about ``1.3e-14``, at the
    default :data:`EXPONENTIAL_ROUNDS`). Only then are more rounds drawn, one call of the
    same size at a time, until one accepts: that is the residual, data-dependent work.
    """
    d = int(gaps.shape[0])
    if d == 1:
        return 0
    per_call = max(1, min(rounds, _MAX_BATCH // d))
    chosen = -1
    drawn = 0
    while drawn < rounds or chosen < 0:
        count = min(per_call, rounds - drawn) if drawn < rounds else per_call
        proposals = source.below(d, count * d)
        coins = bernoulli_exp_multiples(rate, gaps[proposals], source)
        if chosen < 0:
            accepted = np.flatnonzero(coins)
            if accepted.size:
                chosen = int(proposals[accepted[0]])
        drawn += count
    return chosen


def _select_exact(
    scores: ExactScores,
    where: npt.NDArray[np.int64] | None,
    rate: Fraction,
    method: Method,
    source: RandomSource,
) -> int:
    gaps = scores.gaps(where)
    if method == "permute_and_flip":
        chosen = _permute_and_flip(gaps, rate, source)
    else:
        chosen = _exponential(gaps, rate, source)
    return chosen if where is None else int(where[chosen])


def select(
    scores: ScoresLike,
    *,
    epsilon: float | Fraction,
    sensitivity: float | Fraction,
    monotonic: bool = False,
    method: Method = "permute_and_flip",
    rng: RandomSource | np.random.Generator | None = None,
) -> int:
    """Choose one candidate privately and return its index.

    Args:
        scores: one score per public candidate (ints, floats or Fractions; higher is better).
            Integers are used exactly; floats and Fractions are floored onto the public grid of
            ``sensitivity / 2**24`` (``scores_in_public_steps``: the same privacy, coin
            probabilities within a factor ``exp(epsilon * 2**-25)`` of the exact scores', and
            a running time that does not depend on their denominators). NaN and infinity are
            refused.
        epsilon: the privacy parameter spent by this selection (> 0, finite).
        sensitivity: the largest change of any one candidate's score between neighbouring
            datasets (> 0, finite), in the units of ``scores``.
        monotonic: True when, between any two neighbours, all scores move in the same direction;
            the mechanism then uses ``epsilon / sensitivity`` instead of half of it.
        method: ``"permute_and_flip"`` (default) or ``"exponential"``.
        rng: ``None`` for the OS CSPRNG; a seeded source only in tests (it warns).

    Returns:
        The index of the chosen candidate.

    Privacy:
        epsilon-DP with respect to whichever neighbouring relation ``sensitivity`` and
        ``monotonic`` were derived for. ``method="exponential"`` is also epsilon**2/8-zCDP.
        Only the index is released. The running time is a function of the number of
        candidates, except for the coins' own work (``docs/timing.md``) and, for
        ``method="exponential"``, rounds past the 32 padded ones (probability at most
        ``e**-32``).

    Raises:
        ValueError: empty or non-finite scores, or epsilon or sensitivity not > 0 and finite.
    """
    chosen_method = check_method(method)
    exact = _in_public_steps(scores, sensitivity)
    rate = _rate(epsilon, sensitivity, monotonic, exact.unit)
    return _select_exact(exact, None, rate, chosen_method, as_random_source(rng))


def top_k(
    scores: ScoresLike,
    k: int,
    *,
    epsilon: float | Fraction,
    sensitivity: float | Fraction,
    monotonic: bool = False,
    method: Method = "permute_and_flip",
    rng: RandomSource | np.random.Generator | None = None,
) -> list[int]:
    """Choose ``k`` distinct candidates by peeling: ``k`` selections at ``epsilon / k`` each.

    Round ``i`` selects among the candidates not chosen in rounds ``1..i-1``.

    Returns:
        The indices of the chosen candidates, in the order they were chosen.

    Privacy:
        Each round is an (epsilon/k)-DP selection, so the k rounds together are epsilon-DP by
        basic composition. With ``method="exponential"`` each round is also (epsilon/k)**2/8-zCDP,
        so the whole is epsilon**2/(8k)-zCDP: account it that way when many selections compose.
        Permute-and-flip rounds must be accounted as pure DP only.
    """
    chosen_method = check_method(method)
    check_positive_int(k, "k")
    exact = _in_public_steps(scores, sensitivity)
    if k > len(exact):
        raise ValueError(
            f"'k' must be at most the number of candidates ({len(exact)}); received {k}"
        )
    check_positive_finite(epsilon, "epsilon")
    rate = _rate(to_fraction(epsilon, "epsilon") / k, sensitivity, monotonic, exact.unit)
    source = as_random_source(rng)
    remaining = np.ones(len(exact), dtype=bool)
    chosen: list[int] = []
    for _ in range(k):
        where = np.flatnonzero(remaining)
        index = _select_exact(exact, where, rate, chosen_method, source)
        chosen.append(index)
        remaining[index] = False
    return chosen


def _float_gammas(
    scores: ScoresLike, epsilon: float | Fraction, sensitivity: float | Fraction, monotonic: bool
) -> npt.NDArray[np.float64]:
    exact = _in_public_steps(scores, sensitivity)
    rate = _rate(epsilon, sensitivity, monotonic, exact.unit)
    gaps = exact.gaps()
    return float(rate) * gaps.astype(np.float64)


def _permute_and_flip_probabilities(gammas: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """P(r) = p_r * E[1 / (1 + #other successes)] = p_r * int_0^1 prod_{s != r} (1 - p_s u) du.

    The integrand is a polynomial in u that decays roughly like exp(-u * sum_s p_s); it is
    integrated with Gauss-Legendre on panels that are geometrically finer near u = 0. Equal
    coin probabilities are grouped, so the cost is (panels * nodes * distinct scores).
    """
    values, inverse, counts = np.unique(gammas, return_inverse=True, return_counts=True)
    probs = np.exp(-values)
    rate = float((counts * probs).sum())
    edges = [0.0]
    width = 1.0 / (64.0 * rate)
    while edges[-1] + width < 1.0:
        edges.append(edges[-1] + width)
        width *= 2.0
    edges.append(1.0)
    nodes, weights = np.polynomial.legendre.leggauss(48)
    left = np.array(edges[:-1])
    right = np.array(edges[1:])
    half = (right - left) / 2.0
    u = ((nodes[None, :] + 1.0) * half[:, None] + left[:, None]).ravel()
    w = (weights[None, :] * half[:, None]).ravel()
    log_terms = np.log1p(-np.outer(u, probs))  # (points, groups); -inf only if p = 1 and u = 1
    log_all = log_terms @ counts
    integrals = np.exp(log_all[:, None] - log_terms).T @ w
    per_candidate = probs * integrals
    result: npt.NDArray[np.float64] = per_candidate[inverse]
    normalised: npt.NDArray[np.float64] = result / result.sum()
    return normalised


def selection_probabilities(
    scores: ScoresLike,
    *,
    epsilon: float | Fraction,
    sensitivity: float | Fraction,
    monotonic: bool = False,
    method: Method = "permute_and_flip",
) -> npt.NDArray[np.float64]:
    """The exact output distribution of :func:`select`, in floating point.

    For tests, and for users who want to see the distribution on public data. This function
    is never used to sample a release. The exponential mechanism is computed in log-space
    (shifted by the maximum); permute-and-flip by the closed form of McKenna and Sheldon
    (2020), ``P(r) = p_r * E[1 / (1 + number of other successful coins)]``, integrated
    numerically.

    Returns:
        One probability per candidate; the array sums to 1.
    """
    chosen_method = check_method(method)
    gammas = _float_gammas(scores, epsilon, sensitivity, monotonic)
    if chosen_method == "exponential":
        weights: npt.NDArray[np.float64] = np.exp(-gammas)
        normalised: npt.NDArray[np.float64] = weights / weights.sum()
        return normalised
    return _permute_and_flip_probabilities(gammas)


def score_loss_bound(
    num_candidates: int,
    *,
    epsilon: float,
    sensitivity: float,
    confidence: float = 0.95,
    monotonic: bool = False,
) -> float:
    """The utility guarantee: with probability >= ``confidence`` the loss is below this bound.

    ``P[q(Y) <= q_max - 2 * sensitivity * (ln d + t) / epsilon] <= exp(-t)`` with
    ``t = ln(1 / (1 - confidence))`` (Dwork and Roth 2014, Theorem 3.11); ``sensitivity``
    replaces ``2 * sensitivity`` for monotone scores. It holds for permute-and-flip as well: the
    probability that PF outputs r is at most r's coin probability, which is the exponential
    mechanism's bound term by term.

    Returns:
        The bound on ``q_max - q(Y)``, in the units of the scores.
    """
    check_positive_int(num_candidates, "num_candidates")
    check_positive_finite(epsilon, "epsilon")
    check_positive_finite(sensitivity, "sensitivity")
    check_probability_open(confidence, "confidence")
    t = -math.log1p(-float(confidence))
    factor = 1.0 if monotonic else 2.0
    return factor * float(sensitivity) * (math.log(num_candidates) + t) / float(epsilon)
