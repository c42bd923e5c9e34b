"""Validators the accounting package needs beyond ``beam_dp._validation``."""

from __future__ import annotations

from beam_dp._validation import check_non_negative_finite


def check_name(value: object, name: str) -> str:
    """Return ``value`` if it is a non-empty string, else raise ValueError naming ``name``."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"'{name}' must be a non-empty string; received {value!r}")
    return value


def check_delta(value: float, name: str = "delta") -> float:
    """Return ``value`` as a float if it is in [0, 1), else raise (NaN and infinity rejected)."""
    check_non_negative_finite(value, name)
    as_float = float(value)
    if not as_float < 1.0:
        raise ValueError(f"'{name}' must be in [0, 1); received {value!r}")
    return as_float
