"""Lattice paths of cumulative counts inside a KS band: count them, draw one uniformly.

A multiset of ``k`` points on a grid of ``m`` points is a non-decreasing *path*
``0 <= C_0 <= C_1 <= ... <= C_{m-1} = k`` with ``C_i`` = the number of points at or below
grid point ``i``. Given integer targets ``T_i`` and a positive integer ``scale``, the
*deviation* of a path is ``D(C) = max_{i < m-1} |T_i - scale * C_i|`` (the last point is
fixed at ``k`` and never counted), and the *band* of level ``s`` is the set of paths with
``D(C) <= s``: column ``i`` may take the values

    ``lo_i(s) = max(0, ceil((T_i - s) / scale))``
    ``<= C_i <= min(k, floor((T_i + s) / scale)) = hi_i(s)``.

``A(s)``, the number of paths in the band, is a dynamic program over the columns: with
``P_i(c)`` the number of valid prefixes ``C_0..C_i`` with ``C_i <= c``, the number ending at
``C_i = c`` is ``P_{i-1}(c)`` for ``c`` in the window (zero outside it), and ``A(s)`` is the
last column's ``P(k)``.

**Work fixed by public values.** A window holds at most ``floor(2 s / scale) + 1`` values, so
its size says something about the data. Each column is therefore processed over a *padded*
range of ``width`` cells (``k + 1`` unless the caller derives a smaller public bound, see
:func:`padded_width`) that contains the window: zeros outside the window, one
``itertools.accumulate`` of exact Python integers over the whole range. A band costs exactly
``(m - 1) * width`` cells whatever the targets, unless a window is wider than ``width``
(possible only when the caller's public bound on the levels fails; then the column takes its
window's size). The time of a big-integer addition grows with the size of its operands, and a
zero is cheaper than a count: so every cell carries ``OFFSET + P`` with the public
``OFFSET = 2**bit_length(|R|) > P``. A column sums the cells (``(j + 1) OFFSET + P`` after
``j + 1`` cells, a bit length fixed by ``j``) and subtracts ``j OFFSET`` (back to
``OFFSET + P``, bit length fixed), so the size of every operand and result is public.

A uniform path is drawn backwards with a binary descent of fixed depth ``bit_length(k)`` per
column, each step an exact Bernoulli of a ratio of integers
(:func:`~beam_dp.mechanisms.cdf.exact_reals.bernoulli_ratio`, whose number of random bits has
the same law for every ratio). :class:`Counters` records the work done (tests compare it on
neighbouring datasets).

``A(s)`` changes only at the *breakpoints* ``|T_i - scale * c|`` (``0 <= c <= k``); the
smallest deviation is found by a binary search over them with a fixed number of steps
(``bit_length((m - 1)(k + 1))``, the most breakpoints there can be).
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_dp.mechanisms.cdf.exact_reals import BitStream, bernoulli_ratio, randbelow
from beam_dp.mechanisms.randomness import RandomSource

__all__ = [
    "Bands",
    "Counters",
    "Tables",
    "padded_width",
    "path_from_points",
    "points_from_path",
    "uniform_multiset",
]

#: Per column: (first value of the padded range, ``OFFSET + P_i`` over the range).
Tables = list[tuple[int, list[int]]]

_INT64_SAFE = 1 << 61


@dataclass
class Counters:
    """Work done by a :class:`Bands` (and the sampler that owns it); never released or logged.

    Attributes:
        feasibility_checks: greedy feasibility tests (one per step of the minimum search).
        band_counts: dynamic programs run (counts and tables).
        cells: (column, value) cells those programs processed.
        tables: dynamic programs that kept their prefix sums (one per draw).
    """

    feasibility_checks: int = 0
    band_counts: int = 0
    cells: int = 0
    tables: int = 0


def padded_width(k: int, scale: int, level_bound: int | None) -> int:
    """Cells per column that hold every window of a level ``<= level_bound`` (``k + 1`` if None).

    A window at level ``s`` holds at most ``floor(2 s / scale) + 1`` values (the ceiling and
    the floor of ``(T -+ s) / scale`` are at most ``2 s / scale`` apart). ``level_bound`` must
    be public: the width then depends on public values only.
    """
    if level_bound is None:
        return k + 1
    return min(k + 1, 2 * max(level_bound, 0) // scale + 1)


class Bands:
    """The bands of one problem: targets ``T_i`` (non-decreasing), ``scale > 0`` and ``k``.

    Args:
        targets: ``T_0..T_{m-2}`` (one per constrained column), non-negative and
            non-decreasing integers.
        scale: a positive integer.
        k: the number of points (>= 1).
        width: the padded cells per column (``1 <= width <= k + 1``; ``k + 1`` by default):
            a public bound on the window sizes the caller will ask for (module docstring).
    """

    def __init__(self, targets: Sequence[int], scale: int, k: int, *, width: int | None = None):
        if scale < 1:
            raise ValueError("'scale' must be >= 1")
        self.k = int(k)
        self.scale = int(scale)
        self.columns = len(targets)
        self.width = self.k + 1 if width is None else int(width)
        if not 1 <= self.width <= self.k + 1:
            raise ValueError("'width' must be between 1 and k + 1")
        largest = max([0, *targets]) + self.scale * self.k
        dtype: Any = np.int64 if largest < _INT64_SAFE else object
        self._targets: npt.NDArray[Any] = np.array([int(t) for t in targets], dtype=dtype)
        self._total = math.comb(self.columns + self.k, self.k)
        # OFFSET > every P (P_i(c) <= |R|), and j OFFSET for j <= k (see _run).
        self._offset = 1 << self._total.bit_length()
        self._steps = [j * self._offset for j in range(self.k + 1)]
        self.counters = Counters()

    # ------------------------------------------------------------------ windows

    def windows(self, level: int) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """``(lo, hi)`` per column at ``level`` (an empty column has ``lo > hi``)."""
        t = self._targets
        lo = np.maximum(-((level - t) // self.scale), 0)
        hi = np.minimum((t + level) // self.scale, self.k)
        return lo, hi

    def feasible(self, level: int) -> bool:
        """Whether some path has deviation ``<= level`` (greedy: ``C_i = max(C_{i-1}, lo_i)``)."""
        self.counters.feasibility_checks += 1
        if self.columns == 0:
            return True
        lo, hi = self.windows(level)
        return bool(np.all(np.maximum.accumulate(lo) <= hi))

    def breakpoints(self) -> npt.NDArray[Any]:
        """The sorted distinct values ``|T_i - scale * c|``: where ``A`` can change."""
        if self.columns == 0:
            return np.zeros(1, dtype=np.int64)
        values = np.arange(self.k + 1, dtype=self._targets.dtype) * self.scale
        every = np.abs(self._targets[:, None] - values[None, :]).ravel()
        if every.dtype == object:
            return np.array(sorted({int(v) for v in every}), dtype=object)
        every.sort()
        keep = np.empty(every.size, dtype=bool)
        keep[0] = True
        np.not_equal(every[1:], every[:-1], out=keep[1:])
        distinct: npt.NDArray[Any] = every[keep]
        return distinct

    def min_deviation(self, breakpoints: npt.NDArray[Any]) -> int:
        """The smallest deviation of any path: a breakpoint, by binary search on feasibility.

        The search takes ``bit_length((m - 1)(k + 1))`` steps whatever the number of distinct
        breakpoints (at most ``(m - 1)(k + 1)``); steps after the answer is pinned down test
        it again.
        """
        steps = max(1, (self.columns * (self.k + 1)).bit_length())
        low, high = 0, len(breakpoints) - 1  # the largest breakpoint admits every path
        for _ in range(steps):
            mid = (low + high) // 2
            inside = self.feasible(int(breakpoints[mid]))
            if low < high:
                if inside:
                    high = mid
                else:
                    low = mid + 1
        return int(breakpoints[low])

    def deviation(self, path: Sequence[int]) -> int:
        """``max_i |T_i - scale * C_i|`` over the constrained columns of a path."""
        if self.columns == 0:
            return 0
        column = np.array([int(c) for c in path[: self.columns]], dtype=self._targets.dtype)
        return int(np.abs(self._targets - self.scale * column).max())

    # ------------------------------------------------------------------ counting

    def count(self, level: int) -> int:
        """``A(level)``: the number of paths with deviation ``<= level``."""
        return self._run(level, None)

    def tables(self, level: int) -> Tables:
        """The prefix sums of every column at ``level`` (for :meth:`uniform_path`)."""
        out: Tables = []
        self._run(level, out)
        self.counters.tables += 1
        return out

    def _run(self, level: int, keep: Tables | None) -> int:
        self.counters.band_counts += 1
        if self.columns == 0:
            return 1
        lo_array, hi_array = self.windows(level)
        k, width = self.k, self.width
        # Per column, with numpy (the same operations whatever the windows): the padded
        # range [start, start + size) holding the window [lo, hi], and how it lines up with
        # the previous column's range. (np.minimum / np.maximum, not np.clip: the same values,
        # without clip's per-call overhead, which dominated small problems.)
        maximum, minimum = np.maximum, np.minimum
        lo = minimum(lo_array, k + 1).astype(np.int64)
        hi = hi_array.astype(np.int64)
        size = maximum(hi - lo + 1, width)  # wider than width only if a bound failed
        start = maximum(minimum(lo, k + 1 - size), 0)
        previous_start = np.empty_like(start)
        previous_start[0] = 0
        previous_start[1:] = start[:-1]
        previous_size = np.empty_like(size)
        previous_size[0] = 1
        previous_size[1:] = size[:-1]
        below = minimum(maximum(previous_start - start, 0), size)
        first = maximum(start - previous_start, 0)
        stop = minimum(start + size - previous_start, previous_size)
        fill = size - below - maximum(stop - first, 0)
        head = minimum(maximum(lo - start, 0), size)
        tail = minimum(maximum(hi + 1 - start, 0), size)
        offset = self._offset
        steps = self._steps
        offsets = [offset] * (k + 1)
        accumulate = itertools.accumulate
        subtract = operator.sub
        # forms[j] = OFFSET + P_{i-1}(start + j); before the first column P_{-1}(c) = 1 (the
        # empty prefix), and P is 0 below a range and its last value above it.
        forms = [offset + 1]
        columns = zip(
            start.tolist(),
            size.tolist(),
            below.tolist(),
            first.tolist(),
            stop.tolist(),
            fill.tolist(),
            head.tolist(),
            tail.tolist(),
            strict=True,
        )
        cells = 0
        for begin, cells_here, under, low, high, more, zero_to, zero_from in columns:
            column = offsets[:under] + forms[low:high] + [forms[-1]] * more
            # C_i = c only inside the window [lo, hi]: P = 0 (the form OFFSET) outside.
            column[:zero_to] = offsets[:zero_to]
            column[zero_from:] = offsets[: cells_here - zero_from]
            # sums[j] = (j + 1) OFFSET + P_i(start + j), and back to forms: every operand and
            # result has a bit length fixed by j and OFFSET, whatever P (module docstring).
            forms = list(map(subtract, accumulate(column), steps))  # map stops at the column
            cells += cells_here
            if keep is not None:
                keep.append((begin, forms))
        self.counters.cells += cells
        return forms[-1] - offset

    def uniform_path(self, tables: Tables, source: RandomSource | BitStream) -> list[int]:
        """A uniformly random path of the band whose :meth:`tables` are given.

        ``C_i`` given ``C_{i+1} = u`` takes ``c <= u`` with probability
        ``∝ P_i(c) - P_i(c - 1)``, drawn by a binary descent over ``[0, 2**bit_length(k))``
        (the same ``bit_length(k)`` exact Bernoulli steps in every column, whatever the band).

        Returns ``C_0..C_{m-1}`` (the last entry is ``k``).
        """
        bits = source if isinstance(source, BitStream) else BitStream(source)
        path = [0] * self.columns + [self.k]
        upper = self.k
        depth = self.k.bit_length()
        for i in range(self.columns - 1, -1, -1):
            start, forms = tables[i]
            path[i] = upper = _descend(start, forms, upper, depth, self._offset, bits)
        return path

    def total(self) -> int:
        """The number of all paths: multisets of ``k`` points from ``m``, C(m + k - 1, k)."""
        return self._total


def _descend(
    start: int, forms: list[int], upper: int, depth: int, offset: int, bits: BitStream
) -> int:
    """``c <= upper`` with probability ``∝ P(c) - P(c - 1)``: ``depth`` exact coins.

    ``forms`` holds ``OFFSET + P`` from ``start`` on (``P = 0`` below, its last value above);
    differences of forms are differences of ``P``. Node ``[low, low + 2 half)`` goes left with
    probability (mass of its left half) / (its mass).
    """
    size = len(forms)

    def form(c: int) -> int:  # OFFSET + P(min(c, upper))
        j = min(c, upper) - start
        if j < 0:
            return offset
        return forms[j] if j < size else forms[-1]

    low = 0
    for step in range(depth - 1, -1, -1):
        half = 1 << step
        base = form(low - 1)
        left = form(low + half - 1) - base
        total = form(low + 2 * half - 1) - base
        if not bernoulli_ratio(left, total, bits):
            low += half
    return low


def uniform_multiset(num_points: int, k: int, source: RandomSource) -> list[int]:
    """A uniformly random multiset of ``k`` grid indices in ``[0, num_points)``, sorted.

    Stars and bars: a uniform ``k``-subset ``p_0 < ... < p_{k-1}`` of
    ``[0, num_points + k - 1)`` (Floyd's algorithm, ``k`` exact uniform integers) gives the
    multiset ``p_j - j``; the map is a bijection.
    """
    universe = num_points + k - 1
    chosen: set[int] = set()
    for j in range(universe - k, universe):
        t = randbelow(j + 1, source)
        chosen.add(j if t in chosen else t)
    return [p - j for j, p in enumerate(sorted(chosen))]


def path_from_points(points: Sequence[int], num_points: int) -> list[int]:
    """``C_i = #{points <= i}`` for ``i`` in ``[0, num_points)``."""
    counts = [0] * num_points
    for p in points:
        counts[int(p)] += 1
    return list(itertools.accumulate(counts))


def points_from_path(path: Sequence[int]) -> tuple[int, ...]:
    """The sorted grid indices of a path (grid index ``i`` repeated ``C_i - C_{i-1}`` times)."""
    out: list[int] = []
    previous = 0
    for i, c in enumerate(path):
        out.extend([i] * (int(c) - previous))
        previous = int(c)
    return tuple(out)
