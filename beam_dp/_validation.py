"""Parameter validation shared by every public constructor.

Messages name the parameter and the rule, never a data value: parameters are public
(epsilon, bounds, candidates), records are not, and nothing here ever sees a record.
"""

from __future__ import annotations

import math
from fractions import Fraction
from numbers import Integral, Real
from typing import Literal

Relation = Literal["add_remove", "replace"]
RELATIONS: tuple[Relation, ...] = ("add_remove", "replace")


def check_relation(relation: str, name: str = "relation") -> Relation:
    """Return ``relation`` if it is a known neighbouring relation, else raise ValueError."""
    if relation == "add_remove":
        return "add_remove"
    if relation == "replace":
        return "replace"
    raise ValueError(f"'{name}' must be one of {list(RELATIONS)}; received {relation!r}")


def check_positive_finite(value: object, name: str) -> None:
    """Raise ValueError unless ``value`` is a real number > 0 and finite (NaN rejected)."""
    if isinstance(value, bool) or not isinstance(value, (Real, Fraction)):
        raise TypeError(f"'{name}' must be a real number; received type {type(value).__name__}")
    as_float = float(value)
    if math.isnan(as_float) or math.isinf(as_float) or not as_float > 0:
        raise ValueError(f"'{name}' must be > 0 and finite; received {value!r}")


def check_non_negative_finite(value: object, name: str) -> None:
    """Raise ValueError unless ``value`` is a real number >= 0 and finite."""
    if isinstance(value, bool) or not isinstance(value, (Real, Fraction)):
        raise TypeError(f"'{name}' must be a real number; received type {type(value).__name__}")
    as_float = float(value)
    if math.isnan(as_float) or math.isinf(as_float) or not as_float >= 0:
        raise ValueError(f"'{name}' must be >= 0 and finite; received {value!r}")


def check_positive_int(value: object, name: str) -> None:
    """Raise ValueError unless ``value`` is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"'{name}' must be an integer; received type {type(value).__name__}")
    if int(value) < 1:
        raise ValueError(f"'{name}' must be an integer >= 1; received {value!r}")


def check_probability_open(value: object, name: str) -> None:
    """Raise ValueError unless 0 < value < 1 (NaN rejected)."""
    if isinstance(value, bool) or not isinstance(value, (Real, Fraction)):
        raise TypeError(f"'{name}' must be a real number; received type {type(value).__name__}")
    as_float = float(value)
    if math.isnan(as_float) or not 0.0 < as_float < 1.0:
        raise ValueError(f"'{name}' must be strictly between 0 and 1; received {value!r}")


def to_fraction(value: object, name: str) -> Fraction:
    """Convert an int, float or Fraction to the exact rational it denotes.

    A float is converted exactly (``Fraction(0.1)`` is the binary value the float holds),
    never rounded; strings are refused so that no parsing rule is implied.
    """
    if isinstance(value, bool):
        raise TypeError(f"'{name}' must be a real number; received type bool")
    if isinstance(value, Fraction):
        return value
    if isinstance(value, Integral):
        return Fraction(int(value))
    if isinstance(value, Real):
        as_float = float(value)
        if math.isnan(as_float) or math.isinf(as_float):
            raise ValueError(f"'{name}' must be finite; received {value!r}")
        return Fraction(as_float)
    raise TypeError(f"'{name}' must be a real number; received type {type(value).__name__}")
