"""Exact rationals at the bottom of the package (pure Python; imported by every pure layer).

The one place for two rules that the accountant, the scores, the summaries and the mechanisms
all need:

- **Rounding a rational to a float in a known direction** (:func:`float_at_least`,
  :func:`float_at_most`): a budget left over is rounded down so that it is never overstated,
  a cost is rounded up so that it is never understated, and a float compared with the rounded
  bound answers the exact rational question (``x >= value`` iff ``x >= float_at_least(value)``).
- **A positive parameter as the exact rational it denotes** (:func:`positive_fraction`): an
  ``epsilon`` given as a float is used as the binary value the float holds, never re-rounded.
"""

from __future__ import annotations

import math
from fractions import Fraction

from beam_dp._validation import check_positive_finite, to_fraction

__all__ = ["float_at_least", "float_at_most", "positive_fraction"]


def float_at_least(value: Fraction) -> float:
    """The smallest float ``f >= value``: for every float ``x``, ``x >= value`` iff ``x >= f``."""
    nearest = float(value)  # correctly rounded
    if Fraction(nearest) < value:
        nearest = math.nextafter(nearest, math.inf)
    return nearest


def float_at_most(value: Fraction) -> float:
    """The largest float ``f <= value``: for every float ``x``, ``x <= value`` iff ``x <= f``."""
    nearest = float(value)
    if Fraction(nearest) > value:
        nearest = math.nextafter(nearest, -math.inf)
    return nearest


def positive_fraction(value: object, name: str) -> Fraction:
    """``value`` (> 0 and finite) as the exact rational it denotes; NaN and infinity refused.

    Raises:
        TypeError: if ``value`` is not a real number.
        ValueError: naming ``name`` if it is not > 0 and finite.
    """
    check_positive_finite(value, name)
    return to_fraction(value, name)
