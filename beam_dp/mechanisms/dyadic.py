"""Exact coins for sampling against power-of-two envelopes of ``exp(-y)``.

A sampler whose target weights are ``exp(-y)`` for many rationals ``y`` can propose from the
*dyadic envelope* ``2**-s`` with any integer ``0 <= s <= y / ln 2``: the envelope weights are
exact rationals, so sums of them can be formed and sampled exactly with integer arithmetic,
and the proposal is then accepted with probability ``exp(-y) * 2**s``, which is at most 1.

* :func:`envelope_exponents` picks ``s = max(0, floor(y / ln 2 - 1))`` from a floating-point
  estimate of ``y``. The ``- 1`` absorbs the estimate's error (a relative error near
  ``2**-52`` on values below ``(CLAMP + 1) ln 2``), so ``s <= y / ln 2``; and
  ``exp(-y) * 2**s >= 1 / 4``, which keeps the acceptance rate of an envelope above 1/4 per
  factor. The coin re-checks ``s ln 2 <= y`` exactly and refuses otherwise. Estimates of
  ``(CLAMP + 1) ln 2`` or more all get ``s = CLAMP`` (:func:`bernoulli_envelope`).
* :func:`bernoulli_exp_times_power_of_two` flips ``Bernoulli(exp(-y) * 2**s)``, i.e.
  ``Bernoulli(exp(-z))`` with the irrational ``z = y - s ln 2``. It splits ``exp(-z)`` into
  three coins of ``exp(-z / 3)`` (``z / 3 < 1``) and flips each with the method of Canonne,
  Kamath and Steinke (2020, Algorithm 1: draw ``A_k ~ Bernoulli(w / k)`` until the first
  failure ``K``; ``P[K odd] = exp(-w)``). Each ``Bernoulli(w / k)`` compares a uniform ``U``
  with ``z / (3k)``, i.e. ``3 k U + s ln 2`` with ``y``, using exact integer bounds on
  ``ln 2`` and on ``U``, both refined 64 bits at a time until the comparison is decided. As
  ``s ln 2`` is irrational for ``s >= 1``, equality never holds and each refinement decides
  with probability at least ``1 - 2**-50`` (``sigma <= 202``): the loop ends with probability 1.
* :func:`bernoulli_half_power` flips ``Bernoulli(2**-k)`` for any ``k >= 0`` from ``k`` fair
  bits, 64 at a time (it stops at the first nonzero word).
* For samplers whose work must not depend on ``y`` (the joint pair, ``docs/timing.md``):
  :func:`fine_envelope_levels` picks a *fine* envelope weight ``k 2**-s / 16``
  (``9 <= k <= 16``) within a factor 9/8 of ``exp(-y)``, and
  :func:`exp_times_power_of_two_bounds` brackets ``exp(-y) 2**s`` between two integers over
  ``2**bits`` by integer arithmetic alone (no random bits): a coin is then a uniform of a
  fixed number of bits compared with the bracket, refined only when it falls inside it.

No floating-point number enters a probability: the float estimate only chooses ``s``.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from beam_dp.mechanisms.bernoulli import bernoulli_exp
from beam_dp.mechanisms.randomness import RandomSource

__all__ = [
    "CLAMP",
    "bernoulli_envelope",
    "bernoulli_exp_times_power_of_two",
    "bernoulli_half_power",
    "envelope_exponents",
    "exp_times_power_of_two_bounds",
    "fine_envelope_levels",
    "fine_level",
    "ln2_bounds",
    "scaled_exp_bounds",
]

_LN2 = math.log(2.0)

#: The largest envelope exponent: weights below ``2**-CLAMP`` are rounded up to it.
CLAMP = 202


@functools.lru_cache(maxsize=64)
def ln2_bounds(bits: int) -> tuple[int, int]:
    """Integers ``(low, high)`` with ``low < 2**bits * ln 2 < high``.

    ``ln 2 = sum_{k >= 1} 1 / (k 2**k)``. The first ``bits`` terms, each floored after scaling
    by ``2**bits``, lose less than 1 each, and the rest of the series is below
    ``1 / ((bits + 1) 2**bits)``, i.e. below 1 after scaling: so the scaled value lies strictly
    between ``low`` and ``low + bits + 1``.
    """
    if bits < 1:
        raise ValueError(f"'bits' must be >= 1; received {bits}")
    scale = 1 << bits
    low = sum(scale // (k << k) for k in range(1, bits + 1))
    return low, low + bits + 1


def envelope_exponents(estimates: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Envelope exponents for float estimates of ``y >= 0`` (see the module).

    ``max(0, floor(y / ln 2 - 1))``, at most ``CLAMP - 1``; estimates of at least
    ``(CLAMP + 1) ln 2`` get ``CLAMP`` itself, whose coin :func:`bernoulli_envelope` splits
    off a fixed rational part, so huge ``y`` need no precise estimate.

    Raises:
        ValueError: if an estimate is negative or NaN.
    """
    estimates = np.asarray(estimates, dtype=np.float64)
    if estimates.size and (np.isnan(estimates).any() or float(estimates.min()) < 0):
        raise ValueError("envelope estimates must be >= 0")
    small = estimates < (CLAMP + 1) * _LN2
    exponents = np.full(estimates.shape, CLAMP, dtype=np.int64)
    exponents[small] = np.maximum(np.floor(estimates[small] / _LN2 - 1.0), 0.0).astype(np.int64)
    return exponents


