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
    FINE_STEPS,
    fine_envelope_levels,
    fine_level,
    scaled_exp_bounds,
)
from beam_dp.scores._exact import check_fits_int64
from beam_dp.summaries.quantiles.parameters import selection_loss

__all__ = [
    "PAIR_ROUNDS",
    "pair_loss",
    "pair_scores",
    "pair_sensitivity",
    "range_errors",
    "select_on_errors",
    "select_pair",
]

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


def range_errors(
    low: IntArray,
    high: IntArray | None,
    n: int,
    alphas: tuple[Fraction, Fraction],
    shift: int = 0,
) -> tuple[IntArray, IntArray, int]:
    """:func:`pair_scores` of candidates with rank ranges ``[low - shift, high - shift]`` in
    ``n`` values (``high`` ``None``: cuts, ``high == low``), with fewer passes over them."""
    first, second = alphas
    common = math.lcm(first.denominator, second.denominator)
    check_fits_int64(4 * common * (abs(shift) + max(n, 0)), "joint quantile scores")
    targets = [int(alpha * common) * n + common * shift for alpha in alphas]
    scaled_low = common * low
    if high is None:
        scaled_low -= targets[0]
        return scaled_low, scaled_low - (targets[1] - targets[0]), common
    scaled_high = common * high
    signed = []
    for target in targets:
        errors = np.maximum(scaled_low - target, 0)
        errors += np.minimum(scaled_high - target, 0)
        signed.append(errors)
    return signed[0], signed[1], common


#: The envelope's unit: a weight of 1 is ``_ONE`` units, a fine level's weight
#: ``k 2**-s / 16`` is ``k 2**(CLAMP + 1 - s)`` units (an integer for every level).
_ONE = 16 << (CLAMP + 1)
_LEVEL_MASS = tuple(k << (CLAMP + 1 - s) for k, s in map(fine_level, range(FINE_LEVELS)))
_LEVEL_MASSES = np.array(_LEVEL_MASS, dtype=object)


#: Offsets at which the fine envelope levels begin, for one rate (:func:`_level_thresholds`).
_THRESHOLD_CACHE: dict[float, IntArray] = {}
_NO_OFFSET = np.int64(1 << 62)
#: Where each octave's fine levels begin, in ``y / ln 2`` beyond the octave (a guess's input).
_STEP_STARTS = np.log2(16.0 / np.arange(16, 16 - FINE_STEPS, -1))


def _levels_of(rate: float, offsets: IntArray) -> IntArray:
    """The fine envelope level of each offset: the levels of the rate times it."""
    return fine_envelope_levels(rate * offsets.astype(np.float64))


def _level_thresholds(rate: float) -> IntArray:
    """``t[L]``: the smallest non-negative integer offset whose level (:func:`_levels_of`) is at
    least ``L``, for every fine level (:data:`_NO_OFFSET` when none below ``2**62`` is).

    A function of the public rate alone. The level is non-decreasing in the offset (a float
    product with a positive constant and the level of :func:`fine_envelope_levels` are), so
    the members of a monotone family at level ``L`` are those with offsets in
    ``[t[L], t[L + 1])``: a contiguous run, found by binary search instead of a level per
    member. Found by bisection on the integers, from a float guess's bracket when it holds.
    """
    cached = _THRESHOLD_CACHE.get(rate)
    if cached is not None:
        return cached
    wanted = np.arange(FINE_LEVELS, dtype=np.int64)
    top = int(_levels_of(rate, np.array([_NO_OFFSET - 1], dtype=np.int64))[0])
    open_ = wanted <= top
    # A float guess of where each level begins (``y / ln 2`` reaching its threshold), then a
    # bracket around it checked exactly; where the check fails, the whole range.
    octave, step = np.divmod(wanted, FINE_STEPS)
    guess = (octave + _STEP_STARTS[step]) * (math.log(2.0) / rate)
    ceiling = float(_NO_OFFSET)
    low = np.clip(np.floor(guess * (1 - 2.0**-40)) - 2, 0, ceiling).astype(np.int64)
    high = np.clip(np.ceil(guess * (1 + 2.0**-40)) + 2, 0, ceiling).astype(np.int64)
    below = (low == 0) | (_levels_of(rate, np.maximum(low - 1, 0)) < wanted)
    above = _levels_of(rate, high) >= wanted
    low = np.where(below & above, low, 0)
    high = np.where(below & above, high, _NO_OFFSET - 1)
    # Bisection: the smallest offset in [low, high] whose level is at least L.
    while True:
        active = open_ & (low < high)
        if not active.any():
            break
        middle = low + (high - low) // 2
        reached = _levels_of(rate, middle) >= wanted
        high = np.where(active & reached, middle, high)
        low = np.where(active & ~reached, middle + 1, low)
    thresholds: IntArray = np.where(open_, low, _NO_OFFSET).astype(np.int64)
    if len(_THRESHOLD_CACHE) > 256:
        _THRESHOLD_CACHE.clear()
    _THRESHOLD_CACHE[rate] = thresholds
    return thresholds


