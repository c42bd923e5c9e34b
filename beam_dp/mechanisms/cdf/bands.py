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
``C_i = c`` is ``P_{i-1}(min(c, hi_{i-1}))`` (zero below ``lo_{i-1}``), and ``A(s)`` is the
last column's total. Each column is a slice of the previous prefix sums plus one
``itertools.accumulate`` of exact Python integers, so a band costs ``O(sum_i width_i)``
big-integer additions. A uniform path is drawn backwards through the stored prefix sums with
exact uniform integers: ``C_{m-1} = k``, then ``C_i`` given ``C_{i+1} = c'`` is the ``c``
with ``P_i(c - 1) <= r < P_i(c)`` for ``r`` uniform below ``P_i(min(c', hi_i))``.

``A(s)`` changes only at the *breakpoints* ``|T_i - scale * c|`` (``0 <= c <= k``).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_dp.mechanisms.cdf.exact_reals import randbelow
from beam_dp.mechanisms.randomness import RandomSource

__all__ = ["Bands", "Tables", "path_from_points", "points_from_path", "uniform_multiset"]

#: Per column: (lowest allowed value, prefix sums over the allowed values).
Tables = list[tuple[int, list[int]]]

_INT64_SAFE = 1 << 61


class Bands:
    """The bands of one problem: targets ``T_i`` (non-decreasing), ``scale > 0`` and ``k``.

    Args:
        targets: ``T_0..T_{m-2}`` (one per constrained column), non-negative and
            non-decreasing integers.
        scale: a positive integer.
        k: the number of points (>= 1).
    """

    def __init__(self, targets: Sequence[int], scale: int, k: int):
        if scale < 1:
            raise ValueError("'scale' must be >= 1")
        self.k = int(k)
        self.scale = int(scale)
        self.columns = len(targets)
        largest = max([0, *targets]) + self.scale * self.k
        dtype: Any = np.int64 if largest < _INT64_SAFE else object
        self._targets: npt.NDArray[Any] = np.array([int(t) for t in targets], dtype=dtype)
        self._total: int | None = None

    # ------------------------------------------------------------------ windows

    def windows(self, level: int) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """``(lo, hi)`` per column at ``level`` (an empty column has ``lo > hi``)."""
        t = self._targets
        lo = np.maximum(-((level - t) // self.scale), 0)
        hi = np.minimum((t + level) // self.scale, self.k)
        return lo, hi

    def feasible(self, level: int) -> bool:
        """Whether some path has deviation ``<= level`` (greedy: ``C_i = max(C_{i-1}, lo_i)``)."""
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
        """The smallest deviation of any path (a breakpoint; binary search on feasibility)."""
        low, high = 0, len(breakpoints) - 1  # the largest breakpoint admits every path
        while low < high:
            mid = (low + high) // 2
            if self.feasible(int(breakpoints[mid])):
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
        return out

    def _run(self, level: int, keep: Tables | None) -> int:
        if self.columns == 0:
            return 1
        lo_array, hi_array = self.windows(level)
        los, his = lo_array.tolist(), hi_array.tolist()
        previous_lo, previous_hi = los[0], his[0]
        if previous_lo > previous_hi:
            return 0
        prefix = list(range(1, previous_hi - previous_lo + 2))  # one prefix per allowed C_0
        if keep is not None:
            keep.append((previous_lo, prefix))
        accumulate = itertools.accumulate
        for lo, hi in zip(los[1:], his[1:], strict=True):
            # C_i = c needs C_{i-1} in [previous_lo, min(c, previous_hi)]: that many prefixes
            # is prefix[min(c, previous_hi) - previous_lo] (none below previous_lo).
            if lo > hi or hi < previous_lo:
                return 0
            start = lo if lo >= previous_lo else previous_lo
            if hi <= previous_hi:
                ending = prefix[start - previous_lo : hi - previous_lo + 1]
            elif start <= previous_hi:
                ending = prefix[start - previous_lo :] + [prefix[-1]] * (hi - previous_hi)
            else:
                ending = [prefix[-1]] * (hi - start + 1)
            if start > lo:
                ending = [0] * (start - lo) + ending
            prefix = list(accumulate(ending))
            if keep is not None:
                keep.append((lo, prefix))
            previous_lo, previous_hi = lo, hi
        return prefix[-1]

    def uniform_path(self, tables: Tables, source: RandomSource) -> list[int]:
        """A uniformly random path of the band whose :meth:`tables` are given.

        Returns ``C_0..C_{m-1}`` (the last entry is ``k``).
        """
        path = [0] * self.columns + [self.k]
        upper = self.k
        for i in range(self.columns - 1, -1, -1):
            lo, prefix = tables[i]
            top = min(upper, lo + len(prefix) - 1) - lo
            r = randbelow(prefix[top], source)
            upper = lo + bisect.bisect_right(prefix, r, 0, top + 1)
            path[i] = upper
        return path

    def total(self) -> int:
        """The number of all paths: multisets of ``k`` points from ``m``, C(m + k - 1, k)."""
        if self._total is None:
            self._total = math.comb(self.columns + self.k, self.k)
        return self._total


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