def bernoulli_half_power(k: int, source: RandomSource) -> bool:
    """``Bernoulli(2**-k)``: ``k`` fair bits, all zero."""
    if k < 0:
        raise ValueError("'k' must be >= 0")
    while k >= 64:
        if int(source.words64(1)[0]):
            return False
        k -= 64
    if k == 0:
        return True
    return int(source.words64(1)[0]) >> (64 - k) == 0


def _scaled_ln2_below(y: Fraction, sigma: int) -> bool:
    """Whether ``sigma * ln 2 <= y``, exactly (decided with ever finer bounds on ln 2)."""
    if sigma == 0:
        return y >= 0
    bits = 64
    while True:
        low, high = ln2_bounds(bits)
        if sigma * Fraction(high, 1 << bits) <= y:
            return True
        if sigma * Fraction(low, 1 << bits) >= y:
            return False
        bits += 64


def _below_z_over(y: Fraction, sigma: int, divisor: int, source: RandomSource) -> bool:
    """``Bernoulli((y - sigma ln 2) / divisor)``, sigma >= 1: ``divisor U + sigma ln 2 < y``."""
    u, u_bits = int(source.words64(1)[0]), 64
    ln2_bits = 64
    while True:
        low, high = ln2_bounds(ln2_bits)
        u_low = Fraction(divisor * u, 1 << u_bits)
        u_high = Fraction(divisor * (u + 1), 1 << u_bits)
        if u_high + sigma * Fraction(high, 1 << ln2_bits) <= y:
            return True
        if u_low + sigma * Fraction(low, 1 << ln2_bits) >= y:
            return False
        u, u_bits = (u << 64) | int(source.words64(1)[0]), u_bits + 64
        ln2_bits += 64


def bernoulli_exp_times_power_of_two(y: Fraction, sigma: int, source: RandomSource) -> bool:
    """``Bernoulli(exp(-y) * 2**sigma)`` for rational ``y`` and integer ``0 <= sigma <= y/ln 2``.

    Raises:
        ValueError: if ``sigma < 0``, or ``sigma ln 2 > y`` (the probability would exceed 1),
            or ``y / ln 2 - sigma > 3`` (outside the range the envelope produces).
    """
    if sigma < 0:
        raise ValueError("'sigma' must be >= 0")
    if sigma == 0:
        return bool(bernoulli_exp(y, 1, source)[0])
    if not _scaled_ln2_below(y, sigma):
        raise ValueError("'sigma' must satisfy sigma * ln 2 <= y")
    if _scaled_ln2_below(y, sigma + 4):
        raise ValueError("'sigma' must satisfy y < (sigma + 4) * ln 2")
    for _ in range(3):  # exp(-z) = exp(-z/3) ** 3 with z / 3 < 4 ln 2 / 3 < 1
        k = 1
        while _below_z_over(y, sigma, 3 * k, source):
            k += 1
        if k % 2 == 0:
            return False
    return True