@dataclass(frozen=True)
class _Family:
    """Weighted grid points of one side of a piece, laid out by envelope level.

    Member ``r`` (``0 <= r < size``) is grid point ``start + r``; its score is
    ``sign * values[r]`` (``values`` non-decreasing, so the scores are monotone in ``r``) and
    its offset that minus ``floor``, the least score of a member with pairs. It has
    ``counts[r]`` pairs (1 for a product piece: ``prefix`` is ``None``; else ``prefix[r]`` is
    the pairs of the members before ``r``), target weight ``exp(-rate2 * offset)`` per pair
    and envelope weight ``k 2**-s / 16`` per pair, its fine level
    (:func:`~beam_dp.mechanisms.dyadic.fine_envelope_levels` of the float ``rate2 *
    offset``). Levels are monotone in ``r``, so each level's members are a run
    ``[block_starts[b], block_ends[b])``; ``levels`` lists the runs' levels in increasing
    order. The envelope is laid out run by run in that order, members in increasing ``r``
    within a run, over ``[0, total)`` in units (:data:`_ONE` per unit of weight):
    ``level_ends`` is where each run ends and ``counts_before`` the pairs of the runs before.
    """

    start: int
    values: IntArray
    sign: int
    floor: int
    size: int
    prefix: IntArray | None
    levels: tuple[int, ...]
    block_starts: tuple[int, ...]
    block_ends: tuple[int, ...]
    counts_before: tuple[int, ...]
    level_ends: tuple[int, ...]
    total: int

    @property
    def positions(self) -> IntArray:
        """Every member's grid point."""
        return np.arange(self.start, self.start + self.size, dtype=np.int64)

    @property
    def offsets(self) -> IntArray:
        """Every member's offset."""
        return self.sign * self.values[: self.size] - self.floor

    def offset(self, member: int) -> int:
        return self.sign * int(self.values[member]) - self.floor

    def locate(self, unit: int) -> int:
        """The pair holding envelope unit ``unit`` (``0 <= unit < total``), numbered run by run:
        each member's pairs are ``counts[r]`` runs of its level's mass, so a uniform unit is a
        pair drawn exactly in proportion to the envelope (:meth:`member` names its member)."""
        at = bisect.bisect_right(self.level_ends, unit)
        before = self.level_ends[at - 1] if at else 0
        return self.counts_before[at] + (unit - before) // _LEVEL_MASS[self.levels[at]]

    def member(self, pair: int) -> tuple[int, int]:
        """The member whose pairs hold ``pair`` (a value of :meth:`locate`), and its level."""
        at = bisect.bisect_right(self.counts_before, pair) - 1
        first = self.block_starts[at]
        within = pair - self.counts_before[at]
        if self.prefix is None:
            return first + within, self.levels[at]
        end = self.block_ends[at]
        reached = int(self.prefix[first]) + within
        r = first + int(np.searchsorted(self.prefix[first + 1 : end + 1], reached, side="right"))
        return r, self.levels[at]


