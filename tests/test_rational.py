"""The one rounding rule of the package: rationals to floats in a known direction."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from property_settings import fresh_examples

import beam_dp.accounting.zcdp
import beam_dp.scores._exact
from beam_dp._rational import float_at_least, float_at_most, positive_fraction


def test_one_place_for_rounding() -> None:
    # The accountant's names and the scores' names are the same two functions.
    assert beam_dp.accounting.zcdp.floor_float is float_at_most
    assert beam_dp.accounting.zcdp.ceil_float is float_at_least
    assert beam_dp.scores._exact.float_at_most is float_at_most
    assert beam_dp.scores._exact.float_at_least is float_at_least


@fresh_examples(100)
@given(st.fractions(min_value=-(10**300), max_value=10**300))
def test_float_thresholds_are_exact(value: Fraction) -> None:
    at_least = float_at_least(value)
    at_most = float_at_most(value)
    assert Fraction(at_least) >= value
    assert Fraction(float(np.nextafter(at_least, -math.inf))) < value
    assert Fraction(at_most) <= value
    assert Fraction(float(np.nextafter(at_most, math.inf))) > value


def test_positive_fraction_is_exact_and_refuses_non_positive_and_non_finite() -> None:
    assert positive_fraction(0.1, "epsilon") == Fraction(0.1)
    assert positive_fraction(Fraction(1, 3), "epsilon") == Fraction(1, 3)
    for bad in (0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="'epsilon' must be > 0 and finite"):
            positive_fraction(bad, "epsilon")
    with pytest.raises(TypeError, match="'epsilon' must be a real number"):
        positive_fraction("1", "epsilon")