@functools.lru_cache(maxsize=1)
def _clamp_point() -> Fraction:
    """A rational ``Y`` with ``CLAMP ln 2 < Y < (CLAMP + 1) ln 2 - 1/4``."""
    _, high = ln2_bounds(64)
    return CLAMP * Fraction(high, 1 << 64) + Fraction(1, 8)


def bernoulli_envelope(y: Fraction, exponent: int, source: RandomSource) -> bool:
    """``Bernoulli(exp(-y) * 2**exponent)`` for an exponent from :func:`envelope_exponents`.

    Below :data:`CLAMP` this is :func:`bernoulli_exp_times_power_of_two`. At ``CLAMP`` it is
    the product of two coins, ``exp(-(y - Y))`` (rational, exact) and ``exp(-Y) 2**CLAMP``
    for the fixed rational ``Y`` of :func:`_clamp_point`; it needs ``y >= Y``, which holds
    whenever the estimate of ``y`` was at least ``(CLAMP + 1) ln 2`` (checked exactly).
    """
    if exponent < CLAMP:
        return bernoulli_exp_times_power_of_two(y, exponent, source)
    if exponent != CLAMP:
        raise ValueError(f"'exponent' must be at most {CLAMP}")
    point = _clamp_point()
    if y < point:
        raise ValueError("a clamped envelope needs y >= its clamp point")
    if not bernoulli_exp(y - point, 1, source)[0]:
        return False
    return bernoulli_exp_times_power_of_two(point, CLAMP, source)