def _family(
    start: int, values: IntArray, sign: int, counts: IntArray | None, rate2: Fraction
) -> _Family:
    """The family of members ``start + r`` with scores ``sign * values[r]`` (``values``
    non-decreasing) and ``counts[r]`` pairs each (``None``: one each). Members without pairs
    add nothing to the envelope. Work: ``O(FINE_LEVELS log d)`` searches, plus one prefix sum
    of ``counts``."""
    size = int(values.size)
    prefix: IntArray | None = None
    if counts is None:
        first, last = 0, size - 1
    else:
        kept = np.flatnonzero(counts > 0)
        first, last = int(kept[0]), int(kept[-1])
        prefix = np.zeros(last + 2, dtype=np.int64)
        np.cumsum(counts[: last + 1], out=prefix[1:])
    size = last + 1
    values = values[:size]
    floor = int(values[first]) if sign > 0 else -int(values[last])
    thresholds = _level_thresholds(float(rate2))
    # Members r >= first (sign +1) or r <= last (sign -1) have offsets >= 0; a member's level
    # is >= L when its offset is >= thresholds[L].
    if sign > 0:
        # offset >= t  <=>  values[r] >= floor + t
        limit = np.where(thresholds >= _NO_OFFSET, np.iinfo(np.int64).max, floor + thresholds)
        bounds = np.searchsorted(values, limit, side="left")
        bounds = np.clip(bounds, first, size)
        starts, ends = bounds, np.concatenate([bounds[1:], [size]])
    else:
        # offset >= t  <=>  values[r] <= -(floor + t): the members before the bound
        limit = np.where(thresholds >= _NO_OFFSET, np.iinfo(np.int64).min, -(floor + thresholds))
        bounds = np.searchsorted(values, limit, side="right")
        bounds = np.clip(bounds, 0, size)
        ends, starts = bounds, np.concatenate([bounds[1:], [0]])
    occupied = np.flatnonzero(ends > starts)
    starts, ends = starts[occupied], ends[occupied]
    sizes = ends - starts if prefix is None else prefix[ends] - prefix[starts]
    counts_before = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    level_ends = np.cumsum(sizes.astype(object) * _LEVEL_MASSES[occupied])
    return _Family(
        start,
        values,
        sign,
        floor,
        size,
        prefix,
        tuple(occupied.tolist()),
        tuple(starts.tolist()),
        tuple(ends.tolist()),
        tuple(counts_before.tolist()),
        tuple(level_ends.tolist()),
        int(level_ends[-1]),
    )


def _sorted_pairs(i_low: IntArray, i_high: IntArray, j_low: IntArray, j_high: IntArray) -> IntArray:
    """``#{(i, j): i_low <= i < i_high, j_low <= j < j_high, i <= j}``, element-wise: rows
    ``i < j_low`` hold the whole width, rows from ``max(i_low, j_low)`` one fewer each."""
    flat_rows = np.maximum(np.minimum(i_high, j_low) - i_low, 0)
    width = np.maximum(j_high - j_low, 0)
    start = np.maximum(i_low, j_low)
    rows = np.maximum(np.minimum(i_high, j_high) - start, 0)
    pairs: IntArray = flat_rows * width + rows * (j_high - start) - rows * (rows - 1) // 2
    return pairs


def _sorted_pairs_in(i_low: int, i_high: int, j_low: int, j_high: int) -> int:
    """:func:`_sorted_pairs` of one rectangle, in Python integers."""
    flat_rows = max(min(i_high, j_low) - i_low, 0)
    start = max(i_low, j_low)
    rows = max(min(i_high, j_high) - start, 0)
    return flat_rows * max(j_high - j_low, 0) + rows * (j_high - start) - rows * (rows - 1) // 2


def _unrank_pair(i_low: int, i_high: int, j_low: int, j_high: int, rank: int) -> tuple[int, int]:
    """The ``rank``-th pair (rows of ``i`` in order, ``j`` in order within a row) of the set
    counted by :func:`_sorted_pairs`."""
    width = j_high - j_low
    flat_rows = max(0, min(i_high, j_low) - i_low)
    if width > 0 and rank < flat_rows * width:
        return i_low + rank // width, j_low + rank % width
    rank -= flat_rows * max(width, 0)
    start = max(i_low, j_low)
    span = j_high - start
    low, high = 0, min(i_high, j_high) - start - 1  # the row: the largest k with before(k) <= rank
    while low < high:
        middle = (low + high + 1) // 2
        if middle * span - middle * (middle - 1) // 2 <= rank:
            low = middle
        else:
            high = middle - 1
    before = low * span - low * (low - 1) // 2
    return start + low, start + low + (rank - before)


