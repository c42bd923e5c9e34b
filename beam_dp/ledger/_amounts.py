"""Exact privacy amounts: how the ledger reads, adds, compares and shows ε, δ and ρ.

Every amount the ledger stores or adds is a :class:`fractions.Fraction`, kept in the database
as its exact text (``"3/10"``). Sums are exact, so the ledger's spend never exceeds its total
through rounding, however many runs it records.

Reading an amount:

- ``int``, ``Fraction`` and ``Decimal`` are exact already.
- ``str`` is read as the decimal (``"0.3"``, ``"1e-6"``) or fraction (``"3/10"``) it spells.
- ``float`` is read as the shortest decimal that round-trips (``repr``): ``0.3`` is ``3/10``,
  the number the operator wrote. It differs from the binary value the float holds by less
  than half a unit in the last place (a relative 1.2e-16), far inside the relative slack
  :data:`beam_dp.accounting.TOLERANCE` that the in-process budget already grants to float
  rounding; amounts computed by the library (a weighted share, a ρ) are charged by the same
  rule.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from numbers import Integral

__all__ = ["exact_amount", "parse_stored", "show_amount"]


def exact_amount(value: object, name: str, *, allow_zero: bool = True) -> Fraction:
    """The exact rational an amount denotes, checked to be finite and >= 0 (or > 0).

    Args:
        value: An int, float, ``Decimal``, ``Fraction`` or a decimal/fraction string.
        name: The parameter's name, for the error message.
        allow_zero: Whether 0 is accepted.

    Raises:
        ValueError: for NaN, infinity, a negative amount (or 0 when not allowed), or text
            that is not a number. ``TypeError`` for a bool or another type.
    """
    if isinstance(value, bool):
        raise TypeError(f"'{name}' must be a number; received type bool")
    result: Fraction
    if isinstance(value, Fraction):
        result = value
    elif isinstance(value, Integral):
        result = Fraction(int(value))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"'{name}' must be finite; received {value!r}")
        result = Fraction(repr(value))
    elif isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"'{name}' must be finite; received {value!r}")
        result = Fraction(value)
    elif isinstance(value, str):
        result = _parse_text(value, name)
    else:
        raise TypeError(f"'{name}' must be a number; received type {type(value).__name__}")
    if result < 0 or (result == 0 and not allow_zero):
        rule = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"'{name}' must be {rule} and finite; received {value!r}")
    return result


def _parse_text(text: str, name: str) -> Fraction:
    stripped = text.strip()
    try:
        if "/" in stripped:
            return Fraction(stripped)
        decimal = Decimal(stripped)
    except (ValueError, ZeroDivisionError, InvalidOperation):
        raise ValueError(
            f"'{name}' must be a decimal number such as 0.5 or 1e-6, or a fraction such as "
            f"1/3; received {text!r}"
        ) from None
    if not decimal.is_finite():
        raise ValueError(f"'{name}' must be finite; received {text!r}")
    return Fraction(decimal)


def parse_stored(text: object, what: str) -> Fraction:
    """Read an amount the ledger stored (exact text); ValueError names ``what`` if it is not.

    The caller turns the ValueError into a "corrupt ledger" error.
    """
    if not isinstance(text, str):
        raise ValueError(f"{what} is not stored as text")
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"{what} is not an exact number") from None
    if value < 0:
        raise ValueError(f"{what} is negative")
    return value


def show_amount(value: Fraction) -> str:
    """A short text for people: the shortest decimal when it is exact (``9/10`` -> ``"0.9"``),
    else about 7 significant digits prefixed with ``~`` (``1/3`` -> ``"~0.3333333"``)."""
    if value.denominator == 1:
        return str(value.numerator)
    as_float = float(value)
    text = repr(as_float)
    if Fraction(text) == value:
        return text
    return "~" + format(as_float, ".7g")
