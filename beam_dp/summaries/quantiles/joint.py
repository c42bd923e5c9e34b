"""Two quantiles chosen jointly: one exponential mechanism over sorted pairs of grid points.

Utility: for ``alpha_1 < alpha_2`` and grid points ``r_1 <= r_2``, with the signed rank
errors ``e_j`` of :func:`pair_scores` (the distance from ``alpha_j n`` to the rank interval
``[L, L + E]`` of ``r_j``), ``U = |e_1| + |e_2| + |e_2 - e_1|``: JointExp's utility
(Gillenwater, Joseph and Kulesza 2021), the total variation of the path ``0, e_1, e_2, 0``.
It equals ``2 R`` with ``R = max(0, e_1, e_2) - min(0, e_1, e_2)``. A pair node with children
chooses two *cuts* ``c_1 <= c_2`` instead (:mod:`.recursive`): the same utility with ``E = 0``,
``e_j = c_j - alpha_j n``.

Sensitivity: one value moves ``e_j`` by ``f_j - alpha_j`` (add/remove), ``f_j`` the share of
the value below ``r_j``'s rank interval or cut, with ``0 <= f_1 <= f_2 <= 1``. ``|d_1| + |d_2|
+ |d_2 - d_1|`` is convex in ``(f_1, f_2)``, so its largest value is at a vertex of that
triangle, ``(0, 0)``, ``(0, 1)`` or ``(1, 1)``, all among the six moves
:func:`pair_sensitivity` checks: ``2 (1 - min gap)`` per value; under replace, 2 per value
(tested by brute force on every neighbour of small datasets, for ranges and cuts).

Sampling (:func:`select_pair`) is exact and never stalls. The sorted pairs split into six
pieces by the signs of ``a = e_1(r_1)`` and ``b = e_2(r_2)``; on each, ``R`` is a sum of
terms of one grid point each (``|a| + b``, ``a + |b|``) or the larger of two such terms,
which splits again into pieces weighted by one grid point with a count of partners. Each
piece is sampled by rejection from a fine dyadic envelope of ``exp(-2 rate R)``
(:mod:`beam_dp.mechanisms.dyadic`), whose masses are exact integers; a round accepts with
probability above 0.35 whatever the data.

Work (``docs/timing.md``): every draw runs :data:`PAIR_ROUNDS` rounds from one request of
``9 * PAIR_ROUNDS`` 64-bit words, whatever the scores; each round reads its uniforms' leading
bits from its words and flips one coin whose integer brackets need no random bits. Further
requests happen only in the residual events (a uniform or a coin undecided by its leading
bits, about ``2**-60`` per round; every round rejected, below ``e**-32`` per draw).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from beam_dp._validation import Relation
from beam_dp.mechanisms import RandomSource
from beam_dp.mechanisms.dyadic import (
    CLAMP,
    FINE_LEVELS,
    fine_envelope_levels,
    fine_level,
    scaled_exp_bounds,
)
from beam_dp.scores._exact import check_fits_int64
from beam_dp.summaries.quantiles.parameters import selection_loss

__all__ = ["PAIR_ROUNDS", "pair_loss", "pair_scores", "pair_sensitivity", "select_pair"]

IntArray = npt.NDArray[np.int64]

#: Rounds every pair draw runs (:func:`_draw_pair`): a round accepts with probability at
#: least ``p = (256 / 729)(1 - 2**-26) > 0.3511`` whatever the data, so all of them fail with
#: probability at most ``(1 - p)**75 < e**-32.4`` per draw; only then are further rounds drawn.
PAIR_ROUNDS = 75

#: 64-bit words a round reads, always: two for the piece, two for each family's member, two
#: for a partner and one for the acceptance coin (each a uniform's leading bits).
_ROUND_WORDS = 9

_WORD_BITS = 64


def pair_sensitivity(
    alphas: tuple[Fraction, Fraction], relation: Relation, k: Fraction | int
) -> Fraction:
    low, high = alphas
    if not 0 < low < high < 1:
        raise ValueError(f"'alphas' must satisfy 0 < alpha_1 < alpha_2 < 1; received {alphas}")
    if relation == "replace":
        return 2 * Fraction(k)
    moves = [
        (h1 - low, h2 - high)
        for h1, h2 in ((0, 0), (0, high), (0, 1), (low, high), (low, 1), (1, 1))
    ]
    largest = max(abs(d1) + abs(d2) + abs(d2 - d1) for d1, d2 in moves)
    return Fraction(largest) * Fraction(k)


def pair_loss(
    num_candidates: int, epsilon: Fraction, sensitivity: Fraction, confidence: float
) -> float:
    return selection_loss(num_candidates**2, epsilon, sensitivity, confidence) / 2


def pair_scores(
    less: IntArray, equal: IntArray, greater: IntArray, alphas: tuple[Fraction, Fraction]
) -> tuple[IntArray, IntArray, int]:
    """Each quantile's signed rank error at every candidate, as integers times ``common``.

    ``e_j(r)`` is the signed distance from ``alpha_j n`` to the point's rank interval
    ``[L, L + E]`` (``L``, ``E``: rows below and equal, ``n = L + E + G``): 0 when some rank of
    the value ``r`` is ``alpha_j n``, ``L - alpha_j n > 0`` above, ``L + E - alpha_j n < 0``
    below. It is non-decreasing along the grid, ``e_1 >= e_2`` at every point, and one value
    moves it by ``-alpha_j`` (a value above), ``1 - alpha_j`` (below) or a share between them
    (equal), as the single quantile's score (:class:`~beam_dp.scores.QuantileScore`) does; a
    quantile that falls in a block of ties scores 0 at the tied value, so neither quantile of
    a pair is left free when both fall in one block (JointExp's path utility would then
    ignore the smaller of two negative errors).
    With ``equal`` 0 the candidates are cuts at ``less`` (:mod:`.recursive`).
    """
    low, high = alphas
    common = math.lcm(low.denominator, high.denominator)
    total = less + equal + greater
    largest = int(total.max(initial=0))
    check_fits_int64(4 * common * largest, "joint quantile scores")
    signed = []
    for alpha in alphas:
        target = int(alpha * common) * total
        below = common * less
        signed.append(
            np.maximum(below - target, 0) + np.minimum(below + common * equal - target, 0)
        )
    return signed[0], signed[1], common


#: The envelope's unit: a weight of 1 is ``_ONE`` units, a fine level's weight
#: ``k 2**-s / 16`` is ``k 2**(CLAMP + 1 - s)`` units (an integer for every level).
_ONE = 16 << (CLAMP + 1)
_LEVEL_MASS = tuple(k << (CLAMP + 1 - s) for k, s in map(fine_level, range(FINE_LEVELS)))


@dataclass(frozen=True)
class _Family:
    """Weighted grid points of one side of a piece.

    Member ``r`` is grid point ``positions[r]`` with ``counts[r]`` pairs attached (1 for a
    product piece), target weight ``exp(-rate2 * offsets[r])`` per pair (``offsets`` are the
    scores minus their minimum ``floor``) and envelope weight ``k 2**-s / 16`` per pair, the
    fine level ``levels[r]`` (:func:`~beam_dp.mechanisms.dyadic.fine_envelope_levels`).
    ``members`` lists the members by level; ``cumulative`` sums their counts in that order.
    The envelope is laid out level by level over ``[0, total)`` in units (:data:`_ONE` per
    unit of weight): ``occupied`` are the levels holding members, ``level_ends`` where each
    ends and ``counts_before`` the pairs of the levels before it.
    """

    positions: IntArray
    offsets: IntArray
    counts: IntArray
    floor: int
    levels: IntArray
    members: IntArray
    cumulative: IntArray
    total: int
    occupied: tuple[int, ...]
    level_ends: tuple[int, ...]
    counts_before: tuple[int, ...]

    def locate(self, unit: int) -> int:
        """The pair holding envelope unit ``unit`` (``0 <= unit < total``), numbered in the
        order of :attr:`cumulative`: each member's pairs are ``counts[r]`` runs of its level's
        mass, so a uniform unit is a pair drawn exactly in proportion to the envelope
        (:meth:`member` names its member)."""
        at = bisect.bisect_right(self.level_ends, unit)
        before = self.level_ends[at - 1] if at else 0
        return self.counts_before[at] + (unit - before) // _LEVEL_MASS[self.occupied[at]]

    def member(self, pair: int) -> int:
        """The member whose pairs hold ``pair`` (a value of :meth:`locate`)."""
        return int(self.members[int(self.cumulative.searchsorted(pair, side="right"))])


def _family(positions: IntArray, scores: IntArray, counts: IntArray, rate2: Fraction) -> _Family:
    keep = counts > 0
    positions, scores, counts = positions[keep], scores[keep], counts[keep]
    floor = int(scores.min())
    offsets = scores - floor
    levels = fine_envelope_levels(float(rate2) * offsets.astype(np.float64))
    members = np.argsort(levels.astype(np.uint16), kind="stable")  # radix sort
    cumulative = np.cumsum(counts[members])
    sorted_levels = levels[members]
    occupied = np.flatnonzero(np.bincount(levels, minlength=FINE_LEVELS))
    starts = np.searchsorted(sorted_levels, occupied, side="left")
    counts_before = np.concatenate([[0], cumulative])[starts]
    level_counts = np.diff(np.concatenate([counts_before, cumulative[-1:]]))
    ends, total = [], 0
    for level, count in zip(occupied.tolist(), level_counts.tolist(), strict=True):
        total += count * _LEVEL_MASS[level]
        ends.append(total)
    return _Family(
        positions,
        offsets,
        counts,
        floor,
        levels,
        members,
        cumulative,
        total,
        tuple(occupied.tolist()),
        tuple(ends),
        tuple(counts_before.tolist()),
    )


@dataclass(frozen=True)
class _Piece:
    """Pairs whose utility separates into one or two families plus a constant.

    ``product``: pairs ``(first member, second member)``, kept when sorted. Otherwise one
    family of grid points ``i`` (``grouped == "first"``) or ``j`` (``"second"``), each with
    its partners uniform on ``[low[r], high[r]]``.
    """

    families: tuple[_Family, ...]
    grouped: str
    low: IntArray | None = None
    high: IntArray | None = None


def _pieces(first: IntArray, second: IntArray, rate2: Fraction) -> list[_Piece]:
    """The six pieces of ``{(i, j): i <= j}`` by the signs of ``a_i = first[i]`` and
    ``b_j = second[j]``; on each, ``R = max(0, a, b) - min(0, a, b)`` separates."""
    a, b = first, second
    d = a.size
    grid = np.arange(d, dtype=np.int64)
    i0 = int(np.searchsorted(a, 0, side="right"))  # a > 0 from here
    j1 = int(np.searchsorted(b, 0, side="left")) - 1  # b < 0 up to here
    ones = np.ones(d, dtype=np.int64)
    pieces: list[_Piece] = []

    def product(ri: slice, xi: IntArray, rj: slice, xj: IntArray) -> None:
        pieces.append(
            _Piece(
                (
                    _family(grid[ri], xi, ones[ri], rate2),
                    _family(grid[rj], xj, ones[rj], rate2),
                ),
                "product",
            )
        )

    def grouped(side: str, at: slice, scores: IntArray, low: IntArray, high: IntArray) -> None:
        counts = np.maximum(high - low + 1, 0)
        if counts.any():
            keep = counts > 0
            family = _family(grid[at], scores, counts, rate2)
            pieces.append(_Piece((family,), side, low[keep], high[keep]))

    # A: a <= 0 <= b, R = |a| + b (sorted except when every score is 0).
    if i0 > 0 and j1 + 1 < d:
        product(slice(0, i0), -a[:i0], slice(j1 + 1, d), b[j1 + 1 :])
    # D: a > 0 > b, R = a + |b|; sorted pairs lie in the square [i0, j1]**2.
    if i0 <= j1:
        product(slice(i0, j1 + 1), a[i0 : j1 + 1], slice(i0, j1 + 1), -b[i0 : j1 + 1])
    # B: a > 0, b >= 0, R = max(a, b). B1: b <= a (weight by i). B2: b > a (weight by j).
    if i0 < d and j1 + 1 < d:
        at = slice(i0, d)
        low = np.maximum(grid[at], j1 + 1)
        high = np.searchsorted(b, a[at], side="right").astype(np.int64) - 1
        grouped("first", at, a[at], low, high)
        at = slice(j1 + 1, d)
        low = np.full(d - j1 - 1, i0, dtype=np.int64)
        high = np.minimum(grid[at], np.searchsorted(a, b[at], side="left").astype(np.int64) - 1)
        grouped("second", at, b[at], low, high)
    # C: a <= 0, b < 0, R = max(|a|, |b|). C1: b >= a (weight by i). C2: b < a (by j).
    if i0 > 0 and j1 >= 0:
        at = slice(0, i0)
        low = np.maximum(grid[at], np.searchsorted(b, a[at], side="left").astype(np.int64))
        high = np.full(i0, j1, dtype=np.int64)
        grouped("first", at, -a[at], low, high)
        at = slice(0, j1 + 1)
        low = np.searchsorted(a, b[at], side="right").astype(np.int64)
        high = np.minimum(grid[at], i0 - 1)
        grouped("second", at, -b[at], low, high)
    return pieces


def select_pair(
    first: IntArray, second: IntArray, rate: Fraction, source: RandomSource
) -> tuple[int, int]:
    """Draw ``i <= j`` with probability proportional to ``exp(-rate * U(i, j))``, exactly.

    ``U = |a_i| + |b_j| + |b_j - a_i| = 2 R`` with ``a = first``, ``b = second`` (both
    non-decreasing, ``a >= b``) and ``R = max(0, a_i, b_j) - min(0, a_i, b_j)``. See the module
    for the envelope, :func:`_pair_rounds` for the proof that a round accepts with
    probability above 0.35 and :func:`_draw_pair` for the work, which is
    a function of ``len(first)`` alone (:data:`PAIR_ROUNDS` rounds of the same requests).
    """
    i, j, _ = _pair_rounds(first, second, rate, source)
    return i, j


@dataclass(frozen=True)
class _PairEnvelope:
    """What :func:`_pair_rounds` builds from the scores once: the six pieces, their constants
    (``floor - least`` of the scores: the utility a piece's least pair adds to the smallest),
    the constants' fine envelope levels, the pieces' integer envelope masses (and their running
    sums) and their sum, the rate doubled and the number of grid points."""

    pieces: list[_Piece]
    constants: list[int]
    constant_levels: list[int]
    weights: list[int]
    ends: list[int]
    total: int
    rate2: Fraction
    size: int

    def locate(self, unit: int) -> int:
        """The piece holding envelope unit ``unit`` (``0 <= unit < total``)."""
        return bisect.bisect_right(self.ends, unit)


def _pair_envelope(first: IntArray, second: IntArray, rate: Fraction) -> _PairEnvelope:
    """The envelope of :func:`_pair_rounds` (checks the scores)."""
    a = np.asarray(first, dtype=np.int64)
    b = np.asarray(second, dtype=np.int64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError("'first' and 'second' must be non-empty and of one length")
    if np.any(np.diff(a) < 0) or np.any(np.diff(b) < 0):
        raise ValueError("'first' and 'second' must be non-decreasing along the grid")
    if np.any(a < b):  # the lower quantile's error is never below the higher one's
        raise ValueError("'first' must be >= 'second' at every grid point")
    if rate < 0:
        raise ValueError(f"'rate' must be >= 0; received {rate}")
    rate2 = 2 * rate
    pieces = _pieces(a, b, rate2)
    floors = [sum(f.floor for f in piece.families) for piece in pieces]
    least = min(floors)
    constants = [floor - least for floor in floors]
    estimates = np.array([float(rate2) * float(c) for c in constants])
    constant_levels = [int(x) for x in fine_envelope_levels(estimates)]
    weights = [  # in units of _ONE**-3
        math.prod(f.total for f in piece.families)
        * _LEVEL_MASS[level]
        * _ONE ** (2 - len(piece.families))
        for piece, level in zip(pieces, constant_levels, strict=True)
    ]
    ends = [int(x) for x in np.cumsum(np.array(weights, dtype=object))]
    return _PairEnvelope(
        pieces, constants, constant_levels, weights, ends, ends[-1], rate2, int(a.size)
    )


def _pair_rounds(
    first: IntArray, second: IntArray, rate: Fraction, source: RandomSource
) -> tuple[int, int, int]:
    """:func:`select_pair`, also returning the round that accepted (1 for the first).

    Rejection from a dyadic envelope over six pieces. Each piece's utility is a constant
    ``R_p`` (its least value) plus offsets of one grid point each, so its envelope, the product
    of one fine weight ``k 2**-s / 16`` for the constant and one per member
    (:func:`~beam_dp.mechanisms.dyadic.fine_envelope_levels`), is an exact dyadic rational
    whose sum over the piece factorises. A round picks a piece in proportion to its envelope
    mass, members in proportion to their envelope weights (and a grouped piece's partner
    uniformly), and accepts when the pair is sorted and one coin succeeds: ``exp(-y)`` over
    the pair's envelope weight, with ``y`` the rate times the utility above the least (the
    product of the piece's and the members' coins). An accepted pair has probability
    proportional to ``exp(-2 rate (R - R_0))``, the target.

    Why a round accepts with probability at least ``(256 / 729)(1 - 2**-26)``, whatever the
    data:

    * each factor of the coin is above ``(8/9)(1 - 2**-29)`` unless its level is capped
      (``y / ln 2`` beyond ``CLAMP + 1.5``); there are at most three (the piece's constant
      and one per family), so an uncapped sorted pair keeps more than
      ``(8/9)**3 (1 - 2**-27)`` of its envelope weight;
    * unsorted pairs occur only in the two product pieces. In A (``a <= 0 <= b``) every pair is
      sorted unless all scores are 0, where the square is symmetric. In D (``a > 0 > b``) for
      ``i > j`` the sorted pair ``(j, i)`` has at least the envelope weight of ``(i, j)``,
      because envelope levels are non-decreasing in ``a`` and ``|b|``, and ``a`` rises and
      ``|b|`` falls along the grid. So sorted pairs hold at least half of each piece's mass;
    * capped levels (weights below ``2**-CLAMP``) carry at most ``6 d**2 2**-CLAMP`` of the
      mass while the best piece and member weigh 1 (below ``2**-60`` of the mass for any
      ``d <= 2**70``).
    """
    return _draw_pair(_pair_envelope(first, second, rate), source)


def _uniform_unit(
    words: tuple[int, int], total: int, locate: Callable[[int], int], source: RandomSource
) -> int:
    """``locate(floor(U total))`` for a uniform ``U`` in [0, 1) whose first 128 bits are
    ``words``: exactly ``locate`` of a uniform integer below ``total``.

    ``U`` lies in ``[u 2**-b, (u + 1) 2**-b)``, so ``floor(U total)`` lies between ``first``
    and ``last`` below; ``locate`` maps consecutive integers to runs of one outcome, so the
    outcome is decided when both ends give it. Otherwise (probability at most the number of
    outcomes times ``2**-128``) 64 more bits of ``U`` are drawn: the residual event of
    ``docs/timing.md``, whose extra requests are the only ones that depend on ``total``.
    """
    u, bits = (words[0] << _WORD_BITS) | words[1], 2 * _WORD_BITS
    while True:
        first = (u * total) >> bits
        last = ((u + 1) * total - 1) >> bits
        outcome = locate(first)
        if last == first or locate(last) == outcome:
            return outcome
        u, bits = (u << _WORD_BITS) | int(source.words64(1)[0]), bits + _WORD_BITS


def _same(unit: int) -> int:
    return unit


def _coin(
    word: int,
    y: tuple[int, int],
    exponent: int,
    ratio: tuple[int, int],
    source: RandomSource,
) -> bool:
    """``Bernoulli(exp(-y) 2**exponent * ratio)``, ``y = y[0] / y[1]``, ``ratio = ratio[0] /
    ratio[1]`` (the pair's envelope mantissas: ``16**m / prod k``), from a uniform ``U``
    whose first 64 bits are ``word``.

    ``[U < p]``, decided by integer brackets of ``p``
    (:func:`~beam_dp.mechanisms.dyadic.scaled_exp_bounds`, scaled by ``ratio`` outward): a few
    units wide at 64 bits, so ``U``'s first word decides unless it falls within them
    (probability about ``2**-60``); then 64 more bits of ``U`` and a bracket 64 bits finer
    (the residual event). Fails closed if ``p`` is certainly above 1 (an envelope below its
    target, which :func:`~beam_dp.mechanisms.dyadic.fine_envelope_levels` rules out).
    """
    u, bits = word, _WORD_BITS
    while True:
        low, high = scaled_exp_bounds(y[0], y[1], exponent, bits)
        low, high = low * ratio[0] // ratio[1], -(-high * ratio[0] // ratio[1])
        if low > 1 << bits:
            raise AssertionError("an envelope below its target: the coin would exceed 1")
        if u + 1 <= low:
            return True
        if u >= high:
            return False
        u, bits = (u << _WORD_BITS) | int(source.words64(1)[0]), bits + _WORD_BITS


def _round(
    envelope: _PairEnvelope, words: list[int], source: RandomSource
) -> tuple[int, int, bool]:
    """One round from its :data:`_ROUND_WORDS` words: the proposed pair and its coin.

    Every round reads the same words and flips its coin, sorted pair or not; a grouped piece
    leaves the second member's words unused and a product piece the partner's."""
    index = _uniform_unit((words[0], words[1]), envelope.total, envelope.locate, source)
    piece = envelope.pieces[index]
    families = piece.families
    family = families[0]
    member = family.member(_uniform_unit((words[2], words[3]), family.total, family.locate, source))
    utility = envelope.constants[index] + int(family.offsets[member])
    levels = [envelope.constant_levels[index], int(family.levels[member])]
    own = int(families[0].positions[member])
    if piece.grouped == "product":
        family = families[1]
        other = family.member(
            _uniform_unit((words[4], words[5]), family.total, family.locate, source)
        )
        utility += int(family.offsets[other])
        levels.append(int(family.levels[other]))
        i, j = own, int(families[1].positions[other])
    else:
        assert piece.low is not None and piece.high is not None
        low, high = int(piece.low[member]), int(piece.high[member])
        partner = low + _uniform_unit((words[6], words[7]), high - low + 1, _same, source)
        i, j = (own, partner) if piece.grouped == "first" else (partner, own)
    mantissas, exponent = 1, 0
    for level in levels:
        k, s = fine_level(level)
        mantissas, exponent = mantissas * k, exponent + s
    scale = 16 ** len(levels)
    rate2 = envelope.rate2
    y = (rate2.numerator * utility, rate2.denominator)
    accepted = _coin(words[8], y, exponent, (scale, mantissas), source)
    return i, j, accepted and i <= j


def _draw_pair(
    envelope: _PairEnvelope, source: RandomSource, rounds: int | None = None
) -> tuple[int, int, int]:
    """One draw of :func:`_pair_rounds` from its envelope: ``(i, j, accepted round)``.

    Work: ``rounds`` rounds (by default :data:`PAIR_ROUNDS`), always, from one request of
    ``rounds * 9`` 64-bit words; the rounds after the accepted one run in full and are
    discarded. Each round reads its words as the leading bits of its uniforms and its coin's
    uniform, so the requests are a function of ``rounds`` alone, except in the residual
    events: a uniform or the coin undecided by its leading bits (64 more bits: probability
    about ``2**-60`` per round), or every round rejected (probability below ``e**-32`` at
    :data:`PAIR_ROUNDS`; then ``rounds`` more). The rounds' arithmetic reads the data
    (integer sizes, one search per member drawn): microseconds, not requests. ``rounds``
    below :data:`PAIR_ROUNDS` (tests) keeps the law and draws further blocks more often.
    """
    if rounds is None:
        rounds = PAIR_ROUNDS
    if rounds < 1:
        raise ValueError(f"'rounds' must be >= 1; received {rounds}")
    done = 0
    while True:
        words = source.words64(rounds * _ROUND_WORDS).tolist()
        accepted: tuple[int, int, int] | None = None
        for r in range(rounds):
            at = r * _ROUND_WORDS
            i, j, ok = _round(envelope, words[at : at + _ROUND_WORDS], source)
            if ok and accepted is None:
                accepted = (i, j, done + r + 1)
        if accepted is not None:
            return accepted
        done += rounds
