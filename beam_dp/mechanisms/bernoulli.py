"""Exact, vectorised Bernoulli coins.

Three layers, each exact given uniform random bits:

* :func:`bernoulli_rational` flips ``n`` coins of one rational probability ``p`` by comparing
  uniform random 16-bit digits with the base-2**16 expansion of ``p``, lazily: a lane is decided
  at the first digit where it differs from ``p`` and only tied lanes draw another digit.
* :func:`bernoulli_exp` flips ``n`` coins of probability ``exp(-gamma)`` for one rational
  ``gamma >= 0``, with the method of Canonne, Kamath and Steinke (2020, "The Discrete Gaussian
  for Differential Privacy", Algorithm 1): for ``gamma`` in [0, 1], draw ``A_k ~
  Bernoulli(gamma / k)`` for ``k = 1, 2, ...`` until the first failure ``K``; then
  ``P[K odd] = exp(-gamma)``. Larger ``gamma`` splits as ``exp(-1) ** floor(gamma) *
  exp(-frac(gamma))``.
* :func:`bernoulli_exp_multiples` flips, for every lane ``i``, a coin of probability
  ``exp(-c * g[i])`` for one rational ``c`` and non-negative integers ``g``. It writes ``g`` in
  binary, ``exp(-c g) = prod over set bits j of exp(-c 2**j)``, so every coin it flips has a
  rational parameter ``c 2**j`` shared by all lanes, and it visits the high bits first so that
  lanes with large ``g`` (the unlikely candidates) are rejected after one or two coins.

No floating-point number is involved in any probability: every comparison is between integers.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import numpy.typing as npt

from beam_dp.mechanisms.randomness import RandomSource

__all__ = ["bernoulli_exp", "bernoulli_exp_multiples", "bernoulli_rational"]

BoolArray = npt.NDArray[np.bool_]
_DIGIT_BITS = 16


def bernoulli_rational(p: Fraction, n: int, source: RandomSource) -> BoolArray:
    """Return ``n`` independent Bernoulli(``p``) coins for a rational ``p`` in [0, 1].

    A uniform U in [0, 1) is compared with ``p`` digit by digit (base 2**16): the coin is 1
    exactly when U < p. Lanes whose digit equals ``p``'s digit draw the next digit; when
    ``p``'s expansion ends, tied lanes have U >= p and fail.
    """
    if not 0 <= p <= 1:
        raise ValueError(f"'p' must be in [0, 1]; received {p}")
    out = np.zeros(n, dtype=bool)
    if n == 0 or p == 0:
        return out
    if p == 1:
        out[:] = True
        return out
    numerator, denominator = p.numerator, p.denominator
    undecided = np.arange(n)
    while undecided.size:
        digit, numerator = divmod(numerator << _DIGIT_BITS, denominator)
        words = source.words16(undecided.size)
        out[undecided[words < digit]] = True
        undecided = undecided[words == digit]
        if numerator == 0:  # p's expansion has ended: a tie means U >= p
            break
    return out


def _bernoulli_exp_at_most_one(gamma: Fraction, n: int, source: RandomSource) -> BoolArray:
    """Bernoulli(exp(-gamma)) for 0 <= gamma <= 1 (Canonne-Kamath-Steinke)."""
    out = np.zeros(n, dtype=bool)
    if gamma == 0:
        out[:] = True
        return out
    active = np.arange(n)
    k = 1
    while active.size:
        success = bernoulli_rational(gamma / k, active.size, source)
        # Lanes whose first failure is at step k have K = k: the coin is 1 when k is odd.
        if k % 2 == 1:
            out[active[~success]] = True
        active = active[success]
        k += 1
    return out


def bernoulli_exp(gamma: Fraction, n: int, source: RandomSource) -> BoolArray:
    """Return ``n`` independent Bernoulli(exp(-``gamma``)) coins, ``gamma`` rational >= 0."""
    if gamma < 0:
        raise ValueError(f"'gamma' must be >= 0; received {gamma}")
    alive = np.arange(n)
    whole = gamma.numerator // gamma.denominator
    fraction = gamma - whole
    one = Fraction(1)
    # exp(-gamma) = exp(-1) ** whole * exp(-fraction): every factor must succeed. Most lanes
    # fail within a few rounds, so the loop ends long before `whole` rounds when whole is big.
    rounds = 0
    while rounds < whole and alive.size:
        alive = alive[_bernoulli_exp_at_most_one(one, alive.size, source)]
        rounds += 1
    if alive.size and fraction:
        alive = alive[_bernoulli_exp_at_most_one(fraction, alive.size, source)]
    out = np.zeros(n, dtype=bool)
    out[alive] = True
    return out


def bernoulli_exp_multiples(
    c: Fraction, multiples: npt.NDArray[np.int64], source: RandomSource
) -> BoolArray:
    """Return one Bernoulli(exp(-``c`` * m)) coin per entry m of ``multiples``.

    Args:
        c: a rational >= 0 shared by all lanes.
        multiples: non-negative integers (int64, or an object array of Python ints).
        source: random bits.
    """
    if c < 0:
        raise ValueError(f"'c' must be >= 0; received {c}")
    n = int(multiples.shape[0])
    if n == 0:
        return np.zeros(0, dtype=bool)
    top = max(int(m) for m in multiples) if multiples.dtype == object else int(multiples.max())
    alive = np.arange(n)
    for bit in range(top.bit_length() - 1, -1, -1):
        if not alive.size:
            break
        if multiples.dtype == object:
            has_bit = np.fromiter(
                ((int(m) >> bit) & 1 for m in multiples[alive]), dtype=bool, count=alive.size
            )
        else:
            has_bit = ((multiples[alive] >> bit) & 1).astype(bool)
        lanes = alive[has_bit]
        if not lanes.size:
            continue
        survived = bernoulli_exp(c * (1 << bit), lanes.size, source)
        keep = np.ones(alive.size, dtype=bool)
        keep[np.flatnonzero(has_bit)[~survived]] = False
        alive = alive[keep]
    out = np.zeros(n, dtype=bool)
    out[alive] = True
    return out
