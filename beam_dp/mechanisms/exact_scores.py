"""Exact rational view of a score vector.

The samplers need every score as an exact rational. This module writes a score vector as
``integers * unit`` with ``integers`` exact (numpy int64 when they fit, Python ints otherwise)
and ``unit`` a :class:`~fractions.Fraction`:

* integer arrays are used as they are (unit 1);
* a float is the dyadic rational ``mantissa * 2**exponent`` it holds, so a float array is
  written exactly over the smallest power of two it needs (no rounding anywhere);
* ``Fraction`` (or mixed) sequences are put over their least common denominator.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Integral, Real
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["ExactScores", "ScoresLike", "exact_scores"]

ScoresLike = npt.ArrayLike | Sequence[Fraction]

# Integers up to 2**61 in magnitude keep every difference of two of them inside int64.
_INT64_SAFE = 1 << 61


@dataclass(frozen=True)
class ExactScores:
    """Scores written as exact ``integers * unit``."""

    integers: npt.NDArray[Any]  # int64, or object (Python ints) when they do not fit
    unit: Fraction

    def __len__(self) -> int:
        return int(self.integers.shape[0])

    def gaps(self, where: npt.NDArray[np.int64] | None = None) -> npt.NDArray[Any]:
        """Return ``(max - score) / unit`` as non-negative exact integers.

        Args:
            where: optional candidate positions to restrict to (the maximum is taken over them).
        """
        values = self.integers if where is None else self.integers[where]
        if values.dtype == object:
            top = max(values)
            return np.array([top - v for v in values], dtype=object)
        gaps: npt.NDArray[Any] = values.max() - values
        return gaps


def _from_python_ints(values: list[int], unit: Fraction) -> ExactScores:
    if all(-_INT64_SAFE < v < _INT64_SAFE for v in values):
        return ExactScores(np.array(values, dtype=np.int64), unit)
    return ExactScores(np.array(values, dtype=object), unit)


def _reduce(scores: ExactScores) -> ExactScores:
    """Divide out the gcd of all pairwise differences (keeps the integers small)."""
    ints = scores.integers
    if ints.dtype == object:
        low = min(ints)
        divisor = 0
        for v in ints:
            divisor = math.gcd(divisor, int(v) - low)
        if divisor <= 1:
            return scores
        return _from_python_ints([(int(v) - low) // divisor for v in ints], scores.unit * divisor)
    low = ints.min()
    shifted = ints - low
    divisor = int(np.gcd.reduce(shifted)) if shifted.size else 0
    if divisor <= 1:
        return ExactScores(shifted, scores.unit)
    return ExactScores(shifted // divisor, scores.unit * divisor)


def _from_floats(values: npt.NDArray[np.floating[Any]]) -> ExactScores:
    values = values.astype(np.float64, copy=False)
    mantissa, exponent = np.frexp(values)
    # A float64 mantissa has 53 bits, so this product is an exact integer.
    integers = np.ldexp(mantissa, 53).astype(np.int64)
    exponents = exponent.astype(np.int64) - 53
    nonzero = integers != 0
    if not nonzero.any():
        return ExactScores(np.zeros(values.shape[0], dtype=np.int64), Fraction(1))
    low = int(exponents[nonzero].min())
    shifts = np.where(nonzero, exponents - low, 0)
    unit = Fraction(2) ** low
    if int(shifts.max()) <= 61 - 54:
        return ExactScores(integers << shifts, unit)
    exact = [int(m) << int(s) for m, s in zip(integers.tolist(), shifts.tolist(), strict=True)]
    return _from_python_ints(exact, unit)


def _from_objects(values: Sequence[Any]) -> ExactScores:
    fractions: list[Fraction] = []
    for value in values:
        if isinstance(value, bool):
            raise TypeError("'scores' must be numbers; received a bool")
        if isinstance(value, Fraction):
            fractions.append(value)
        elif isinstance(value, Integral):
            fractions.append(Fraction(int(value)))
        elif isinstance(value, Real):
            if not math.isfinite(float(value)):
                raise ValueError("'scores' must be finite; found NaN or infinity")
            fractions.append(Fraction(float(value)))
        else:
            raise TypeError(f"'scores' must be numbers; received type {type(value).__name__}")
    denominator = math.lcm(*(f.denominator for f in fractions))
    integers = [f.numerator * (denominator // f.denominator) for f in fractions]
    return _from_python_ints(integers, Fraction(1, denominator))


def exact_scores(scores: ScoresLike) -> ExactScores:
    """Write ``scores`` exactly as ``integers * unit``.

    Raises:
        ValueError: if ``scores`` is empty, not one-dimensional, or holds NaN or infinity.
            The message never contains a score (scores are computed from private data).
    """
    if isinstance(scores, np.ndarray):
        array = scores
    else:
        items = list(scores)  # type: ignore[arg-type]
        if items and any(isinstance(v, Fraction) for v in items):
            array = np.array(items, dtype=object)
        else:
            array = np.asarray(items)
    if array.ndim != 1:
        raise ValueError(f"'scores' must be one-dimensional; received {array.ndim} dimensions")
    if array.shape[0] == 0:
        raise ValueError("'scores' must hold at least one candidate; received an empty set")
    if array.dtype.kind == "b":
        raise TypeError("'scores' must be numbers; received booleans")
    if array.dtype.kind in "iu":
        if array.dtype.kind == "u" and int(array.max()) >= _INT64_SAFE:
            return _reduce(_from_python_ints([int(v) for v in array], Fraction(1)))
        ints = array.astype(np.int64)
        if int(ints.max()) >= _INT64_SAFE or int(ints.min()) <= -_INT64_SAFE:
            return _reduce(_from_python_ints([int(v) for v in ints], Fraction(1)))
        return _reduce(ExactScores(ints, Fraction(1)))
    if array.dtype.kind == "f":
        bad = ~np.isfinite(array)
        if bad.any():
            raise ValueError(
                f"'scores' must be finite; found {int(bad.sum())} NaN or infinite score(s)"
            )
        return _reduce(_from_floats(array))
    if array.dtype == object:
        return _reduce(_from_objects(list(array)))
    raise TypeError(f"'scores' must be numbers; received dtype {array.dtype}")
