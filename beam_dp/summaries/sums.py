"""An exact, mergeable sum of clamped values: the accumulator of the private mean (no Beam).

:class:`ExactSum` holds the sum of the values after the one public input rule (NaN and
infinities dropped, others clamped to ``[lower, upper]``; :func:`beam_dp.scores._exact.
clamped_exact_sum`) as an integer multiple of ``2**-1127``, so adding, merging and reading never
round, and the number of values kept (private; never released). The public clamping bounds are
checked by :func:`check_bounds`, which the grids of :mod:`beam_dp.summaries.histogram` use too.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from beam_dp.scores._exact import clamped_exact_sum

__all__ = ["ExactSum", "check_bound", "check_bounds"]


def check_bound(value: object, name: str) -> float:
    """``value`` as a float: a finite real number, exactly a float if it is an integer."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"'{name}' must be a real number; received type {type(value).__name__}")
    as_float = float(value)
    if math.isnan(as_float) or math.isinf(as_float):
        raise ValueError(f"'{name}' must be finite (not NaN or infinity); received {value!r}")
    if isinstance(value, (int, np.integer)) and Fraction(as_float) != int(value):
        raise ValueError(f"'{name}' must be exactly representable as a float; received {value!r}")
    return as_float


def check_bounds(lower: object, upper: object) -> tuple[float, float]:
    """The public clamping bounds ``lower < upper`` as floats (see :func:`check_bound`)."""
    low = check_bound(lower, "lower")
    high = check_bound(upper, "upper")
    if not low < high:
        raise ValueError(f"'lower' must be < 'upper'; received lower={lower!r}, upper={upper!r}")
    return low, high


# Every finite float64 is an integer multiple of 2**-1074 (the smallest subnormal); measuring
# sums in units of 2**-1127 keeps the scaled sum an integer with room to spare.
_SCALE_BITS = 1127


class ExactSum:
    """The exact sum and count of values after the public input rule; mergeable.

    The sum is held as a Python integer multiple of ``2**-1127`` (every finite float is one),
    so adding, merging and reading never round. Per batch it is
    :func:`beam_dp.scores._exact.clamped_exact_sum`, the one exact clamped sum (and the one
    input rule: NaN and infinities dropped, others clamped to ``[lower, upper]``) that
    :class:`~beam_dp.scores.MeanScore` uses too. ``count`` is the number of values kept; it is
    private and never released (see :class:`~beam_dp.scores.MeanScore` for how the mean uses it).
    """

    __slots__ = ("count", "lower", "scaled_sum", "upper")

    def __init__(self, lower: float, upper: float):
        self.lower, self.upper = check_bounds(lower, upper)
        self.scaled_sum = 0  # the sum times 2**1127
        self.count = 0

    def add(self, values: npt.ArrayLike) -> ExactSum:
        """Add values (NaN and infinities dropped, others clamped); returns ``self``."""
        total, count = clamped_exact_sum(values, Fraction(self.lower), Fraction(self.upper))
        # Its denominator is a power of two <= 2**1126 (the bounds' are <= 2**1074).
        self.scaled_sum += total.numerator * ((1 << _SCALE_BITS) // total.denominator)
        self.count += count
        return self

    def merge(self, other: ExactSum) -> ExactSum:
        """Add ``other`` into ``self``; returns ``self``."""
        if not isinstance(other, ExactSum):
            raise TypeError(f"can only merge an ExactSum; received {type(other).__name__}")
        if (other.lower, other.upper) != (self.lower, self.upper):
            raise ValueError("cannot merge sums with different clamping bounds")
        self.scaled_sum += other.scaled_sum
        self.count += other.count
        return self

    @property
    def total(self) -> Fraction:
        """The exact sum of the clamped values."""
        return Fraction(self.scaled_sum, 1 << _SCALE_BITS)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ExactSum):
            return NotImplemented
        return (self.lower, self.upper, self.scaled_sum, self.count) == (
            other.lower,
            other.upper,
            other.scaled_sum,
            other.count,
        )

    __hash__ = None  # type: ignore[assignment]

    def __getstate__(self) -> tuple[float, float, int, int]:
        return (self.lower, self.upper, self.scaled_sum, self.count)

    def __setstate__(self, state: tuple[float, float, int, int]) -> None:
        self.lower, self.upper, self.scaled_sum, self.count = state

    def __repr__(self) -> str:
        return f"ExactSum(lower={self.lower!r}, upper={self.upper!r}, count=<private>)"
