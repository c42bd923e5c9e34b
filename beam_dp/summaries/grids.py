"""Grids that follow the column's resolution (pure; no Beam).

A column whose schema declares integers (:func:`beam_dp.io.schema.column_resolution`), or a
decimal column with a known resolution (cents, 0.1 kg), only ever holds multiples of that
resolution. :func:`resolution_grid` puts the quantile (and price) candidates exactly on those
multiples inside ``[lower, upper]``: every grid point is a value the column can hold, and no
two grid points have a value of the column strictly between them.

Exact decimal arithmetic
------------------------
The resolution is read as the decimal it was written as (``"0.01"``, ``0.1`` is 1/10, not the
binary float nearest to it) and grid point ``k`` is the exact decimal ``k * step``, converted
once to the nearest float64. That is the float a reader produces from the same decimal text
(CSV ``"0.07"``, JSON ``0.07``, a Parquet ``decimal(9, 2)`` cast to float64), so a value
equals its grid point exactly and falls in the grid point's own histogram slot. Accumulating
``lower + k * 0.01`` in floats does not: ``3 * 0.01 != 0.03``.

Grid cap
--------
When ``[lower, upper]`` holds more than ``max_points`` multiples of the resolution, the step is
the smallest integer multiple ``m`` of the resolution that fits (``m`` = ceil(multiples /
max_points)), the points are the multiples of ``m * resolution``: still attainable, ``m``
apart. The step is public (from ``lower``, ``upper``, the resolution and the cap).

Ties: what a quantile means when many rows share a value
---------------------------------------------------------
A released value ``v`` is an exact ``alpha``-quantile of ``N`` values when ``alpha N`` lies in
its rank interval ``[#(x < v), #(x <= v)]``. A value held by many rows has a wide interval:
the median of ``[1, 2, 2, 2, 2, 9]`` is 2, and so is every quantile from 1/6 to 5/6. The
quantile score ``-|(1 - alpha) #(x < r) - alpha #(x > r)|`` counts rows *equal* to ``r`` on
neither side, so a grid point holding the quantile's tie block scores best and its rank error
is 0; a point just beside the block has the whole block on one side. On a resolution grid
every candidate is attainable, so among equally scored candidates (for example the points of
an empty stretch of the column) the one released is always a value the column can hold, by
construction: there are no unattainable candidates. (A uniform grid with several points
between two consecutive integers has points that all score the same and none of which is
attainable: that is where the measured medians spread over ``[-5.9, -5.0]``.)

Wiring: the result is a :class:`~beam_dp.summaries.histogram.Grid`, built with
:meth:`Grid.uniform` when its points are integers that the uniform construction reproduces
exactly (it pickles as four numbers), and :meth:`Grid.explicit` otherwise. Transforms accept
a ``Grid`` as ``grid=`` (with matching ``lower``/``upper``).
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from numbers import Integral, Real

import numpy as np

from beam_dp.summaries.histogram import MAX_GRID_POINTS, Grid

__all__ = [
    "DEFAULT_MAX_POINTS",
    "grid_step",
    "integer_grid",
    "parse_resolution",
    "resolution_grid",
]

#: The default cap on grid points (the quantile transforms' default grid size).
DEFAULT_MAX_POINTS = 10**6

ResolutionLike = int | float | str | Decimal | Fraction


def parse_resolution(resolution: object, name: str = "resolution") -> Fraction:
    """The resolution as the exact decimal it was written as (``0.1`` and ``"0.1"`` are 1/10).

    Raises:
        TypeError / ValueError: naming ``name``: not a number, not > 0, or not finite.
    """
    if isinstance(resolution, bool):
        raise TypeError(f"'{name}' must be a positive number; received type bool")
    value: Fraction
    if isinstance(resolution, Fraction):
        value = resolution
    elif isinstance(resolution, (str, Decimal)):
        try:
            decimal = Decimal(resolution)
        except InvalidOperation:
            raise ValueError(f"'{name}' must be a decimal number such as '0.01'") from None
        if not decimal.is_finite():
            raise ValueError(f"'{name}' must be finite")
        value = Fraction(decimal)
    elif isinstance(resolution, Integral):
        value = Fraction(int(resolution))
    elif isinstance(resolution, Real):
        as_float = float(resolution)
        if not math.isfinite(as_float):
            raise ValueError(f"'{name}' must be finite")
        value = Fraction(Decimal(repr(as_float)))  # the shortest decimal that reads back
    else:
        raise TypeError(
            f"'{name}' must be a positive number; received type {type(resolution).__name__}"
        )
    if not value > 0:
        raise ValueError(f"'{name}' must be > 0; received {resolution!r}")
    return value


def _exact_bound(value: object, name: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (Real, Decimal, Fraction)):
        raise TypeError(f"'{name}' must be a real number; received type {type(value).__name__}")
    if isinstance(value, (Fraction, Decimal)):
        return Fraction(value)
    as_float = float(value)
    if not math.isfinite(as_float):
        raise ValueError(f"'{name}' must be finite (not NaN or infinity); received {value!r}")
    return Fraction(int(value)) if isinstance(value, Integral) else Fraction(as_float)


def grid_step(
    lower: object,
    upper: object,
    resolution: ResolutionLike = 1,
    max_points: int = DEFAULT_MAX_POINTS,
) -> tuple[Fraction, int, int]:
    """The grid's exact step and its first and last multiple: points are ``k * step``.

    Returns:
        ``(step, first, last)``: ``step`` is the smallest integer multiple of ``resolution``
        giving at most ``max_points`` points, and the points are ``k * step`` for
        ``first <= k <= last``, all inside ``[lower, upper]``.

    Raises:
        ValueError: naming the parameter: bounds not finite or not ordered, a resolution not
            > 0, a cap outside ``[2, MAX_GRID_POINTS]``, or fewer than two points fit.
    """
    low = _exact_bound(lower, "lower")
    high = _exact_bound(upper, "upper")
    if not low < high:
        raise ValueError(f"'lower' must be < 'upper'; received lower={lower!r}, upper={upper!r}")
    res = parse_resolution(resolution)
    if isinstance(max_points, bool) or not isinstance(max_points, Integral):
        raise TypeError("'max_points' must be an integer")
    if not 2 <= int(max_points) <= MAX_GRID_POINTS:
        raise ValueError(f"'max_points' must be between 2 and {MAX_GRID_POINTS:,}")
    first = math.ceil(low / res)
    last = math.floor(high / res)
    multiples = last - first + 1
    factor = max(1, math.ceil(multiples / int(max_points)))
    step = res * factor
    first = math.ceil(low / step)
    last = math.floor(high / step)
    if last - first + 1 < 2:
        raise ValueError(
            "fewer than two multiples of 'resolution' lie in ['lower', 'upper']: widen the "
            "bounds or use a finer resolution"
        )
    return step, first, last


def resolution_grid(
    lower: object,
    upper: object,
    resolution: ResolutionLike = 1,
    max_points: int = DEFAULT_MAX_POINTS,
) -> Grid:
    """The grid of the multiples of ``resolution`` in ``[lower, upper]`` (module docstring).

    Args:
        lower, upper: the public clamping bounds (values outside are clamped to them).
        resolution: the column's resolution: 1 for integers, ``"0.01"`` for cents, ``"0.1"``
            for 0.1 kg. Read as the decimal written (a float by its shortest repr).
        max_points: the cap on grid points; above it the step is a coarser multiple.

    Returns:
        A :class:`Grid` whose clamping bounds are ``lower`` and ``upper`` and whose points
        are the exact decimals ``k * step`` rounded once to float64.
    """
    step, first, last = grid_step(lower, upper, resolution, max_points)
    low = float(_exact_bound(lower, "lower"))
    high = float(_exact_bound(upper, "upper"))
    count = last - first + 1
    if step.denominator == 1 and abs(first) < 2**52 and abs(last) < 2**52:
        start = first * int(step)
        stop = last * int(step)
        points = np.arange(count, dtype=np.int64) * int(step) + start
        if start == low and stop == high:
            grid = Grid.uniform(low, high, count)
            if np.array_equal(grid.points, points.astype(np.float64)):
                return grid
        return Grid.explicit(points.astype(np.float64), low, high)
    p, q = step.numerator, step.denominator
    if max(abs(first), abs(last)) * p < 2**53 and q < 2**53:
        # k * p and q are exact in float64 and IEEE division rounds once, correctly: each
        # point is the float nearest to the exact decimal k * p / q.
        numerators = np.arange(first, last + 1, dtype=np.int64) * p
        decimals = numerators.astype(np.float64) / float(q)
    else:
        decimals = np.array(
            [float(Fraction(k) * step) for k in range(first, last + 1)], dtype=np.float64
        )
    return Grid.explicit(decimals, low, high)


def integer_grid(lower: object, upper: object, max_points: int = DEFAULT_MAX_POINTS) -> Grid:
    """The integers in ``[lower, upper]`` (or every ``m``-th one when more than ``max_points``)."""
    return resolution_grid(lower, upper, 1, max_points)
