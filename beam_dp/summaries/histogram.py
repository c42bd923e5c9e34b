"""Grid histograms: the exact, mergeable summary behind private quantiles (numpy; no Beam).

A *grid* is a public, sorted list of candidate points ``r_0 < r_1 < ... < r_{d-1}`` (uniform,
log-spaced or explicit; up to :data:`MAX_GRID_POINTS`) together with public clamping bounds
``[lower, upper]``. A *grid histogram* counts values by where they fall relative to the grid,
in ``2d + 1`` slots::

    slot 0        x < r_0                 (underflow)
    slot 2j + 1   x == r_j                (exactly on grid point j)
    slot 2j + 2   r_j < x < r_{j+1}       (strictly inside cell j)
    slot 2d       x > r_{d-1}             (overflow)

so that for every candidate ``r_j``, ``#(x < r_j)`` and ``#(x > r_j)`` are exact prefix and
suffix sums (:func:`less_greater`). Merging two histograms adds them; the state is one int64
array over the slots (or, while few slots are occupied, the same counts stored sparsely), so
memory is O(grid) whatever the number of rows, and the result is the same on one core or a
thousand.

**Public input rule** (:meth:`Grid.prepare`, and :class:`ExactSum` for the mean): NaN, ``+inf``
and ``-inf`` are not data and are dropped (the one rule of every statistic,
:func:`beam_dp.scores._exact.finite_values`, as the pipeline's encoder drops such records);
every other value is clamped to ``[lower, upper]``. With
the grids made by :meth:`Grid.uniform` and :meth:`Grid.log`, ``r_0 == lower`` and
``r_{d-1} == upper``, so the underflow and overflow slots stay empty; they are used by grids
that cover only part of ``[lower, upper]`` (explicit points, the refined grids of the
coarse-to-fine option). Neither the number of dropped nor of clamped values is released.

Slot positions are computed with vectorised numpy (an arithmetic first guess for uniform and
log grids, checked exactly against the grid and corrected with ``np.searchsorted`` where the
guess is off), never per row in Python. Float comparisons are exact, so the slot of a value
is exactly its position relative to the float grid points.

The mean uses :class:`~beam_dp.summaries.sums.ExactSum` (re-exported here), an exact mergeable
sum of clamped values (integers over ``2**-1127``, so no rounding anywhere), built on the
scores' exact clamped sum.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from beam_dp.scores._exact import finite_values
from beam_dp.summaries.sums import ExactSum, check_bounds

__all__ = [
    "GRID_KINDS",
    "MAX_GRID_POINTS",
    "ExactSum",
    "Grid",
    "GridHistogram",
    "GridKind",
    "less_greater",
]

GridKind = Literal["uniform", "log", "explicit"]
GRID_KINDS: tuple[GridKind, ...] = ("uniform", "log", "explicit")

#: The largest grid accepted (about two million points: 32 MB of int64 counts when dense).
MAX_GRID_POINTS = 1 << 21

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

# A sparse histogram is densified once more than this fraction of its slots are occupied,
# and a batch this large (relative to the number of slots) is added densely at once.
_DENSE_FRACTION = 8
_DBL_MAX = float(np.finfo(np.float64).max)


def _check_num_points(num_points: object) -> int:
    if isinstance(num_points, bool) or not isinstance(num_points, (int, np.integer)):
        raise TypeError(
            f"'num_points' must be an integer; received type {type(num_points).__name__}"
        )
    if not 2 <= int(num_points) <= MAX_GRID_POINTS:
        raise ValueError(
            f"'num_points' must be between 2 and {MAX_GRID_POINTS:,} (grid too large or too "
            f"small); received {num_points!r}"
        )
    return int(num_points)


class Grid:
    """Public candidate points and the public clamping bounds of the values.

    Build one with :meth:`uniform`, :meth:`log` or :meth:`explicit`. Candidate ``i`` is
    ``points[i]``; ``points`` is a read-only, strictly increasing float64 array inside
    ``[lower, upper]``.

    Uniform and log grids pickle as their four parameters (the points are rebuilt
    deterministically), so sending a 10^6-point grid to workers costs nothing.
    """

    __slots__ = ("_inv", "_kind", "_lower", "_offset", "_points", "_upper")

    def __init__(self, kind: GridKind, lower: float, upper: float, points: FloatArray):
        self._kind: GridKind = kind
        self._lower = lower
        self._upper = upper
        points = np.array(points, dtype=np.float64)  # a private copy
        points.setflags(write=False)
        self._points = points
        # Parameters of the arithmetic first guess of a value's position (uniform and log).
        self._offset = 0.0
        self._inv = 0.0
        d = points.size
        if kind == "uniform":
            self._offset = float(points[0])
            self._inv = (d - 1) / (float(points[-1]) - float(points[0]))
        elif kind == "log":
            self._offset = math.log(float(points[0]))
            self._inv = (d - 1) / (math.log(float(points[-1])) - self._offset)
        if not math.isfinite(self._inv):
            self._kind = "explicit"  # a guess would overflow; use the exact search only

    # ------------------------------------------------------------------ construction

    @classmethod
    def uniform(cls, lower: float, upper: float, num_points: int) -> Grid:
        """``num_points`` evenly spaced points from ``lower`` to ``upper`` (both included).

        Raises:
            ValueError: bounds not finite or ``lower >= upper``; ``num_points`` outside
                ``[2, MAX_GRID_POINTS]``; or a grid too fine for float64 to keep its points
                distinct.
        """
        low, high = check_bounds(lower, upper)
        d = _check_num_points(num_points)
        if high - low > _DBL_MAX:
            raise ValueError("'upper' - 'lower' must be finite in float64")
        # points[j] = j * step + lower exactly as numpy computes it elementwise (IEEE-rounded
        # multiply and add), so the slot computation can recompute any point without a gather.
        points = np.arange(d, dtype=np.float64) * ((high - low) / (d - 1)) + low
        points[-1] = high
        return cls._validated("uniform", low, high, points)

    @classmethod
    def log(cls, lower: float, upper: float, num_points: int) -> Grid:
        """``num_points`` log-spaced (geometric) points from ``lower`` to ``upper``.

        For heavy-tailed positive data. Requires ``lower > 0``.
        """
        low, high = check_bounds(lower, upper)
        d = _check_num_points(num_points)
        if not low > 0:
            raise ValueError(
                f"'lower' must be > 0 for a log grid; received {lower!r} "
                "(shift the data, or pass explicit points)"
            )
        points = np.geomspace(low, high, d)
        points[0], points[-1] = low, high
        return cls._validated("log", low, high, points)

    @classmethod
    def explicit(
        cls,
        points: Sequence[float] | npt.ArrayLike,
        lower: float | None = None,
        upper: float | None = None,
    ) -> Grid:
        """Explicit public points (finite, strictly increasing), inside ``[lower, upper]``.

        ``lower`` and ``upper`` (the clamping bounds) default to the first and last point.
        """
        if isinstance(points, (str, bytes)):
            raise TypeError("'grid' points must be a sequence of real numbers")
        try:
            array = np.array(points, dtype=np.float64)
        except (TypeError, ValueError) as error:
            raise TypeError("'grid' points must be a sequence of real numbers") from error
        if array.ndim != 1:
            raise ValueError(f"'grid' points must be one-dimensional; received {array.ndim}-d")
        _check_num_points(array.size)
        if not np.all(np.isfinite(array)):
            raise ValueError("'grid' points must be finite (no NaN or infinity)")
        low, high = check_bounds(
            float(array[0]) if lower is None else lower,
            float(array[-1]) if upper is None else upper,
        )
        if array[0] < low or array[-1] > high:
            raise ValueError("'grid' points must lie inside ['lower', 'upper']")
        return cls._validated("explicit", low, high, array)

    @classmethod
    def _validated(cls, kind: GridKind, low: float, high: float, points: FloatArray) -> Grid:
        if not np.all(np.diff(points) > 0):
            raise ValueError(
                "'grid' points must be strictly increasing: the grid is too fine for the "
                "float64 resolution of [lower, upper] (use fewer points)"
                if kind != "explicit"
                else "'grid' points must be sorted strictly increasing (no duplicates)"
            )
        return cls(kind, low, high, points)

    def __reduce__(self) -> tuple[Any, ...]:
        if self._kind in ("uniform", "log"):
            return (_shared_grid, (self._kind, self._lower, self._upper, self.num_points))
        return (Grid, (self._kind, self._lower, self._upper, self._points))

    # -------------------------------------------------------------------- properties

    @property
    def kind(self) -> GridKind:
        """``"uniform"``, ``"log"`` or ``"explicit"``."""
        return self._kind

    @property
    def lower(self) -> float:
        """Lower clamping bound."""
        return self._lower

    @property
    def upper(self) -> float:
        """Upper clamping bound."""
        return self._upper

    @property
    def points(self) -> FloatArray:
        """The candidate points (read-only)."""
        return self._points

    @property
    def num_points(self) -> int:
        """Number of candidates ``d``."""
        return int(self._points.size)

    @property
    def num_slots(self) -> int:
        """Number of histogram slots, ``2d + 1``."""
        return 2 * self.num_points + 1

    def __len__(self) -> int:
        return self.num_points

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Grid):
            return NotImplemented
        return (
            self._lower == other._lower
            and self._upper == other._upper
            and np.array_equal(self._points, other._points)
        )

    def __hash__(self) -> int:
        # In-process only (consistent with __eq__ for dict keys); never used to place data
        # on workers, which use beam_dp.batching.stable_hash64.
        return hash((self._lower, self._upper, self.num_points, float(self._points[1])))

    def __repr__(self) -> str:
        return (
            f"Grid(kind={self._kind!r}, lower={self._lower!r}, upper={self._upper!r}, "
            f"num_points={self.num_points})"
        )

    def cell_width(self, index: int) -> float:
        """The wider of the two grid cells next to candidate ``index`` (0 for a 1-point side)."""
        p = self._points
        left = float(p[index] - p[index - 1]) if index > 0 else 0.0
        right = float(p[index + 1] - p[index]) if index + 1 < p.size else 0.0
        return max(left, right)

    # ------------------------------------------------------------------------ slots

    def prepare(self, values: npt.ArrayLike) -> FloatArray:
        """Apply the public input rule: drop NaN and infinities, clamp the rest to the bounds.

        Raises:
            TypeError: if a value is not a real number (the message never shows it).
        """
        data = finite_values(values, "values")
        np.clip(data, self._lower, self._upper, out=data)
        return data

    def _positions(self, data: FloatArray) -> IntArray:
        """``#(points <= x)`` for every value (exact)."""
        p = self._points
        d = p.size
        if self._kind == "explicit":
            right: IntArray = np.searchsorted(p, data, side="right").astype(np.int64)
            return right
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            if self._kind == "uniform":
                guess = (data - self._offset) * self._inv
            else:
                guess = (np.log(data) - self._offset) * self._inv
        np.nan_to_num(guess, copy=False, nan=-1.0, posinf=d, neginf=-1.0)
        np.clip(guess, -1.0, d, out=guess)
        right = guess.astype(np.int64) + 1  # truncation: guess >= -1, so floor except at -1
        np.clip(right, 0, d, out=right)
        below = p[np.clip(right - 1, 0, d - 1)]
        above = p[np.clip(right, 0, d - 1)]
        ok = ((right == 0) | (below <= data)) & ((right == d) | (above > data))
        if not ok.all():
            bad = np.flatnonzero(~ok)
            right[bad] = np.searchsorted(p, data[bad], side="right")
        return right

    def slots_of_prepared(self, data: FloatArray) -> IntArray:
        """Slot of each value of ``data`` (finite; values off the grid go to under/overflow)."""
        if data.size == 0:
            return np.zeros(0, dtype=np.int64)
        right = self._positions(data)
        p = self._points
        at_point = (right > 0) & (p[np.maximum(right - 1, 0)] == data)
        slots: IntArray = 2 * right - at_point
        return slots

    def _slots_inside(self, data: FloatArray) -> IntArray:
        """Slots of values inside ``[points[0], points[-1]]`` of a uniform or log grid.

        The fast path of :meth:`slots`: an arithmetic guess ``j`` of the cell, checked
        exactly against ``points[j] <= x < points[j+1]`` (one gather each, the first reused
        for the tie test) and corrected with ``np.searchsorted`` where it is off.
        """
        p = self._points
        last = p.size - 1
        if self._kind == "uniform":
            guess = data - self._offset
        else:
            guess = np.log(data)
            guess -= self._offset
        guess *= self._inv
        np.clip(guess, 0.0, float(last), out=guess)  # rounding can step just outside
        index = guess.astype(np.int64)  # non-negative: truncation is floor
        if self._kind == "uniform":
            # Recompute points[j] = j * step + lower (bit-identical, see ``uniform``) instead
            # of gathering from a large array; the last point is ``upper`` itself.
            step = (self._upper - self._lower) / last
            below = index.astype(np.float64)
            below *= step
            below += self._lower
            above = (index + 1).astype(np.float64)
            above *= step
            above += self._lower
            below[index == last] = self._upper
            above[index + 1 >= last] = self._upper
        else:
            below = p[index]
            above = p[np.minimum(index + 1, last)]
        ok = (below <= data) & ((above > data) | (index == last))
        if not ok.all():
            bad = np.flatnonzero(~ok)
            index[bad] = np.searchsorted(p, data[bad], side="right") - 1
            below[bad] = p[index[bad]]
        slots: IntArray = 2 * index + 2 - (below == data)
        return slots

    def slots(self, values: npt.ArrayLike) -> IntArray:
        """Slots of ``values`` after the public input rule (NaN and infinities dropped, clamped)."""
        data = self.prepare(values)
        if data.size == 0:
            return np.zeros(0, dtype=np.int64)
        p = self._points
        if self._kind != "explicit" and p[0] == self._lower and p[-1] == self._upper:
            return self._slots_inside(data)  # clamped values never leave the grid
        return self.slots_of_prepared(data)

    def histogram(self, values: npt.ArrayLike) -> GridHistogram:
        """A new histogram of ``values`` (after the public input rule)."""
        histogram = GridHistogram(self.num_slots)
        histogram.add_slots(self.slots(values))
        return histogram


