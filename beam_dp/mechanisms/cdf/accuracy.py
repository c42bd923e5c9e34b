"""Public accuracy statements of a KS release, and the ``k`` that optimises them.

Everything here is a function of public parameters only (grid size, ``k``, ε, the normaliser,
the contribution bound and, under ``add_remove`` with a released count, the count's own error
bound from :func:`count_error_bound`); nothing reads the data.
"""

from __future__ import annotations

import math
from fractions import Fraction

from beam_dp._validation import (
    check_positive_finite,
    check_positive_int,
    check_probability_open,
    to_fraction,
)
from beam_dp.mechanisms.cdf.params import MAX_CELLS, check_count_parameter, check_size

__all__ = ["count_error_bound", "ks_accuracy_bound", "ks_suggested_k"]


def ks_accuracy_bound(
    num_points: int,
    k: int,
    *,
    epsilon: float,
    n: int,
    confidence: float = 0.95,
    max_contributions: int = 1,
    count_error: int = 0,
) -> float:
    """A bound on the KS distance of a release to the data's empirical CDF, at ``confidence``.

    ``1/(2k) + 2 e / n + 2c (ln C(m + k - 1, k) + t) / (ε n)`` with ``t = -ln(1 - confidence)``,
    capped at 1. ``n`` is the normaliser ``n̂`` the release used, ``e`` a bound on
    ``|n - n̂|`` (0 under ``replace``; under ``add_remove`` with a released count, the count's
    own error bound, whose failure probability the caller adds to ``1 - confidence``).

    Derivation: the best path rounds ``k N_i / n̂`` to the nearest integer (clamped to
    ``[0, k]``), so it is within ``1/(2k) + e/n̂`` of ``N / n̂``; the exponential mechanism
    loses at most ``2Δ(ln|R| + t)/ε`` (``Δ = c k`` in units of ``1/(k n̂)``) with probability
    ``>= 1 - e**-t``; and ``|N_i/n - N_i/n̂| <= e/n̂``. The distance is over grid points, which
    for step CDFs on the grid is the supremum over the real line (the grid's own resolution
    is public and not included).
    """
    check_positive_int(num_points, "num_points")
    check_positive_int(k, "k")
    check_positive_finite(epsilon, "epsilon")
    check_probability_open(confidence, "confidence")
    check_positive_int(max_contributions, "max_contributions")
    size = check_count_parameter(n, "n")
    error = check_count_parameter(count_error, "count_error")
    if size == 0:
        return 1.0
    log_candidates = math.lgamma(num_points + k) - math.lgamma(k + 1) - math.lgamma(num_points)
    t = -math.log1p(-float(confidence))
    loss = 2 * max_contributions * (log_candidates + t) / (float(epsilon) * size)
    return min(1.0, 1 / (2 * k) + 2 * error / size + loss)


def ks_suggested_k(
    num_points: int,
    *,
    epsilon: float,
    n: int,
    confidence: float = 0.95,
    max_contributions: int = 1,
    count_error: int = 0,
    max_k: int | None = None,
) -> int:
    """The ``k`` that minimises :func:`ks_accuracy_bound` (from public quantities only).

    A larger ``k`` shrinks the rounding term ``1/(2k)`` and grows the privacy term through
    ``ln C(m + k - 1, k)``; for ``k << m`` the best ``k`` is about
    ``sqrt(ε n / (4 c ln(e m / k)))``. ``n`` must be public: the dataset size under
    ``replace``, the released count under ``add_remove``. ``max_k`` defaults to the largest
    ``k`` with ``m (k + 1) <= MAX_CELLS``.

    Returns:
        The smallest minimiser in ``[1, max_k]`` (1 when ``n`` is 0).
    """
    check_positive_int(num_points, "num_points")
    cap = MAX_CELLS // num_points - 1 if max_k is None else max_k
    check_positive_int(cap, "max_k")
    check_size(num_points, cap)
    best_k, best = 1, math.inf
    for k in range(1, cap + 1):
        bound = ks_accuracy_bound(
            num_points,
            k,
            epsilon=epsilon,
            n=n,
            confidence=confidence,
            max_contributions=max_contributions,
            count_error=count_error,
        )
        if n == 0:  # n is valid (checked by the first bound): every bound is 1, k = 1 wins
            return 1
        if bound < best:
            best_k, best = k, bound
        elif bound - 1 / (2 * k) >= best:
            break  # the rest grows with k (ln C(m + k - 1, k) does): no larger k can win
    return best_k


def count_error_bound(
    epsilon: float | Fraction, *, failure_probability: float, max_contributions: int = 1
) -> int:
    """The smallest ``e >= 0`` with ``P(|Z| > e) <= failure_probability`` for the count's noise.

    ``Z`` is discrete Laplace with ``P(Z = z) ∝ a**|z|``, ``a = exp(-ε / c)`` (the noise of
    :func:`~beam_dp.mechanisms.cdf.release.release_count`), whose tails are
    ``P(|Z| > e) = 2 a**(e + 1) / (1 + a)``; clamping the noisy count at 0 only moves it
    closer to the (non-negative) truth, so ``|n̂ - n| <= e`` with the same probability.
    """
    check_positive_finite(epsilon, "epsilon")
    check_probability_open(failure_probability, "failure_probability")
    check_positive_int(max_contributions, "max_contributions")
    log_a = -float(to_fraction(epsilon, "epsilon")) / int(max_contributions)
    beta = float(failure_probability)

    def tail(e: int) -> float:  # ln P(|Z| > e)
        return math.log(2.0) + (e + 1) * log_a - math.log1p(math.exp(log_a))

    e = max(
        0, math.ceil((math.log(beta) + math.log1p(math.exp(log_a)) - math.log(2.0)) / log_a) - 1
    )
    while e > 0 and tail(e - 1) <= math.log(beta):  # float guard: the exact smallest e
        e -= 1
    while tail(e) > math.log(beta):
        e += 1
    return e
