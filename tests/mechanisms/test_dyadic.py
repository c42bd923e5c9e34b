"""The dyadic-envelope coins: ln 2 bounds, envelope exponents, and the coins' exact laws."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from property_settings import fresh_examples
from scipy import stats
from stats_helpers import FPR

from beam_dp.mechanisms import SecureRandom
from beam_dp.mechanisms.dyadic import (
    CLAMP,
    _scaled_ln2_below,
    bernoulli_envelope,
    bernoulli_exp_times_power_of_two,
    bernoulli_half_power,
    envelope_exponents,
    ln2_bounds,
)

# ln 2 to 60 digits (OEIS A002162), an independent reference for the series bounds.
LN2_60 = Fraction("0.693147180559945309417232121458176568075500134360255254120680")


@pytest.mark.parametrize("bits", [1, 8, 64, 150])
def test_ln2_bounds_bracket_ln2(bits: int) -> None:
    low, high = ln2_bounds(bits)
    scale = 1 << bits
    reference_error = Fraction(1, 10**59)
    assert Fraction(low, scale) < LN2_60 - reference_error or bits > 190
    assert Fraction(high, scale) > LN2_60 + reference_error or bits > 190
    assert high - low == bits + 1


@fresh_examples(200)
@given(
    numerator=st.integers(min_value=0, max_value=10**9),
    denominator=st.integers(min_value=1, max_value=10**4),
)
def test_envelope_exponents_never_exceed_y_over_ln2(numerator: int, denominator: int) -> None:
    y = Fraction(numerator, denominator)
    exponent = int(envelope_exponents(np.array([float(y)]))[0])
    assert 0 <= exponent <= CLAMP
    assert _scaled_ln2_below(y, exponent)  # exponent * ln 2 <= y, exactly
    if exponent < CLAMP:
        assert not _scaled_ln2_below(y, exponent + 4)  # the envelope is within a factor 16


def test_envelope_exponents_refuse_negative_or_nan() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        envelope_exponents(np.array([1.0, -0.5]))
    with pytest.raises(ValueError, match=">= 0"):
        envelope_exponents(np.array([float("nan")]))


def _binomial_pvalue(successes: int, trials: int, p: float) -> float:
    return float(stats.binomtest(successes, trials, p).pvalue)


@pytest.mark.parametrize(
    "y", [Fraction(0), Fraction(1, 3), Fraction(7, 5), Fraction(30), Fraction(141), Fraction(500)]
)
def test_bernoulli_envelope_has_probability_exp_minus_y_times_two_to_the_exponent(
    y: Fraction,
) -> None:
    exponent = int(envelope_exponents(np.array([float(y)]))[0])
    expected = math.exp(-float(y) + exponent * math.log(2.0))
    source = SecureRandom()
    trials = 20_000
    hits = sum(bernoulli_envelope(y, exponent, source) for _ in range(trials))
    assert _binomial_pvalue(hits, trials, expected) > FPR
    assert expected > 0.24 or y == 500  # the envelope keeps coins above 1/4 below the clamp


@pytest.mark.parametrize("sigma", [1, 3, 10])
def test_the_irrational_coin_matches_exp_of_y_minus_sigma_ln2(sigma: int) -> None:
    y = Fraction(sigma * 7, 10) + Fraction(1, 7)  # sigma ln 2 < y < (sigma + 4) ln 2
    expected = math.exp(-(float(y) - sigma * math.log(2.0)))
    source = SecureRandom()
    trials = 20_000
    hits = sum(bernoulli_exp_times_power_of_two(y, sigma, source) for _ in range(trials))
    assert _binomial_pvalue(hits, trials, expected) > FPR


def test_the_coin_refuses_an_exponent_above_y_over_ln2() -> None:
    source = SecureRandom()
    with pytest.raises(ValueError, match="sigma \\* ln 2 <= y"):
        bernoulli_exp_times_power_of_two(Fraction(69, 100), 1, source)  # 0.69 < ln 2
    with pytest.raises(ValueError, match="sigma"):
        bernoulli_exp_times_power_of_two(Fraction(10), 1, source)  # too loose an envelope
    with pytest.raises(ValueError, match="clamp point"):
        bernoulli_envelope(Fraction(10), CLAMP, source)


@pytest.mark.parametrize("k", [0, 1, 5, 64, 70])
def test_bernoulli_half_power(k: int) -> None:
    source = SecureRandom()
    trials = 40_000
    hits = sum(bernoulli_half_power(k, source) for _ in range(trials))
    assert _binomial_pvalue(hits, trials, 2.0**-k) > FPR
    if k == 0:
        assert hits == trials