def _shared_grid(kind: GridKind, lower: float, upper: float, num_points: int) -> Grid:
    """The uniform or log grid of these parameters, built once per process.

    A worker unpickles every DoFn and CombineFn that holds the grid once per bundle processor,
    and a runner builds many of those (one per concurrent bundle, again after each is
    evicted): without sharing, each held its own copy of the points (8 bytes a point; 40
    copies in one Flink SDK worker at 10^8 rows). A grid is immutable (its points
    are read-only), so one object serves every holder. The bounds are keyed by their exact
    bits (``-0.0`` is not ``0.0``).
    """
    return _grid_of_bits(kind, float(lower).hex(), float(upper).hex(), int(num_points))


@functools.lru_cache(maxsize=16)
def _grid_of_bits(kind: GridKind, lower: str, upper: str, num_points: int) -> Grid:
    build = Grid.uniform if kind == "uniform" else Grid.log
    return build(float.fromhex(lower), float.fromhex(upper), num_points)


class GridHistogram:
    """Counts over the ``2d + 1`` slots of a grid: the accumulator of private quantiles.

    Mergeable by addition (:meth:`merge` adds into ``self``); exact int64 counts. While few
    slots are occupied the counts are stored sparsely (sorted slot indices and counts), and
    densely (one int64 per slot) once more than 1/8 of the slots are used; both hold the same
    multiset and :meth:`counts` always returns the dense array. :meth:`compact` picks the
    smaller form, for shipping between workers. Memory is O(number of slots), never O(rows).

    The histogram does not know its grid: the caller computes slots with :meth:`Grid.slots`
    and keeps the grid (the accumulator stays small to pickle).
    """

    __slots__ = ("_counts", "_dense", "_index", "num_slots")

    def __init__(self, num_slots: int):
        if isinstance(num_slots, bool) or not isinstance(num_slots, (int, np.integer)):
            raise TypeError("'num_slots' must be an integer")
        if num_slots < 1:
            raise ValueError(f"'num_slots' must be >= 1; received {num_slots}")
        self.num_slots = int(num_slots)
        self._dense: IntArray | None = None
        self._index: IntArray = np.zeros(0, dtype=np.int64)
        self._counts: IntArray = np.zeros(0, dtype=np.int64)

    # ---------------------------------------------------------------- representation

    @property
    def is_dense(self) -> bool:
        """Whether the counts are currently stored densely."""
        return self._dense is not None

    def _widen(self) -> None:
        # An unpickled histogram keeps its counts in the narrow type they crossed the wire in
        # (__setstate__): a merge of many partials holds them at that size. Counts are widened
        # to int64 before this histogram is changed.
        if self._dense is not None and self._dense.dtype != np.int64:
            self._dense = self._dense.astype(np.int64)
        if self._counts.dtype != np.int64:
            self._counts = self._counts.astype(np.int64)

    def _densify(self) -> IntArray:
        self._widen()
        if self._dense is None:
            dense = np.zeros(self.num_slots, dtype=np.int64)
            dense[self._index] = self._counts
            self._dense = dense
            self._index = np.zeros(0, dtype=np.int64)
            self._counts = np.zeros(0, dtype=np.int64)
        return self._dense

    def _set_sparse(self, index: IntArray, counts: IntArray) -> None:
        self._dense = None
        self._index = index
        self._counts = counts
        if index.size * _DENSE_FRACTION > self.num_slots:
            self._densify()

    @staticmethod
    def _combine(index: IntArray, counts: IntArray) -> tuple[IntArray, IntArray]:
        unique, inverse = np.unique(index, return_inverse=True)
        summed = np.zeros(unique.size, dtype=np.int64)
        np.add.at(summed, inverse.ravel(), counts)
        return unique.astype(np.int64), summed

    # -------------------------------------------------------------------- updates

    def add_slots(self, slots: npt.ArrayLike) -> GridHistogram:
        """Count one value at each slot index in ``slots``; returns ``self``."""
        index = np.asarray(slots, dtype=np.int64).ravel()
        if index.size == 0:
            return self
        if int(index.min()) < 0 or int(index.max()) >= self.num_slots:
            raise ValueError(f"slot indices must lie in [0, {self.num_slots})")
        self._widen()
        if self._dense is not None or index.size * _DENSE_FRACTION > self.num_slots:
            np.add.at(self._densify(), index, 1)
            return self
        unique, counts = np.unique(index, return_counts=True)
        if self._index.size:
            unique, counts = self._combine(
                np.concatenate([self._index, unique]),
                np.concatenate([self._counts, counts.astype(np.int64)]),
            )
        self._set_sparse(unique.astype(np.int64), counts.astype(np.int64))
        return self

    def merge(self, other: GridHistogram) -> GridHistogram:
        """Add ``other``'s counts into ``self`` (``other`` is not modified); returns ``self``."""
        if not isinstance(other, GridHistogram):
            raise TypeError(f"can only merge a GridHistogram; received {type(other).__name__}")
        if other.num_slots != self.num_slots:
            raise ValueError(
                f"cannot merge histograms of different grids ({self.num_slots} and "
                f"{other.num_slots} slots)"
            )
        if other._dense is None and other._index.size == 0:
            return self
        self._widen()
        if self._dense is not None:
            if other._dense is not None:
                self._dense += _wide(other._dense)
            else:
                self._dense[other._index] += _wide(other._counts)
            return self
        if other._dense is not None:
            dense = np.array(other._dense, dtype=np.int64)  # a copy
            dense[self._index] += self._counts
            self._dense = dense
            self._index = np.zeros(0, dtype=np.int64)
            self._counts = np.zeros(0, dtype=np.int64)
            return self
        if self._index.size == 0:
            self._set_sparse(other._index.copy(), np.array(other._counts, dtype=np.int64))
            return self
        self._set_sparse(
            *self._combine(
                np.concatenate([self._index, other._index]),
                np.concatenate([self._counts, _wide(other._counts)]),
            )
        )
        return self

    def compact(self) -> GridHistogram:
        """Store the counts in the smaller form (before an accumulator crosses the wire)."""
        self._widen()
        if self._dense is not None:
            occupied = np.flatnonzero(self._dense)
            if occupied.size * _DENSE_FRACTION <= self.num_slots:
                self._set_sparse(occupied.astype(np.int64), self._dense[occupied])
        return self

    # --------------------------------------------------------------------- reading

    def counts(self) -> IntArray:
        """The dense count array (a copy) of length ``num_slots``."""
        if self._dense is not None:
            return np.array(self._dense, dtype=np.int64)  # a copy
        dense = np.zeros(self.num_slots, dtype=np.int64)
        dense[self._index] = self._counts
        return dense

    @property
    def total(self) -> int:
        """Number of values counted."""
        if self._dense is not None:
            return int(self._dense.sum())
        return int(self._counts.sum())

    @property
    def nbytes(self) -> int:
        """Bytes held by the count arrays (O(num_slots), independent of the row count)."""
        dense = 0 if self._dense is None else self._dense.nbytes
        return dense + self._index.nbytes + self._counts.nbytes

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GridHistogram):
            return NotImplemented
        return self.num_slots == other.num_slots and np.array_equal(self.counts(), other.counts())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        form = "dense" if self.is_dense else "sparse"
        return f"GridHistogram(num_slots={self.num_slots}, {form})"

    def __getstate__(self) -> dict[str, Any]:
        # What crosses a shuffle: counts in the narrowest unsigned type that holds them, and
        # the sparse form's slot indices as gaps between occupied slots (mostly one or two
        # bytes each). A partial over a 10^6-point grid is then a few MB instead of 16, which
        # is what a runner that hands all partials of a key to one merge (Flink's batch
        # GroupReduce) holds in one record, and an unpickled partial keeps the narrow type
        # until it is changed, so that merge holds every partial at this size too.
        if self._dense is not None:
            return {"num_slots": self.num_slots, "dense": _narrow(self._dense)}
        gaps = np.diff(self._index, prepend=np.int64(0))
        return {
            "num_slots": self.num_slots,
            "gaps": _narrow(gaps),
            "counts": _narrow(self._counts),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.num_slots = int(state["num_slots"])
        # Counts stay in their narrow type until this histogram changes (_widen).
        self._dense = state.get("dense")
        if "gaps" in state:
            self._index = np.cumsum(np.asarray(state["gaps"], dtype=np.int64), dtype=np.int64)
        else:
            self._index = np.zeros(0, dtype=np.int64)
        self._counts = state.get("counts", self._index[:0])


def _wide(array: npt.NDArray[np.integer[Any]]) -> IntArray:
    """``array``'s values as int64 (no copy when they are int64 already)."""
    wide: IntArray = array.astype(np.int64, copy=False)
    return wide


def _narrow(array: IntArray) -> npt.NDArray[np.unsignedinteger[Any]]:
    """``array`` (non-negative int64) in the narrowest of uint8, uint16, uint32 and uint64."""
    largest = int(array.max()) if array.size else 0
    if int(array.min(initial=0)) < 0:
        raise ValueError("histogram counts and slot gaps are never negative")
    for dtype in (np.uint8, np.uint16, np.uint32):
        if largest <= np.iinfo(dtype).max:
            return array.astype(dtype)
    return array.astype(np.uint64)


def less_greater(counts: npt.ArrayLike) -> tuple[IntArray, IntArray]:
    """``(#(x < r_j), #(x > r_j))`` for every grid point from dense slot counts.

    Args:
        counts: the ``2d + 1`` slot counts of a histogram (:meth:`GridHistogram.counts`).

    Returns:
        Two int64 arrays of length ``d``.
    """
    array = np.asarray(counts, dtype=np.int64)
    if array.ndim != 1 or array.size % 2 != 1:
        raise ValueError("'counts' must be one-dimensional with an odd length 2d + 1")
    cumulative = np.cumsum(array)
    total = int(cumulative[-1])
    less: IntArray = cumulative[0:-1:2].copy()  # slots below 2j + 1: cumulative[2j]
    greater: IntArray = total - cumulative[1::2]  # slots above 2j + 1
    return less, greater
