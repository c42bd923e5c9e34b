"""Exact, vectorised Bernoulli coins.

Three layers, each exact given uniform random bits:

* :func:`bernoulli_rational` flips ``n`` coins of one rational probability ``p`` by comparing
  uniform random 16-bit digits with the base-2**16 expansion of ``p``, lazily: a lane is decided
  at the first digit where it differs from ``p`` and only tied lanes draw another digit.
* :func:`bernoulli_exp` flips ``n`` coins of probability ``exp(-gamma)`` for one rational
  ``gamma >= 0`` with the method of Canonne, Kamath and Steinke (2020, "The Discrete Gaussian
  for Differential Privacy", Algorithm 1): for ``gamma`` in [0, 1], draw ``A_k ~
  Bernoulli(gamma / k)`` for ``k = 1, 2, ...`` until the first failure ``K``; then
  ``P[K odd] = exp(-gamma)``. Since only the law of ``K`` matters, ``K`` is read off a single
  uniform per lane (see :func:`_bernoulli_exp_at_most_one`). Larger ``gamma`` splits as
  ``exp(-1) ** floor(gamma) * exp(-frac(gamma))``.
* :func:`bernoulli_exp_multiples_walk` flips, for every lane ``i``, a coin of probability
  ``exp(-c * g[i])`` for one rational ``c`` and non-negative integers ``g``. It writes ``g`` in
  binary, ``exp(-c g) = prod over set bits j of exp(-c 2**j)``, so every coin it flips has a
  rational parameter ``c 2**j`` shared by all lanes, and it visits the high bits first so that
  lanes with large ``g`` are rejected after one or two coins. Its work depends on ``g``: it
  is only for multiples whose law is public (a uniform proposal inside another sampler).
* :func:`bernoulli_exp_multiples` flips the same coins on private multiples (score gaps) with
  work whose law depends on ``c`` and the number of lanes only: each lane draws one geometric
  ``G`` with ``P(G >= g) = exp(-c g)`` (:func:`geometric_exp`) and its coin is ``[G >= g]``.
  Nothing is drawn per bit or per lane of ``g``, and no lane skips its draw when ``g = 0``.

No floating-point number is involved in any probability: every comparison is between integers.
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_dp.mechanisms.randomness import RandomSource

__all__ = [
    "bernoulli_exp",
    "bernoulli_exp_multiples",
    "bernoulli_exp_multiples_walk",
    "bernoulli_rational",
    "geometric_exp",
]

BoolArray = npt.NDArray[np.bool_]
_DIGIT_BITS = 16


def bernoulli_rational(p: Fraction, n: int, source: RandomSource) -> BoolArray:
    """Return ``n`` independent Bernoulli(``p``) coins for a rational ``p`` in [0, 1].

    A uniform U in [0, 1) is compared with ``p`` digit by digit (base 2**16): the coin is 1
    exactly when U < p. Lanes whose digit equals ``p``'s digit draw the next digit; when
    ``p``'s expansion ends, tied lanes have U >= p and fail.
    """
    if not 0 <= p <= 1:
        raise ValueError("'p' must be in [0, 1]")
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


_STAGE_BITS = 16
_MAX_STAGE_BITS = 64
_TABLE_MIN_LANES = 1 << 16


@functools.lru_cache(maxsize=1024)
def _stage_thresholds(gamma: Fraction, bits: int) -> tuple[int, npt.NDArray[np.uint64]]:
    """(always, scaled): how many t_k = gamma**k / k! are >= 1, and floor(t_k * 2**bits)
    ascending for the t_k in [2**-bits, 1)."""
    scale = 1 << bits
    limit = Fraction(1, scale)
    always = 0
    scaled: list[int] = []
    t = Fraction(1)
    k = 1
    while True:
        t = t * gamma / k
        if t < limit:
            break
        if t >= 1:
            always += 1
        else:
            scaled.append(int(t * scale))
        k += 1
    return always, np.array(sorted(scaled), dtype=np.uint64)


def _stage(
    gamma: Fraction, prefix: npt.NDArray[np.uint64], bits: int
) -> tuple[npt.NDArray[np.int64], BoolArray]:
    """#{k : U < t_k} from U's first ``bits`` bits ``prefix``, and which lanes are undecided.

    A lane is undecided when its prefix equals floor(t_k * 2**bits) for some k (t_k lies in
    the lane's interval) or is zero (the infinitely many t_k below 2**-bits may exceed U).
    """
    always, scaled = _stage_thresholds(gamma, bits)
    right = np.searchsorted(scaled, prefix, side="right")
    count = (scaled.size - right).astype(np.int64) + always
    if scaled.size:
        tied = ((right > 0) & (scaled[np.maximum(right - 1, 0)] == prefix)) | (prefix == 0)
    else:
        tied = prefix == 0
    return count, tied


@functools.lru_cache(maxsize=64)
def _stage_table(gamma: Fraction) -> tuple[npt.NDArray[np.int8], BoolArray]:
    """The first stage for every possible 16-bit prefix: a lookup replaces the search."""
    count, tied = _stage(gamma, np.arange(1 << _STAGE_BITS, dtype=np.uint64), _STAGE_BITS)
    return (count % 2).astype(np.int8), tied


def _count_below_exact(gamma: Fraction, prefix: int, bits: int, source: RandomSource) -> int:
    """#{k >= 1 : U < t_k}, ``t_k = gamma**k / k!``, for U uniform given its first ``bits`` bits.

    The last, exact resort (reached with probability about 2**-64 per coin). U is known to lie
    in ``[low, high)`` with ``low = prefix / 2**bits`` and ``high = low + 2**-bits``; a
    threshold ``t`` is *decided* when ``t >= high`` (then ``U < t``) or ``t <= low`` (then
    ``U >= t``). For ``0 < gamma <= 1`` the thresholds strictly decrease,
    ``t_{k+1} = t_k gamma / (k + 1) <= t_k / 2``, and ``t_k <= 1/k! <= 2**(1-k)``.

    * Inner loop: count the thresholds ``t_k >= high`` in order and stop at the first one below
      ``high``. It ends, after at most ``b + 2`` steps when ``high >= 2**-b``, because
      ``t_k <= 2**(1-k) < high`` for ``k > b + 1``. If that first threshold is ``<= low``,
      it and every later (smaller) one are ``<= U``: the count is complete and exact. This
      also covers ``prefix == 0``, where ``low == 0`` and infinitely many thresholds lie in
      ``(low, high)``: the loop never looks past the first undecided one.
    * Outer loop: otherwise that threshold lies strictly inside ``(low, high)``, and 64 more
      bits of U are drawn, which picks one of the 2**64 equal subintervals uniformly (and
      shrinks ``high``, so thresholds already counted stay decided). The next pass fails to
      decide only if the chosen subinterval has a threshold strictly inside it. Each threshold
      is inside at most one subinterval; at most ``b' + 1`` thresholds are ``>= 2**-b'``
      (``b'`` the number of bits after drawing), and the smaller ones can only be inside the
      first subinterval (when ``low == 0``). So each refinement decides with probability at
      least ``1 - (b' + 2) 2**-64`` (``b' = 128`` on the first one from ``bits = 64``), and
      the probability of ``r`` refinements is at most the product of these failure terms,
      which tends to 0: the loop ends with probability 1, after one refinement in all but a
      ``2**-56`` fraction of the calls.

    The law is exact: the result is a function of the bits of U drawn so far, and it is
    returned only once those bits decide every comparison ``U < t_k``.
    """
    if not 0 < gamma <= 1:
        raise ValueError("'gamma' must be in (0, 1]")
    low = Fraction(prefix, 1 << bits)
    width = Fraction(1, 1 << bits)
    count, k, t = 0, 1, gamma  # t is t_k, the first threshold not yet counted
    while True:
        high = low + width
        while t >= high:  # U < t for sure
            count += 1
            k += 1
            t = t * gamma / k
        if t <= low:  # U >= t, and every later threshold is smaller still
            return count
        # low < t < high: t is undecided. Draw 64 more bits of U.
        width /= 1 << 64
        low += int(source.words64(1)[0]) * width


def _bernoulli_exp_at_most_one(gamma: Fraction, n: int, source: RandomSource) -> BoolArray:
    """Bernoulli(exp(-gamma)) for 0 <= gamma <= 1, from one uniform U per lane.

    Canonne-Kamath-Steinke draw A_k ~ Bernoulli(gamma / k) until the first failure K and
    return [K odd]. Only the law of K matters: P[K > k] = gamma**k / k! =: t_k, which is
    non-increasing in k. So K - 1 can be read off one uniform U as #{k >= 1 : U < t_k} (the
    events {U < t_k} are nested with exactly those probabilities), and the coin is
    [K - 1 even]. U is drawn 16 bits at a time: the first 16 bits decide all but about one
    lane in 5000; those draw 16 more, and so on to 64 bits, after which the exact rational
    comparison of :func:`_count_below_exact` takes over.
    """
    if gamma == 0:
        return np.ones(n, dtype=bool)
    words = source.words16(n)
    if gamma == 1 or n >= _TABLE_MIN_LANES:
        parity, tied_table = _stage_table(gamma)
        coins: BoolArray = parity[words] == 0
        tied = tied_table[words]
    else:
        count, tied = _stage(gamma, words.astype(np.uint64), _STAGE_BITS)
        coins = count % 2 == 0
    lanes = np.flatnonzero(tied)
    if not lanes.size:
        return coins
    prefix = words[lanes].astype(np.uint64)
    bits = _STAGE_BITS
    while lanes.size and bits < _MAX_STAGE_BITS:
        bits += _STAGE_BITS
        prefix = (prefix << np.uint64(_STAGE_BITS)) | source.words16(lanes.size).astype(np.uint64)
        count, tied = _stage(gamma, prefix, bits)
        coins[lanes] = count % 2 == 0
        lanes, prefix = lanes[tied], prefix[tied]
    for lane, value in zip(lanes.tolist(), prefix.tolist(), strict=True):
        coins[lane] = _count_below_exact(gamma, int(value), bits, source) % 2 == 0
    return coins


def bernoulli_exp(gamma: Fraction, n: int, source: RandomSource) -> BoolArray:
    """Return ``n`` independent Bernoulli(exp(-``gamma``)) coins, ``gamma`` rational >= 0."""
    if gamma < 0:
        raise ValueError("'gamma' must be >= 0")
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


def _top_bits(multiples: npt.NDArray[np.int64]) -> npt.NDArray[np.uint8]:
    """floor(log2(m)) for positive int64 m, exactly (float rounding is corrected)."""
    as_float = multiples.astype(np.float64)
    # the biased exponent field of a positive float64 is floor(log2(x)) + 1023
    top = ((as_float.view(np.uint64) >> np.uint64(52)).astype(np.int64)) - 1023
    if int(multiples.max()) >= (1 << 53):  # rounding to float may have carried into a power of 2
        top = np.minimum(top, 62)
        one = np.int64(1)
        top[(one << top) > multiples] -= 1
    return top.astype(np.uint8)


def _walk_objects(c: Fraction, multiples: npt.NDArray[Any], source: RandomSource) -> BoolArray:
    """The same coins for Python-int multiples (slow path for values beyond int64)."""
    values = [int(m) for m in multiples]
    alive = np.arange(len(values))
    for bit in range(max(values).bit_length() - 1, -1, -1):
        if not alive.size:
            break
        has_bit = np.fromiter(((values[i] >> bit) & 1 for i in alive), dtype=bool, count=alive.size)
        lanes = np.flatnonzero(has_bit)
        if not lanes.size:
            continue
        survived = bernoulli_exp(c * (1 << bit), lanes.size, source)
        keep = np.ones(alive.size, dtype=bool)
        keep[lanes[~survived]] = False
        alive = alive[keep]
    out = np.zeros(len(values), dtype=bool)
    out[alive] = True
    return out


def bernoulli_exp_multiples_walk(
    c: Fraction, multiples: npt.NDArray[Any], source: RandomSource
) -> BoolArray:
    """Return one Bernoulli(exp(-``c`` * m)) coin per entry m of ``multiples``, by their bits.

    ``exp(-c m)`` is the product over the set bits j of m of ``exp(-c 2**j)``; the coin is the
    AND of one coin per set bit. Bits are visited from the highest down, and a lane joins
    when the walk reaches its own top bit, so lanes that die at their first (largest) coin,
    which is most of them when m is large, cost one coin and nothing else.

    **Its work depends on the multiples** (the passes are the bits of the largest; a lane
    whose multiple is 0 draws nothing). Use it only on multiples whose law is public, such as
    the uniform proposals of :func:`geometric_exp`; private multiples (score gaps) go through
    :func:`bernoulli_exp_multiples`.

    Args:
        c: a rational >= 0 shared by all lanes.
        multiples: non-negative integers (int64, or an object array of Python ints).
        source: random bits.
    """
    if c < 0:
        raise ValueError("'c' must be >= 0")
    n = int(multiples.shape[0])
    out = np.zeros(n, dtype=bool)
    if n == 0:
        return out
    if multiples.dtype == object:
        return _walk_objects(c, multiples, source)
    out[multiples == 0] = True
    lanes = np.flatnonzero(multiples)
    if not lanes.size:
        return out
    values = multiples[lanes]
    top = _top_bits(values)
    highest = int(top.max())
    order = np.argsort(np.uint8(highest) - top, kind="stable")  # top bit, descending
    sorted_top = top[order]
    survivors = np.zeros(0, dtype=np.int64)  # positions into `values`
    start = 0
    for bit in range(highest, -1, -1):
        stop = start + int(
            np.searchsorted(highest - sorted_top[start:], highest - bit, side="right")
        )
        entrants = order[start:stop]
        start = stop
        if survivors.size:
            has_bit = ((values[survivors] >> bit) & 1).astype(bool)
            flip = np.concatenate([entrants, survivors[has_bit]])
            passing = survivors[~has_bit]
        else:
            flip, passing = entrants, survivors
        if not flip.size:
            continue
        coins = bernoulli_exp(c * (1 << bit), flip.size, source)
        survivors = np.concatenate([passing, flip[coins]])
    out[lanes[survivors]] = True
    return out


def _proposal_batch(n: int) -> int:
    """Proposals a lane of :func:`geometric_exp` draws per pass: 8 for a few lanes (one pass
    nearly always suffices, instead of one call per pass), fewer as the lanes grow (their
    bytes would dominate). A function of ``n`` alone."""
    return max(1, min(8, 4096 // max(n, 1)))


def geometric_exp(c: Fraction, n: int, source: RandomSource) -> npt.NDArray[Any]:
    """``n`` independent draws of ``G >= 0`` with ``P(G >= g) = exp(-c g)``, ``c`` rational > 0.

    With ``t = ceil(1 / (4 c))``: ``G = U + t V``, where ``U`` is a uniform proposal on
    ``[0, t)`` kept with probability ``exp(-c U)`` and ``V`` counts the successes of
    ``exp(-c t)`` coins before the first failure (Canonne, Kamath and Steinke 2020,
    Algorithm 2, with ``t`` chosen so that ``c t >= 1/4``; for ``c >= 1/4``, ``t = 1`` and
    ``G = V``). ``P(U = u) P(V = v)`` is proportional to ``exp(-c (u + t v))`` and
    ``(u, v) -> u + t v`` is a bijection onto the naturals, so ``P(G = g)`` is proportional to
    ``exp(-c g)``. Each lane draws its
    proposals :func:`_proposal_batch` at a time and keeps its first kept one in draw order,
    which is the sequential procedure; likewise ``V``'s coins, whose count of leading
    successes is the same as one coin at a time.

    Work: every request's size and bound is a function of ``c``, ``n`` and bits already
    drawn, never of anything else. A proposal is kept with probability above ``exp(-1/4)``
    (``c (t - 1) < 1/4``), and a ``V`` coin succeeds with probability at most ``exp(-1/4)``
    (``c t >= 1/4``), so both loops end with probability 1 after a few passes, with laws that
    depend on ``c`` and ``n`` only. Returns int64, or Python ints (object) when ``G`` could
    pass 2**62.
    """
    if c <= 0:
        raise ValueError("'c' must be > 0")
    t = -((-c.denominator) // (4 * c.numerator))  # ceil(1 / (4 c)): 1 when c >= 1/4
    u: npt.NDArray[Any] = np.zeros(n, dtype=np.int64 if t <= (1 << 62) else object)
    todo = np.arange(n)
    batch = _proposal_batch(n)
    while t > 1 and todo.size:
        size = todo.size * batch
        if t <= (1 << 62):
            proposals: npt.NDArray[Any] = source.below(t, size)
        else:  # a rate below 2**-62: exact Python integers
            proposals = np.array([source.randbelow(t) for _ in range(size)], dtype=object)
        proposals = proposals.reshape(todo.size, batch)
        kept = bernoulli_exp_multiples_walk(c, proposals.reshape(-1), source).reshape(
            todo.size, batch
        )
        found = np.flatnonzero(kept.any(axis=1))
        first = kept.argmax(axis=1)  # each lane's first kept proposal, in draw order
        u[todo[found]] = proposals[found, first[found]]
        todo = np.delete(todo, found)
    v = np.zeros(n, dtype=np.int64)
    alive = np.arange(n)
    step = c * t
    while alive.size:  # each lane flips `batch` coins a pass and counts its leading successes
        coins = bernoulli_exp(step, alive.size * batch, source).reshape(alive.size, batch)
        leading = np.where(coins.all(axis=1), batch, coins.argmin(axis=1))
        v[alive] += leading
        alive = alive[leading == batch]
    if n and t * (int(v.max()) + 1) > (1 << 62):
        return np.array([int(a) + t * int(b) for a, b in zip(u, v, strict=True)], dtype=object)
    return u.astype(np.int64) + np.int64(t) * v


def bernoulli_exp_multiples(
    c: Fraction, multiples: npt.NDArray[Any], source: RandomSource
) -> BoolArray:
    """Return one Bernoulli(exp(-``c`` * m)) coin per entry m of ``multiples``, with public work.

    For private multiples (the gaps of a selection's scores). Every lane draws one ``G`` of
    :func:`geometric_exp` and its coin is ``[G >= m]``: ``P(G >= m) = exp(-c m)``, and the
    lanes' ``G`` are independent. The random bits drawn, and every request made for them,
    have a law that depends on ``c`` and the number of lanes only: nothing is drawn per bit of
    ``m``, a lane with ``m = 0`` draws like every other, and the multiples are read only by
    the final comparison. (:func:`bernoulli_exp_multiples_walk` draws fewer bits, by the
    bits of each ``m``, which publishes the multiples' sizes in the work.)

    Args:
        c: a rational >= 0 shared by all lanes (public).
        multiples: non-negative integers (int64, or an object array of Python ints).
        source: random bits.
    """
    if c < 0:
        raise ValueError("'c' must be >= 0")
    n = int(multiples.shape[0])
    if c == 0:  # exp(0): every coin succeeds, and c is public
        return np.ones(n, dtype=bool)
    draws = geometric_exp(c, n, source)
    if draws.dtype == object or multiples.dtype == object:
        return np.array(
            [int(g) >= int(m) for g, m in zip(draws, multiples, strict=True)], dtype=bool
        )
    out: BoolArray = draws >= multiples
    return out
