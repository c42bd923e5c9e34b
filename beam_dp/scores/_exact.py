"""Exact rational helpers shared by the scores and summaries (no float arithmetic that rounds).

Everything here either returns exact rationals (``Fraction``, Python ``int``) or floats chosen so
that a float comparison answers an exact rational question.

**What is a data value** (one rule for every statistic, :func:`finite_values`): NaN, ``+inf``
and ``-inf`` are not data. The pure layers drop them (the mean's :class:`~beam_dp.scores.MeanScore`
and :class:`~beam_dp.summaries.histogram.ExactSum`, the quantile grid's
:meth:`~beam_dp.summaries.histogram.Grid.prepare`), exactly as the pipeline's encoder treats a
NaN, null or infinite value as a bad record (dropped with ``on_bad_record="skip"``, an error
with ``"fail"``). Every finite value is then clamped to the statistic's public bounds. Neither
how many values were dropped nor how many were clamped is released.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from numbers import Integral
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_dp._rational import float_at_least, float_at_most
from beam_dp._validation import to_fraction

__all__ = [
    "INT64_MAX",
    "MAX_SIGNIFICANT_DIGITS",
    "as_count_array",
    "as_float_array",
    "as_index_array",
    "check_fits_int64",
    "clamped_exact_sum",
    "decimal_fraction",
    "decimal_places",
    "exact_float_sum",
    "finite_values",
    "float_at_least",
    "float_at_most",
    "float_tuple",
    "significant_digits",
]

INT64_MAX = 2**63 - 1

# Decimals with at most this many significant digits survive a round trip through a double:
# two different ones never round to the same float, which makes float comparisons against the
# nearest float of such a decimal exact (see ``Revenue``).
MAX_SIGNIFICANT_DIGITS = 15

# Mantissas are split into two halves so that int64 sums of up to 2**36 values cannot overflow.
_HALF_BITS = 26
_HALF_MASK = (1 << _HALF_BITS) - 1


def check_fits_int64(bound: int, what: str) -> None:
    """Raise ValueError unless an integer of absolute value ``bound`` fits in int64."""
    if bound > INT64_MAX:
        raise ValueError(
            f"{what} would exceed the int64 range of exact scores; "
            "use fewer records or public parameters with smaller denominators"
        )


def as_float_array(values: npt.ArrayLike, name: str) -> npt.NDArray[np.float64]:
    """Return ``values`` as a one-dimensional float64 array (a copy the caller may modify).

    Raises:
        TypeError: if a value is not a real number. The message names ``name`` and the rule
            only; numpy's own message (which quotes the value) is not chained.
    """
    array = _float_array_or_none(values)
    if array is None:
        raise TypeError(f"'{name}' must be an array of real numbers")
    return array.ravel()


def _float_array_or_none(values: npt.ArrayLike) -> npt.NDArray[np.float64] | None:
    # The conversion error is swallowed here so that the caller raises outside the ``except``
    # block: no context that quotes a value is attached to the error it raises.
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return None


def finite_values(values: npt.ArrayLike, name: str = "values") -> npt.NDArray[np.float64]:
    """The data values of ``values``: a float64 array with NaN, ``+inf`` and ``-inf`` dropped.

    The one rule for values that are not data, used by every statistic (see the module
    docstring). Dropping is a public rule applied to each value on its own, so it keeps every
    sensitivity: under add/remove a dropped value is an absent one, and under replace a value
    changed into NaN is a value removed, which the replace sensitivities cover (a removal moves
    a score no more than a change does).

    Args:
        values: real numbers (anything numpy turns into float64).
        name: the parameter named in the error.

    Returns:
        A new one-dimensional float64 array holding the finite values, in order.

    Raises:
        TypeError: if a value is not a real number (the message never shows it).
    """
    array = as_float_array(values, name)
    finite = np.isfinite(array)
    if finite.all():
        return array
    kept: npt.NDArray[np.float64] = array[finite]
    return kept


def as_index_array(values: npt.ArrayLike, name: str, size: int) -> npt.NDArray[np.int64]:
    """Return ``values`` as a one-dimensional int64 array of indices in ``[0, size)``."""
    array = np.asarray(values)
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if not np.issubdtype(array.dtype, np.integer):
        raise TypeError(
            f"'{name}' must hold integer candidate indices; received dtype {array.dtype}"
        )
    array = array.ravel()
    if int(array.min()) < 0 or int(array.max()) >= size:
        raise ValueError(f"'{name}' must hold candidate indices in [0, {size})")
    return array.astype(np.int64)


def as_count_array(values: npt.ArrayLike, name: str, size: int) -> npt.NDArray[np.int64]:
    """Return ``values`` as an int64 array of ``size`` non-negative counts."""
    array = np.asarray(values)
    if array.shape != (size,):
        raise ValueError(f"'{name}' must have shape ({size},); received shape {array.shape}")
    if size and not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"'{name}' must hold integer counts; received dtype {array.dtype}")
    array = array.astype(np.int64)
    if size and int(array.min()) < 0:
        raise ValueError(f"'{name}' must hold counts >= 0")
    return array


def decimal_fraction(value: object, name: str) -> Fraction:
    """Rationalise ``value`` as the exact decimal it was written as.

    A float becomes the shortest decimal that round-trips to it (``0.9`` -> ``9/10``, not the
    binary value ``0.90000000000000002220...``); ``Fraction``, ``Decimal`` and integers are taken
    unchanged. NaN, infinities, bools and strings are refused (by
    :func:`beam_dp._validation.to_fraction`, the one rule for turning a parameter into a
    rational; only the reading of a float differs here).
    """
    if isinstance(value, np.bool_):
        raise TypeError(f"'{name}' must be a real number; received type bool")
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"'{name}' must be finite; received {value!r}")
        return Fraction(value)
    exact = to_fraction(value, name)  # type, bool, NaN and infinity checks
    if isinstance(value, (Integral, Fraction)):
        return exact
    # str() of a float (or numpy float) is its shortest round-trip decimal.
    return Fraction(str(value) if isinstance(value, (float, np.floating)) else repr(float(exact)))


def decimal_places(value: Fraction) -> int | None:
    """Number of decimal places of ``value``, or None if it is not a terminating decimal."""
    denominator = value.denominator
    twos = fives = 0
    while denominator % 2 == 0:
        denominator //= 2
        twos += 1
    while denominator % 5 == 0:
        denominator //= 5
        fives += 1
    if denominator != 1:
        return None
    return max(twos, fives)


def significant_digits(value: Fraction, places: int) -> int:
    """Number of significant decimal digits of a terminating decimal with ``places`` places."""
    mantissa = abs(value.numerator * 10**places // value.denominator)
    if mantissa == 0:
        return 0
    while mantissa % 10 == 0:
        mantissa //= 10
    return len(str(mantissa))


def exact_float_sum(values: npt.NDArray[np.float64]) -> Fraction:
    """The exact rational sum of finite floats (vectorised; no rounding anywhere).

    Each float is ``mantissa * 2**exponent`` with an integer mantissa below ``2**53``; mantissas
    are summed per exponent in int64 (split in two halves so that no sum of up to ``2**36``
    values overflows) and the per-exponent sums are combined with Python integers. The result's
    denominator is a power of two, at most ``2**1126`` (the smallest subnormal is ``2**-1074``).

    Callers go through :func:`clamped_exact_sum` (or apply :func:`finite_values` first, the one
    rule for NaN and infinities); a non-finite value here is a programming error.
    """
    if values.size == 0:
        return Fraction(0)
    if not np.all(np.isfinite(values)):
        raise ValueError("exact sums are defined for finite values only")
    fractions, exponents = np.frexp(values)
    mantissas = np.ldexp(fractions, 53).astype(np.int64)  # exact: scaling by a power of two
    exponents = exponents.astype(np.int64) - 53
    order = np.argsort(exponents, kind="stable")
    mantissas = mantissas[order]
    exponents = exponents[order]
    starts = np.concatenate(([0], np.flatnonzero(np.diff(exponents)) + 1))
    high = np.add.reduceat(mantissas >> _HALF_BITS, starts)
    low = np.add.reduceat(mantissas & _HALF_MASK, starts)
    group_exponents = exponents[starts]
    base = int(group_exponents[0])
    total = 0
    for h, lo, e in zip(high.tolist(), low.tolist(), group_exponents.tolist(), strict=True):
        total += ((h << _HALF_BITS) + lo) << (e - base)
    return Fraction(total) * Fraction(2) ** base


def clamped_exact_sum(
    values: npt.ArrayLike, lower: Fraction, upper: Fraction, name: str = "values"
) -> tuple[Fraction, int]:
    """The exact sum and number of the data values of ``values``, clamped to ``[lower, upper]``.

    The one exact clamped sum of the package (the mean's :class:`~beam_dp.scores.MeanScore` and
    :class:`~beam_dp.summaries.histogram.ExactSum` both use it): NaN, ``+inf`` and ``-inf`` are
    dropped by :func:`finite_values` (the one rule for values that are not data), every other
    value is clamped to the public bounds, compared exactly with the rationals ``lower`` and
    ``upper``, and the result is summed without rounding (:func:`exact_float_sum`).

    Returns:
        ``(total, count)``: the exact sum of the clamped values and how many were kept.

    Raises:
        TypeError: if a value is not a real number (the message never shows it).
    """
    data = finite_values(values, name)
    below = data < float_at_least(lower)  # exactly: data < lower
    above = data > float_at_most(upper)  # exactly: data > upper
    inside = ~(below | above)
    total = (
        lower * int(np.count_nonzero(below))
        + upper * int(np.count_nonzero(above))
        + exact_float_sum(data[inside])
    )
    return total, int(data.size)


def float_tuple(values: Any, name: str) -> tuple[float, ...]:
    """Validate a public grid: non-empty, finite, strictly increasing floats."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"'{name}' must be a sequence of real numbers")
    array = _float_array_or_none(values)
    if array is None:
        raise TypeError(f"'{name}' must be a sequence of real numbers")
    if array.ndim != 1:
        raise ValueError(f"'{name}' must be one-dimensional; received shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"'{name}' must hold at least one candidate")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"'{name}' must hold finite values (no NaN or infinity)")
    if array.size > 1 and not np.all(np.diff(array) > 0):
        raise ValueError(f"'{name}' must be sorted strictly increasing")
    return tuple(array.tolist())