def _exp_neg_series(z: int, precision: int) -> tuple[int, int]:
    """Integers ``lo <= exp(-z 2**-precision) 2**precision <= hi`` for ``0 <= z <= 2**(p-1)``.

    The alternating Taylor series, whose terms decrease (``x <= 1/2``): the limit lies between
    two consecutive partial sums. Each term is carried as a floor and a ceiling, each partial
    sum as a lower bound (floors added, ceilings subtracted) and an upper bound; the loop ends
    once a term's ceiling is at most one unit.
    """
    one = 1 << precision
    term_lo = term_hi = sum_lo = sum_hi = one
    i = 0
    while True:
        i += 1
        term_lo = ((term_lo * z) >> precision) // i  # floor(floor(a / 2**p) / i) = floor
        term_hi = -((-(term_hi * z) >> precision) // i)  # likewise ceilings
        before_lo, before_hi = sum_lo, sum_hi
        if i & 1:
            sum_lo, sum_hi = sum_lo - term_hi, sum_hi - term_lo
        else:
            sum_lo, sum_hi = sum_lo + term_lo, sum_hi + term_hi
        if term_hi <= 1:
            return min(sum_lo, before_lo), max(sum_hi, before_hi)


def exp_times_power_of_two_bounds(y: Fraction, sigma: int, bits: int) -> tuple[int, int]:
    """Integers ``lo <= exp(-y) 2**sigma 2**bits <= hi``, for rational ``y >= 0`` and
    ``0 <= sigma`` with ``sigma ln 2 <= y`` (up to the bracket: ``ValueError`` when ``sigma ln 2``
    is certainly above ``y``).

    With ``z = y - sigma ln 2``: ``z`` is bracketed in fixed point at ``w`` bits (``y`` floored
    and ceiled, ``ln 2`` by :func:`ln2_bounds`), halved ``h`` times until it is at most 1/2,
    ``exp(-z 2**-h)`` bracketed by :func:`_exp_neg_series` at the upper end of ``z``'s
    bracket (``exp(-x)`` is 1-Lipschitz for ``x >= 0``, so the lower end costs the bracket's
    width), then squared ``h`` times, rounding down the lower bound and up the upper one.
    Integer arithmetic only, with ``w = bits + 24 + 2 h`` bits: for the coins of
    :func:`fine_envelope_levels` (``z < 2.1``, ``h <= 3``), ``hi - lo`` is a unit or two.
    """
    if sigma < 0 or y.numerator < 0:
        raise ValueError("'sigma' and 'y' must be >= 0")
    return scaled_exp_bounds(y.numerator, y.denominator, sigma, bits)


def scaled_exp_bounds(numerator: int, denominator: int, sigma: int, bits: int) -> tuple[int, int]:
    """:func:`exp_times_power_of_two_bounds` for ``y = numerator / denominator`` (not checked:
    ``numerator, sigma >= 0``, ``denominator > 0``), without building the fraction."""
    halvings = 0
    while True:
        work = bits + 24 + 2 * halvings
        y_low = (numerator << work) // denominator
        ln2_low, ln2_high = ln2_bounds(work)
        z_high = y_low + 1 - sigma * ln2_low
        if z_high < 0:
            raise ValueError("'sigma' must satisfy sigma * ln 2 <= y")
        needed = max(0, (z_high >> work).bit_length() + 1)  # z 2**-h <= 1/2
        if needed <= halvings:
            break
        halvings = needed
    z_low = max(0, y_low - sigma * ln2_high)
    precision = work + halvings  # z 2**-(work + h) = x 2**-h <= 1/2
    series_lo, high = _exp_neg_series(z_low, precision)
    low = max(0, series_lo - (z_high - z_low))
    for _ in range(halvings):
        low = (low * low) >> precision
        high = -(-(high * high) >> precision)
    shift = precision - bits
    return low >> shift, -(-high >> shift)


#: Mantissas per octave of the fine envelope: level ``L`` weighs ``k 2**-s / 16`` with
#: ``s = L // 8`` and ``k = 16 - L % 8`` (16/16 down to 9/16 of ``2**-s``).
FINE_STEPS = 8

#: The fine envelope's levels: octaves ``0 .. CLAMP + 1``.
FINE_LEVELS = FINE_STEPS * (CLAMP + 2)

#: Where :func:`fine_envelope_levels` caps ``y / ln 2`` (every larger ``y`` shares its level).
_FINE_CAP = CLAMP + 1.5

_FINE_MARGIN = 2.0**-30


def fine_level(level: int) -> tuple[int, int]:
    """``(k, s)`` of a fine level: its weight is ``k 2**-s / 16``."""
    return 16 - level % FINE_STEPS, level // FINE_STEPS


#: ``-log2(k / 16) + 2**-30`` for the mantissas ``k = 16, 15, ..., 9`` of an octave.
_FINE_THRESHOLDS = np.log2(16.0 / np.arange(16, 16 - FINE_STEPS, -1)) + _FINE_MARGIN


def fine_envelope_levels(estimates: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Fine envelope levels for float estimates of ``y >= 0``: ``exp(-y) <= weight`` and,
    below the cap, ``weight < (9/8)(1 + 2**-28) exp(-y)``.

    With ``e`` the float ``estimate / ln 2`` (capped at ``CLAMP + 1.5``), the level is the
    largest ``L`` with ``T_L <= e``, ``T_L = -log2(weight_L) + 2**-30`` (level 0, weight 1,
    when there is none: a weight of 1 bounds every ``exp(-y)``), found within the octave
    ``floor(e)`` by comparing ``e - floor(e)`` (exact in floats) with the eight
    ``-log2(k / 16) + 2**-30`` (below the first: the octave before's last level). The estimates are
    ``float(rate) * float(offset)`` (relative error below ``5 * 2**-53``, so ``|e - y / ln 2|
    < 2**-42`` below the cap) and each ``T_L`` is within ``2**-44`` of its value: the margin
    ``2**-30`` covers both, so ``weight_L >= 2**-(y / ln 2)``. The next level's weight is
    below ``2**-(y / ln 2)`` times ``2**(2**-29)``, and consecutive weights differ by at most
    a factor 9/8 (16/15, ..., 10/9, then 9/8 across an octave): hence the upper bound. Levels
    are non-decreasing in the estimate (weights non-increasing), and every level's ``s`` has
    ``s ln 2 <= y`` (its weight is at most ``2**-s``).

    Raises:
        ValueError: if an estimate is negative or NaN.
    """
    estimates = np.asarray(estimates, dtype=np.float64)
    if estimates.size and (np.isnan(estimates).any() or float(estimates.min()) < 0):
        raise ValueError("envelope estimates must be >= 0")
    ratio = np.minimum(estimates / _LN2, _FINE_CAP)
    octave = np.floor(ratio)
    step = np.searchsorted(_FINE_THRESHOLDS, ratio - octave, side="right") - 1  # exact f
    levels: npt.NDArray[np.int64] = np.maximum(
        FINE_STEPS * octave.astype(np.int64) + step, 0
    ).astype(np.int64)
    return levels
