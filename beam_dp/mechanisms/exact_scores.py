"""Exact rational view of a score vector.

The samplers need every score as an exact rational. This module writes a score vector as
``integers * unit`` with ``integers`` exact (numpy int64 when they fit, Python ints otherwise)
and ``unit`` a :class:`~fractions.Fraction`:

* integer arrays are used as they are (unit 1);
* a float is the dyadic rational ``mantissa * 2**exponent`` it holds, so a float array is
  written exactly over the smallest power of two it needs (no rounding anywhere);
* ``Fraction`` (or mixed) sequences are put over their least common denominator.

That unit depends on the values (a float array's smallest exponent, the Fractions' common
denominator), so a sampler must not derive its coins' rate from it: the coins' work is a
function of the rate (``docs/timing.md``). The samplers use :func:`scores_in_public_steps`,
whose unit is a function of the scores' type and the sensitivity only.
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

__all__ = [
    "STEPS_PER_SENSITIVITY",
    "ExactScores",
    "ScoresLike",
    "exact_scores",
    "scores_in_public_steps",
]

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


def _from_objects(values: Sequence[Any]) -> tuple[ExactScores, bool]:
    """The exact scores, and whether every value has an integer type."""
    fractions: list[Fraction] = []
    integer_typed = True
    for value in values:
        if isinstance(value, bool):
            raise TypeError("'scores' must be numbers; received a bool")
        if isinstance(value, Fraction):
            fractions.append(value)
            integer_typed = False
        elif isinstance(value, Integral):
            fractions.append(Fraction(int(value)))
        elif isinstance(value, Real):
            if not math.isfinite(float(value)):
                raise ValueError("'scores' must be finite; found NaN or infinity")
            fractions.append(Fraction(float(value)))
            integer_typed = False
        else:
            raise TypeError(f"'scores' must be numbers; received type {type(value).__name__}")
    denominator = math.lcm(*(f.denominator for f in fractions))
    integers = [f.numerator * (denominator // f.denominator) for f in fractions]
    return _from_python_ints(integers, Fraction(1, denominator)), integer_typed


def exact_scores(scores: ScoresLike) -> ExactScores:
    """Write ``scores`` exactly as ``integers * unit``.

    Raises:
        ValueError: if ``scores`` is empty, not one-dimensional, or holds NaN or infinity.
            The message never contains a score (scores are computed from private data).
    """
    return _exact_and_integer_typed(scores)[0]


def _exact_and_integer_typed(scores: ScoresLike) -> tuple[ExactScores, bool]:
    """:func:`exact_scores`, and whether every score has an integer type.

    By type, never by value: a Fraction or a float that equals an integer is not an integer
    here; an integer numpy dtype is, and so is a list or object array of Python or numpy ints
    (a combiner's scores beyond int64).
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
            return _from_python_ints([int(v) for v in array], Fraction(1)), True
        ints = array.astype(np.int64)
        if int(ints.max()) >= _INT64_SAFE or int(ints.min()) <= -_INT64_SAFE:
            return _from_python_ints([int(v) for v in ints], Fraction(1)), True
        return ExactScores(ints, Fraction(1)), True
    if array.dtype.kind == "f":
        bad = ~np.isfinite(array)
        if bad.any():
            raise ValueError(
                f"'scores' must be finite; found {int(bad.sum())} NaN or infinite score(s)"
            )
        return _from_floats(array), False
    if array.dtype == object:
        return _from_objects(list(array))
    raise TypeError(f"'scores' must be numbers; received dtype {array.dtype}")


#: Grid steps per sensitivity for scores that are not integers (:func:`scores_in_public_steps`).
STEPS_PER_SENSITIVITY = 1 << 24


def scores_in_public_steps(scores: ScoresLike, sensitivity: Fraction) -> ExactScores:
    """Write ``scores`` as ``integers * unit`` with ``unit`` a function of public numbers only.

    * Integers (numpy integer dtypes, Python or numpy ints in a list or an object array) are
      used as they are: unit 1.
    * Any other scores (floats, Fractions) are put on the grid of step
      ``unit = sensitivity / STEPS_PER_SENSITIVITY``: each becomes ``floor(score / unit)``.

    Why the grid keeps the privacy of the selection: if two neighbouring datasets move a score
    by at most ``sensitivity``, its grid integer moves by at most ``STEPS_PER_SENSITIVITY``
    (``|floor(x) - floor(y)| <= n`` whenever ``|x - y| <= n`` for an integer ``n``), so the
    sensitivity in steps is exactly ``sensitivity / unit``; ``floor`` is non-decreasing, so
    scores that all move one way still do. The mechanism is then sampled exactly on the grid
    scores: every gap changes by less than one step, so each candidate's coin probability
    ``exp(-c * gap)`` differs from the one on the exact scores by a factor below ``exp(c)``
    with ``c = epsilon / (2 * STEPS_PER_SENSITIVITY)`` (about ``3e-8 * epsilon``).

    Why not the exact unit of :func:`exact_scores`: it depends on the values (the floats'
    smallest exponent, the Fractions' denominators), and the coins' rate ``epsilon * unit /
    (2 * sensitivity)`` fixes how much randomness every coin reads; a unit taken from the data
    would make the sampler's running time a function of the data.

    Raises:
        ValueError: as :func:`exact_scores`. The message never contains a score.
    """
    exact, integer_typed = _exact_and_integer_typed(scores)  # reads an iterator once
    if integer_typed:
        return exact  # unit 1
    step = sensitivity / STEPS_PER_SENSITIVITY
    ratio = exact.unit / step  # exact rational: integer * ratio is the score in steps
    numerator, denominator = ratio.numerator, ratio.denominator
    ints = exact.integers
    if denominator == 1 and ints.dtype != object:
        largest = int(np.abs(ints).max())
        if largest * numerator < _INT64_SAFE:
            return ExactScores(ints * np.int64(numerator), step)
    on_grid = [(int(v) * numerator) // denominator for v in ints.tolist()]
    return _from_python_ints(on_grid, step)