@dataclass(frozen=True)
class _Box:
    """Sorted pairs ``i <= j`` with ``i`` in ``[i_low, i_high)`` and ``j`` in ``[j_low,
    j_high)`` whose utility is ``max(u_i, v_j)``: ``u = sign * a``, ``v = sign * b`` (the
    pieces B, ``sign = 1``, and C, ``sign = -1``, of :func:`_pieces`).

    A pair's offset is its utility minus ``floor`` (the piece's least utility) and its envelope
    weight per pair is the fine level of the offset (as a family member's,
    :func:`_level_thresholds`). The pairs below level ``L`` are those with ``u_i`` and ``v_j``
    both below ``floor + t[L]``: a box of ``i`` and one of ``j`` (prefixes for B, where ``u``
    and ``v`` rise along the grid, suffixes for C), so each level's pairs are the pairs of one
    box minus those of the next smaller one, counted in closed form
    (:func:`_sorted_pairs`). The envelope is laid out level by level (``levels``, in
    increasing order, with ``level_ends``, ``counts_before`` and the boxes ``inner`` and
    ``outer`` as ``(i bound, j bound)``: the moving ends), each level's pairs in the order of
    :meth:`pair`.
    """

    first: IntArray
    second: IntArray
    sign: int
    i_low: int
    i_high: int
    j_low: int
    j_high: int
    floor: int
    levels: tuple[int, ...]
    moving: IntArray
    rows: IntArray
    counts_before: tuple[int, ...]
    level_ends: tuple[int, ...]
    total: int

    def utility(self, i: int, j: int) -> int:
        return max(self.sign * int(self.first[i]), self.sign * int(self.second[j]))

    def locate(self, unit: int) -> int:
        """The pair holding envelope unit ``unit`` (``0 <= unit < total``)."""
        at = bisect.bisect_right(self.level_ends, unit)
        before = self.level_ends[at - 1] if at else 0
        return self.counts_before[at] + (unit - before) // _LEVEL_MASS[self.levels[at]]

    def _rectangles(self, at: int) -> tuple[tuple[int, int, int, int], ...]:
        """The pairs of level ``levels[at]``: two rectangles (each with ``i <= j``)."""
        row = int(self.rows[at])
        i_in, j_in = (int(x) for x in self.moving[row])
        i_out, j_out = (int(x) for x in self.moving[row + 1])
        if self.sign > 0:  # prefixes [i_low, i), [j_low, j)
            return (
                (i_in, i_out, self.j_low, j_out),
                (self.i_low, i_in, j_in, j_out),
            )
        return (  # suffixes [i, i_high), [j, j_high)
            (i_out, i_in, j_out, self.j_high),
            (i_in, self.i_high, j_out, j_in),
        )

    def pair(self, number: int) -> tuple[int, int, int]:
        """The pair numbered ``number`` (a value of :meth:`locate`), and its level."""
        at = bisect.bisect_right(self.counts_before, number) - 1
        rank = number - self.counts_before[at]
        for rectangle in self._rectangles(at):
            size = _sorted_pairs_in(*rectangle)
            if rank < size:
                i, j = _unrank_pair(*rectangle, rank)
                return i, j, self.levels[at]
            rank -= size
        raise AssertionError("a pair number beyond its level")  # pragma: no cover


