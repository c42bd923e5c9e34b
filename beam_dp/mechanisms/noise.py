"""Exact discrete Laplace noise, and why it costs no factor 2 as a selection would.

:func:`discrete_laplace` draws ``Z`` with ``P(Z = z) ∝ exp(-|z| / scale)`` on the integers,
exactly (Canonne, Kamath and Steinke 2020, "The Discrete Gaussian for Differential Privacy",
Algorithms 1-2 for the geometric part): a geometric ``X`` with ``P(X = x) ∝ exp(-x / t)``
built from a uniform ``U < t`` accepted with probability ``exp(-U / t)`` and a geometric
number of ``exp(-1)`` coins ``V`` (``X = U + t V``), then ``Y = floor(X / s)`` and a fair sign
(``-0`` rejected so that 0 is not counted twice), with ``scale = t / s`` the exact rational
the float denotes. Every coin is an exact Bernoulli from :mod:`.bernoulli`; the bits come
from the OS CSPRNG unless a test passes a seeded source. The work is a function of ``scale``
and of the bits drawn, never of the value the noise is added to.

Discrete Laplace as an exponential mechanism over ℤ
--------------------------------------------------
Releasing ``s + Z`` for an integer statistic ``s`` of sensitivity ``Δ`` with
``scale = Δ / ε`` is the exponential mechanism over the public candidates ``c ∈ ℤ`` with
score ``u(c; x) = -|c - s(x)|``, run at ``ε / 2``: ``P(c) = exp(-ε |c - s| / Δ) / W(x)``,
``W(x) = Σ_{c ∈ ℤ} exp(-ε |c - s(x)| / Δ)``. The general exponential mechanism pays ``ε``
twice: once for the numerator (the score moves by ``≤ Δ``) and once for the normaliser,
which in general moves by up to ``exp(ε / 2)`` too. Here it does not move at all:
substituting ``c' = c - s(x)`` (a bijection of ℤ because ``s(x)`` is an integer),
``W(x) = Σ_{c' ∈ ℤ} exp(-ε |c'| / Δ) = (1 + a) / (1 - a)`` with ``a = exp(-ε / Δ)``, the same
for every dataset. So ``P_x(c) / P_x'(c) = exp(ε (|c - s(x')| - |c - s(x)|) / Δ) ≤ exp(ε)``
by the triangle inequality: ε-DP at the *full* ``ε`` in the numerator, the normaliser free.
A selection over a bounded grid (a mean chosen by the score ``-|S - N r|`` over ``r`` in
``[lower, upper]``) loses this: near the grid's ends the candidate set is cut, the
normaliser depends on the data, and the mechanism must run at ``ε / 2`` per unit of score
(it behaves like Laplace noise of twice the scale). Hence the private mean releases noisy
sums (:mod:`beam_dp.summaries.quantiles.mean`) and clamps afterwards (post-processing).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import numpy.typing as npt

from beam_dp._validation import check_positive_finite, to_fraction
from beam_dp.mechanisms.bernoulli import geometric_exp
from beam_dp.mechanisms.randomness import RandomSource, as_random_source

__all__ = ["discrete_laplace", "discrete_laplace_tail", "noisy_sum_and_count"]


def discrete_laplace(
    scale: float | Fraction,
    n: int,
    rng: RandomSource | np.random.Generator | None = None,
) -> npt.NDArray[np.int64]:
    """Return ``n`` exact samples with ``P(Z = z) ∝ exp(-|z| / scale)``.

    Args:
        scale: the noise scale (> 0, finite), converted to the exact rational it denotes.
        n: number of samples (>= 0).
        rng: ``None`` for the OS CSPRNG; a seeded source only in tests.
    """
    check_positive_finite(scale, "scale")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"'n' must be an integer >= 0; received {n!r}")
    source = as_random_source(rng)
    exact = to_fraction(scale, "scale")
    t, s = exact.numerator, exact.denominator  # scale = t / s
    out = np.zeros(int(n), dtype=np.int64)
    todo = np.arange(int(n))
    rate = Fraction(1, t)
    while todo.size:
        # X geometric with P(X = x) ∝ exp(-x / t), Y = floor(X / s), a fair sign, and "-0"
        # rejected so that 0 is not counted twice.
        x = geometric_exp(rate, todo.size, source)  # Python ints only past 2**62: never seen
        y = np.array([int(g) // s for g in x], dtype=np.int64) if x.dtype == object else x // s
        negative = source.below(2, todo.size).astype(bool)
        keep = ~(negative & (y == 0))
        out[todo[keep]] = np.where(negative[keep], -y[keep], y[keep])
        todo = todo[~keep]
    return out


def discrete_laplace_tail(scale: float | Fraction, confidence: float) -> int:
    """The smallest integer ``T >= 0`` with ``P(|Z| <= T) >= confidence`` (public; floats).

    ``P(|Z| > T) = 2 a^(T + 1) / (1 + a)`` with ``a = exp(-1 / scale)``. Used for accuracy
    statements only (never for a sample).
    """
    check_positive_finite(scale, "scale")
    if not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"'confidence' must be in (0, 1); received {confidence!r}")
    log_a = -1.0 / float(scale)
    miss = 1.0 - float(confidence)

    def outside(t: int) -> float:
        return float(np.exp((t + 1) * log_a + np.log(2.0) - np.log1p(np.exp(log_a))))

    # 2 a^(T+1) / (1 + a) <= miss  <=>  T + 1 >= ln(miss (1 + a) / 2) / ln a.
    guess = max(0, int(np.ceil(np.log(miss * (1.0 + np.exp(log_a)) / 2.0) / log_a)) - 1)
    while guess > 0 and outside(guess - 1) <= miss:
        guess -= 1
    while outside(guess) > miss:
        guess += 1
    return guess


def noisy_sum_and_count(
    centred_sum: int,
    count: int | None,
    *,
    epsilon: float | Fraction,
    sum_share: Fraction,
    sum_sensitivity: int,
    count_sensitivity: int,
    rng: RandomSource | np.random.Generator | None = None,
) -> tuple[int, int | None]:
    """``(centred_sum + Z_s, count + Z_c)`` with exact discrete Laplace noise (one release).

    ``Z_s`` has scale ``sum_sensitivity / (sum_share epsilon)`` and ``Z_c`` scale
    ``count_sensitivity / ((1 - sum_share) epsilon)``; with ``count=None`` (a public count)
    no count is released and ``sum_share`` must be 1.

    Privacy:
        ``epsilon``-DP when the integer ``centred_sum`` moves by at most ``sum_sensitivity``
        and ``count`` by at most ``count_sensitivity`` between neighbours: each noisy value is
        the shift-invariant exponential mechanism of the module docstring at its part of
        ``epsilon``, and the parts add up to ``epsilon`` (basic composition). Both draws are
        made whatever the data (one each); their work depends on the scales alone.
    """
    check_positive_finite(epsilon, "epsilon")
    share = Fraction(sum_share)
    eps = to_fraction(epsilon, "epsilon")
    sensitivities = {"sum_sensitivity": sum_sensitivity, "count_sensitivity": count_sensitivity}
    for name, value in sensitivities.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"'{name}' must be an integer >= 1; received {value!r}")
    source = as_random_source(rng)
    if count is None:
        if share != 1:
            raise ValueError("'sum_share' must be 1 when no count is released (count=None)")
        return int(centred_sum) + int(discrete_laplace(sum_sensitivity / eps, 1, source)[0]), None
    if not 0 < share < 1:
        raise ValueError(f"'sum_share' must be in (0, 1) with a released count; received {share}")
    sum_scale = sum_sensitivity / (share * eps)
    noisy_sum = int(centred_sum) + int(discrete_laplace(sum_scale, 1, source)[0])
    count_scale = count_sensitivity / ((1 - share) * eps)
    return noisy_sum, int(count) + int(discrete_laplace(count_scale, 1, source)[0])
