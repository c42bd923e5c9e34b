"""Exact draws whose probabilities mix big integers with exponentials (pure Python).

The KS sampler needs two kinds of draw beyond the coins of :mod:`beam_dp.mechanisms.bernoulli`:

* **An index with probability proportional to** ``w_i = A_i * exp(-x_i) * (1 - exp(-y_i))``
  for big integers ``A_i`` and rationals ``x_i, y_i``. Coins alone cannot do this efficiently:
  a coin can only *lower* a probability, so a rational proposal ``∝ A_i`` followed by a coin
  ``exp(-x_i)`` accepts with probability ``sum_i A_i exp(-x_i) / sum_i A_i``, which is
  astronomically small when the large ``A_i`` sit where ``exp(-x_i)`` is tiny (as they do for
  the KS bands). :class:`IndexSampler` instead inverts the cumulative distribution exactly: it
  draws a uniform ``U`` lazily, 64 bits at a time, and compares it with *rigorous rational
  bounds* on the cumulative weights (:func:`exp_neg_bounds`, :func:`one_minus_exp_neg_bounds`:
  alternating Taylor series, whose consecutive partial sums bracket the limit, and outward
  rounding), refining the bounds until ``U`` falls unambiguously in one bucket. No float is
  ever involved; the loop ends with probability 1 (the chance of still being undecided after
  ``r`` refinements is at most the total width of the bounds plus ``2**-64r``, which goes to 0),
  after one round except with probability about ``2**-50``.
* **Truncated geometric offsets** ``P(G = g) ∝ exp(-gamma g)`` on ``0 <= g < width`` (or on all
  ``g >= 0``), built only from the existing exact coins (:func:`truncated_geometric`).
* **A coin with a rational probability** ``a / b`` of big integers (:func:`bernoulli_ratio`),
  whose number of random bits has the same law for every ``a / b``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from fractions import Fraction

from beam_dp.mechanisms.bernoulli import geometric_exp
from beam_dp.mechanisms.randomness import RandomSource

__all__ = [
    "BitStream",
    "IndexSampler",
    "bernoulli_ratio",
    "choose_index",
    "exp_neg_bounds",
    "geometric",
    "geometric_many",
    "one_minus_exp_neg_bounds",
    "randbelow",
    "truncated_geometric",
]

_HALF = Fraction(1, 2)
_ONE = Fraction(1)
_U_WORD_BITS = 64
_FIRST_BITS = 64


def _alternating_series(z: int, p: int, offset: int) -> tuple[int, int]:
    """Bounds, in units of ``2**-p``, on ``sum_{i>=0} (-1)**i v_i`` with ``v_0 = 1`` and
    ``v_i = v_{i-1} * (z 2**-p) / (i + offset)``, for ``0 <= z 2**-p <= 1``.

    The terms decrease, so the limit lies between any two consecutive partial sums. Each term
    is carried as a floor and a ceiling in fixed point (``2**-p``), and each partial sum as a
    lower bound (floors of added terms, ceilings of subtracted ones) and an upper bound; the
    loop stops once a term's ceiling is at most one unit.
    """
    one = 1 << p
    term_lo = term_hi = one
    sum_lo = sum_hi = one  # bounds on the partial sum S_i
    previous_lo, previous_hi = sum_lo, sum_hi  # bounds on S_{i-1}
    i = 0
    while True:
        i += 1
        divisor = (i + offset) << p
        term_lo = term_lo * z // divisor
        term_hi = -(-term_hi * z // divisor)
        previous_lo, previous_hi = sum_lo, sum_hi
        if i % 2:
            sum_lo, sum_hi = sum_lo - term_hi, sum_hi - term_lo
        else:
            sum_lo, sum_hi = sum_lo + term_lo, sum_hi + term_hi
        if term_hi <= 1:
            return (min(sum_lo, previous_lo), max(sum_hi, previous_hi))


def _floor_scaled(value: Fraction, shift: int) -> int:
    return (value.numerator << shift) // value.denominator


def _ceil_scaled(value: Fraction, shift: int) -> int:
    return -(-(value.numerator << shift) // value.denominator)


def _dyadic(mantissa: int, exponent: int) -> Fraction:
    """``mantissa * 2**exponent``."""
    if exponent >= 0:
        return Fraction(mantissa << exponent)
    return Fraction(mantissa, 1 << -exponent)


def exp_neg_bounds(x: Fraction, bits: int) -> tuple[Fraction, Fraction]:
    """Rationals ``lo <= exp(-x) <= hi`` with ``hi / lo <= 1 + 2**(4 - bits)`` for ``x >= 0``.

    ``x`` is halved ``r`` times until it is at most 1/2, ``exp(-x / 2**r)`` is bracketed by
    consecutive partial sums of its alternating Taylor series (fixed point, directed rounding,
    ``bits + r + 16`` bits; ``x / 2**r`` rounded up for the lower bound and down for the upper),
    and the bracket is squared ``r`` times, rounding the lower bound down and the upper bound
    up to that many significant bits each time. Exact integer arithmetic throughout.
    """
    if x < 0:
        raise ValueError("'x' must be >= 0")
    if x == 0:
        return (_ONE, _ONE)
    halvings = 0
    while x > _HALF * (1 << halvings):
        halvings += 1
    precision = bits + halvings + 16
    z = x / (1 << halvings)
    low = _alternating_series(_ceil_scaled(z, precision), precision, 0)[0]  # decreasing in z
    high = _alternating_series(_floor_scaled(z, precision), precision, 0)[1]
    exponent_low = exponent_high = -precision
    for _ in range(halvings):
        low, high = low * low, high * high
        exponent_low, exponent_high = 2 * exponent_low, 2 * exponent_high
        extra = low.bit_length() - precision
        if extra > 0:
            low >>= extra
            exponent_low += extra
        extra = high.bit_length() - precision
        if extra > 0:
            high = -(-high >> extra)
            exponent_high += extra
    return (_dyadic(low, exponent_low), _dyadic(high, exponent_high))


def one_minus_exp_neg_bounds(y: Fraction, bits: int) -> tuple[Fraction, Fraction]:
    """Rationals ``lo <= 1 - exp(-y) <= hi`` with relative width about ``2**-bits``, ``y > 0``.

    For ``y >= 1/2`` from :func:`exp_neg_bounds`; below, as ``y * sum_i (-1)**i y**i / (i+1)!``
    with ``y`` carried to ``bits + 16`` significant bits, so that tiny ``y`` keeps its
    relative precision (``1 - exp(-y)`` is increasing: ``y`` rounded down for the lower bound).
    """
    if y <= 0:
        raise ValueError("'y' must be > 0")
    if y >= _HALF:
        lo, hi = exp_neg_bounds(y, bits + 2)
        return (1 - hi, 1 - lo)
    precision = bits + 16
    shift = precision - (y.numerator.bit_length() - y.denominator.bit_length())
    y_low, y_high = _floor_scaled(y, shift), _ceil_scaled(y, shift)  # y 2**shift, <= 2**shift
    series_low = _alternating_series(y_low, shift, 1)[0]  # units of 2**-shift
    series_high = _alternating_series(y_high, shift, 1)[1]
    return (_dyadic(y_low * series_low, -2 * shift), _dyadic(y_high * series_high, -2 * shift))


BoundsAt = Callable[[int], Sequence[tuple[Fraction, Fraction]]]


class IndexSampler:
    """Draws ``i`` with probability ``w_i / sum_j w_j``, exactly, for weights known by bounds.

    Args:
        bounds_at: ``bounds_at(bits)`` returns, for every ``i``, rationals
            ``0 <= lo_i <= w_i <= hi_i`` whose relative width is at most about ``2**-bits``.
            The weights must not all be 0.

    Inversion with a lazily drawn uniform ``U`` in [0, 1): in round ``r`` (``r = 0, 1, ...``)
    ``U`` is known to ``t = 64 (r + 1)`` bits, as ``[u 2**-t, (u + 1) 2**-t)``, and the weights
    to ``64 * 2**r`` bits. Bucket ``i`` is ``[F_{i-1}, F_i)`` with ``F_i = W_{<=i} / W``, and
    ``L_i = lo_{<=i} / (lo_{<=i} + hi_{>i}) <= F_i <= hi_{<=i} / (hi_{<=i} + lo_{>i}) = H_i``
    (``F_{-1} = 0``, ``F_last = 1``). With ``lower_i = floor(L_i 2**t)`` and
    ``upper_i = ceil(H_i 2**t)``, ``U`` is certainly in bucket ``i`` when
    ``upper_{i-1} <= u`` and ``u + 1 <= lower_i``; then ``i`` is returned. The only candidate is
    the first ``i`` with ``lower_i >= u + 1`` (any later one would need ``upper_{j-1} <= u``,
    but ``upper_{j-1} >= lower_i``). Otherwise ``U`` gets 64 more bits and the next round
    starts. A round is undecided only if ``U`` lies within the bounds' width of a boundary, so
    the loop ends with probability 1 (after the first round except with probability about
    ``2**-55`` per boundary). The thresholds of each round are computed once and reused.
    """

    def __init__(self, bounds_at: BoundsAt):
        self._bounds_at = bounds_at
        self._rounds: list[tuple[list[int], list[int]]] = []

    def _thresholds(self, round_index: int) -> tuple[list[int], list[int]]:
        while len(self._rounds) <= round_index:
            r = len(self._rounds)
            bits = _FIRST_BITS << r
            lows, highs = _common_scale(list(self._bounds_at(bits)), bits + 16)
            scale = 1 << (_U_WORD_BITS * (r + 1))
            total_lo, total_hi = sum(lows), sum(highs)
            if total_hi <= 0:
                raise ValueError("the weights must not all be 0")
            lowers: list[int] = []
            uppers: list[int] = []
            cum_lo = cum_hi = 0
            for lo, hi in zip(lows[:-1], highs[:-1], strict=True):
                cum_lo += lo
                cum_hi += hi
                low_den = cum_lo + (total_hi - cum_hi)  # > 0: total_hi > 0
                high_den = cum_hi + (total_lo - cum_lo)
                lowers.append(cum_lo * scale // low_den)  # floor(L_i * 2**t)
                uppers.append(-(-cum_hi * scale // high_den) if high_den else scale)  # ceil
            lowers.append(scale)  # F_last = 1
            uppers.append(scale)
            self._rounds.append((lowers, uppers))
        return self._rounds[round_index]

    def sample(self, source: RandomSource) -> int:
        """One exact draw."""
        return self.sample_many(1, source)[0]

    def sample_many(self, n: int, source: RandomSource) -> list[int]:
        """``n`` independent exact draws (the first 64 bits of every ``U`` read at once)."""
        out = []
        for word in source.words64(n).tolist():
            u = int(word)
            round_index = 0
            while True:
                lowers, uppers = self._thresholds(round_index)
                i = bisect.bisect_left(lowers, u + 1)
                if i < len(lowers) and (i == 0 or uppers[i - 1] <= u):
                    out.append(i)
                    break
                round_index += 1
                u = (u << _U_WORD_BITS) | int(source.words64(1)[0])
        return out


def _common_scale(
    bounds: list[tuple[Fraction, Fraction]], bits: int
) -> tuple[list[int], list[int]]:
    """Integers ``floor(lo_i 2**s)`` and ``ceil(hi_i 2**s)`` with ``2**s`` chosen so that the
    largest ``hi`` has about ``bits`` bits: still rigorous bounds (up to a common factor), and
    integer sums avoid the huge gcds of adding rationals of very different magnitudes."""
    exponent = max(
        (hi.numerator.bit_length() - hi.denominator.bit_length() for _, hi in bounds if hi > 0),
        default=0,
    )
    shift = bits - exponent
    lows: list[int] = []
    highs: list[int] = []
    for lo, hi in bounds:
        for value, out, up in ((lo, lows, False), (hi, highs, True)):
            if shift >= 0:
                quotient, remainder = divmod(value.numerator << shift, value.denominator)
            else:
                quotient, remainder = divmod(value.numerator, value.denominator << -shift)
            out.append(quotient + (1 if up and remainder else 0))
    return lows, highs


def choose_index(bounds_at: BoundsAt, source: RandomSource) -> int:
    """One exact draw of :class:`IndexSampler` (see there)."""
    return IndexSampler(bounds_at).sample(source)


def randbelow(bound: int, source: RandomSource) -> int:
    """An integer uniform on ``[0, bound)``: uniform bits, rejected until below ``bound``.

    Each try keeps ``bound.bit_length()`` random bits, so it succeeds with probability > 1/2.
    """
    if bound < 1:
        raise ValueError("'bound' must be >= 1")
    if bound == 1:
        return 0
    bits = (bound - 1).bit_length()
    nbytes = (bits + 7) // 8
    while True:
        value = int.from_bytes(source.random_bytes(nbytes), "little") >> (8 * nbytes - bits)
        if value < bound:
            return value


def geometric(gamma: Fraction, source: RandomSource) -> int:
    """``P(G = g) = (1 - e**-gamma) e**(-gamma g)`` for ``g >= 0``, exactly (``gamma > 0``).

    One draw of :func:`geometric_many`.
    """
    return geometric_many(gamma, 1, source)[0]


def geometric_many(gamma: Fraction, n: int, source: RandomSource) -> list[int]:
    """``n`` independent draws of ``P(G = g) = (1 - e**-gamma) e**(-gamma g)``, ``g >= 0``.

    :func:`~beam_dp.mechanisms.bernoulli.geometric_exp` (``P(G >= g) = e**(-gamma g)``), as
    Python integers: the random bits it uses have a law that depends on ``gamma`` and ``n``
    only.
    """
    if gamma <= 0:
        raise ValueError("'gamma' must be > 0")
    return [int(g) for g in geometric_exp(gamma, n, source)]


def truncated_geometric(gamma: Fraction, width: int | None, source: RandomSource) -> int:
    """``P(G = g) ∝ exp(-gamma g)`` on ``0 <= g < width`` (all ``g >= 0`` if ``width`` is None).

    :func:`geometric` taken modulo ``width``: ``P(G mod w = g) = sum_v (1 - e**-gamma)
    e**(-gamma (g + v w)) ∝ e**(-gamma g)`` for ``0 <= g < w``. No draw is ever rejected, so
    the random bits it uses have a law that depends on ``gamma`` only, not on ``width``.
    """
    if gamma <= 0:
        raise ValueError("'gamma' must be > 0")
    if width is not None and width < 1:
        raise ValueError("'width' must be >= 1")
    g = geometric(gamma, source)
    return g if width is None else g % width


class BitStream:
    """Uniform random bits one at a time, read from a source 64 bits at a time."""

    def __init__(self, source: RandomSource):
        self.source = source
        self._word = 0
        self._left = 0

    def bit(self) -> int:
        """One uniform bit."""
        if not self._left:
            self._word = int(self.source.words64(1)[0])
            self._left = 64
        out = self._word & 1
        self._word >>= 1
        self._left -= 1
        return out


def bernoulli_ratio(numerator: int, denominator: int, bits: BitStream) -> bool:
    """True with probability ``numerator / denominator`` exactly (``0 <= num <= den``, ``den > 0``).

    Compares a lazily drawn uniform ``U = 0.u_1 u_2 ...`` with the binary expansion
    ``x = 0.x_1 x_2 ...`` of the ratio (long division; ``1 = 0.111...``) and returns whether
    ``U < x`` at the first bit where they differ. Each step differs with probability exactly 1/2
    whatever ``x_j``, so the number of bits used is geometric with parameter 1/2 for every
    ratio: the work reveals nothing about it. The loop ends with probability 1.
    """
    if denominator <= 0 or not 0 <= numerator <= denominator:
        raise ValueError("'numerator / denominator' must be a probability")
    remainder = numerator
    while True:
        remainder <<= 1
        digit = 1 if remainder >= denominator else 0
        if digit:
            remainder -= denominator
        drawn = bits.bit()
        if drawn != digit:
            return drawn < digit