def _box(
    first: IntArray,
    second: IntArray,
    sign: int,
    bounds: tuple[int, int, int, int],
    rate2: Fraction,
) -> _Box | None:
    """The box piece of :class:`_Box` (``None`` when it holds no sorted pair). Work:
    ``O(FINE_LEVELS log d)`` searches and closed-form counts."""
    i_low, i_high, j_low, j_high = bounds
    if sign > 0:
        j_least = max(i_low, j_low)
        if i_low >= i_high or j_least >= j_high:
            return None
        floor = max(int(first[i_low]), int(second[j_least]))
    else:
        if i_low >= i_high or j_low >= j_high or i_low > j_high - 1:
            return None
        floor = max(-int(first[min(i_high, j_high) - 1]), -int(second[j_high - 1]))
    thresholds = _level_thresholds(float(rate2))
    big = np.iinfo(np.int64).max
    limits = np.where(thresholds >= _NO_OFFSET, big, floor + thresholds)
    limits = np.concatenate([limits, [big]])  # level L: limits[L] <= offset + floor < limits[L+1]
    u, v = first[i_low:i_high], second[j_low:j_high]
    if sign > 0:  # u_i < T: a prefix of i; v_j < T: a prefix of j
        i_end = i_low + np.searchsorted(u, limits, side="left")
        j_end = j_low + np.searchsorted(v, limits, side="left")
        j_end[-1], i_end[-1] = j_high, i_high
        counts = _sorted_pairs(np.full_like(i_end, i_low), i_end, np.full_like(j_end, j_low), j_end)
        moving = np.stack([i_end, j_end], axis=1)
    else:  # -a_i < T <=> a_i > -T: a suffix of i; likewise j
        i_start = i_low + np.searchsorted(u, np.where(limits == big, -big, -limits), side="right")
        j_start = j_low + np.searchsorted(v, np.where(limits == big, -big, -limits), side="right")
        i_start[-1], j_start[-1] = i_low, j_low
        counts = _sorted_pairs(
            i_start, np.full_like(i_start, i_high), j_start, np.full_like(j_start, j_high)
        )
        moving = np.stack([i_start, j_start], axis=1)
    sizes = np.diff(counts)
    occupied = np.flatnonzero(sizes > 0)
    sizes = sizes[occupied]
    counts_before = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    level_ends = np.cumsum(sizes.astype(object) * _LEVEL_MASSES[occupied])
    return _Box(
        first,
        second,
        sign,
        i_low,
        i_high,
        j_low,
        j_high,
        floor,
        tuple(occupied.tolist()),
        moving,
        occupied,
        tuple(counts_before.tolist()),
        tuple(level_ends.tolist()),
        int(level_ends[-1]),
    )


@dataclass(frozen=True)
class _Piece:
    """Pairs whose utility separates into one or two families plus a constant, or a box.

    ``product``: pairs ``(first member, second member)``, kept when sorted. ``box``: the
    sorted pairs of a :class:`_Box` (utility the larger of two terms).
    """

    families: tuple[_Family, ...]
    grouped: str
    box: _Box | None = None

    @property
    def floor(self) -> int:
        """The least utility of the piece's pairs."""
        if self.box is not None:
            return self.box.floor
        return sum(f.floor for f in self.families)

    @property
    def mass(self) -> int:
        """The envelope mass of the piece's pairs, in units of ``_ONE**-2`` (before the
        constant's level)."""
        if self.box is not None:
            return self.box.total * _ONE
        if len(self.families) == 1:
            return self.families[0].total * _ONE
        return self.families[0].total * self.families[1].total


def _pieces(first: IntArray, second: IntArray, rate2: Fraction) -> list[_Piece]:
    """The six pieces of ``{(i, j): i <= j}`` by the signs of ``a_i = first[i]`` and
    ``b_j = second[j]``; on each, ``R = max(0, a, b) - min(0, a, b)`` separates."""
    a, b = first, second
    d = a.size
    i0 = int(np.searchsorted(a, 0, side="right"))  # a > 0 from here
    j1 = int(np.searchsorted(b, 0, side="left")) - 1  # b < 0 up to here
    pieces: list[_Piece] = []

    def product(ri: slice, xi: IntArray, si: int, rj: slice, xj: IntArray, sj: int) -> None:
        families = (
            _family(int(ri.start), xi[ri], si, None, rate2),
            _family(int(rj.start), xj[rj], sj, None, rate2),
        )
        pieces.append(_Piece(families, "product"))

    # A: a <= 0 <= b, R = |a| + b (sorted except when every score is 0).
    if i0 > 0 and j1 + 1 < d:
        product(slice(0, i0), a, -1, slice(j1 + 1, d), b, 1)
    # D: a > 0 > b, R = a + |b|; sorted pairs lie in the square [i0, j1]**2.
    if i0 <= j1:
        product(slice(i0, j1 + 1), a, 1, slice(i0, j1 + 1), b, -1)
    # B: a > 0, b >= 0, R = max(a, b); C: a <= 0, b < 0, R = max(|a|, |b|).
    for sign, bounds in ((1, (i0, d, j1 + 1, d)), (-1, (0, i0, 0, j1 + 1))):
        box = _box(a, b, sign, bounds, rate2)
        if box is not None:
            pieces.append(_Piece((), "box", box=box))
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


def select_on_errors(errors: IntArray, rate: Fraction, source: RandomSource) -> int:
    """Draw ``i`` with probability proportional to ``exp(-rate * |errors[i]|)``, exactly: the
    exponential mechanism of one quantile on signed rank errors (non-decreasing along the
    candidates, as :func:`range_errors` makes them).

    The same sampler as :func:`select_pair` with two pieces, the candidates with ``e <= 0``
    (offsets ``-e``) and those with ``e > 0``, each one family, and the same work:
    :data:`PAIR_ROUNDS` rounds of :data:`_ROUND_WORDS` words, whatever the errors (a round reads
    the piece's and the member's words and the coin's). A round's coin has two factors, so it
    accepts with probability above ``(64 / 81)(1 - 2**-27)``, above the pair's bound.
    """
    return _draw_pair(_point_envelope(errors, rate), source)[0]


def _point_envelope(errors: IntArray, rate: Fraction) -> _PairEnvelope:
    """The envelope of :func:`select_on_errors` (checks the errors)."""
    e = np.asarray(errors, dtype=np.int64)
    if e.ndim != 1 or e.size == 0:
        raise ValueError("'errors' must be non-empty and one-dimensional")
    if bool((e[1:] < e[:-1]).any()):
        raise ValueError("'errors' must be non-decreasing along the grid")
    if rate < 0:
        raise ValueError(f"'rate' must be >= 0; received {rate}")
    above = int(np.searchsorted(e, 0, side="right"))  # e > 0 from here
    pieces = []
    if above > 0:
        pieces.append(_Piece((_family(0, e[:above], -1, None, rate),), "single"))
    if above < e.size:
        pieces.append(_Piece((_family(above, e[above:], 1, None, rate),), "single"))
    return _envelope_of(pieces, rate, int(e.size))


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
    if bool((a[1:] < a[:-1]).any()) or bool((b[1:] < b[:-1]).any()):
        raise ValueError("'first' and 'second' must be non-decreasing along the grid")
    if bool((a < b).any()):  # the lower quantile's error is never below the higher one's
        raise ValueError("'first' must be >= 'second' at every grid point")
    if rate < 0:
        raise ValueError(f"'rate' must be >= 0; received {rate}")
    rate2 = 2 * rate
    return _envelope_of(_pieces(a, b, rate2), rate2, int(a.size))


def _envelope_of(pieces: list[_Piece], rate2: Fraction, size: int) -> _PairEnvelope:
    """The envelope over ``pieces`` whose utilities are weighed by ``exp(-rate2 * u)``."""
    floors = [piece.floor for piece in pieces]
    least = min(floors)
    constants = [floor - least for floor in floors]
    estimates = np.array([float(rate2) * float(c) for c in constants])
    constant_levels = [int(x) for x in fine_envelope_levels(estimates)]
    weights = [  # in units of _ONE**-3
        piece.mass * _LEVEL_MASS[level]
        for piece, level in zip(pieces, constant_levels, strict=True)
    ]
    ends = [int(x) for x in np.cumsum(np.array(weights, dtype=object))]
    return _PairEnvelope(pieces, constants, constant_levels, weights, ends, ends[-1], rate2, size)


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
    box = piece.box
    if box is not None:
        i, j, level = box.pair(_uniform_unit((words[2], words[3]), box.total, box.locate, source))
        utility = envelope.constants[index] + box.utility(i, j) - box.floor
        levels = [envelope.constant_levels[index], level]
    elif piece.grouped == "single":
        (family,) = piece.families
        member, level = family.member(
            _uniform_unit((words[2], words[3]), family.total, family.locate, source)
        )
        utility = envelope.constants[index] + family.offset(member)
        levels = [envelope.constant_levels[index], level]
        i = j = family.start + member
    else:
        first, second = piece.families
        member, level = first.member(
            _uniform_unit((words[2], words[3]), first.total, first.locate, source)
        )
        other, other_level = second.member(
            _uniform_unit((words[4], words[5]), second.total, second.locate, source)
        )
        utility = envelope.constants[index] + first.offset(member) + second.offset(other)
        levels = [envelope.constant_levels[index], level, other_level]
        i, j = first.start + member, second.start + other
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
