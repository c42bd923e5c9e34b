"""Revenue reads a grid of floats at numpy speed, exactly as it reads each price on its own."""

from __future__ import annotations

import pickle
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_dp.scores import Revenue

# Decimals of up to 15 significant digits, as floats: cents, tenths of a cent, whole units, ...
DECIMALS = st.tuples(st.integers(1, 10**15 - 1), st.integers(0, 15)).map(
    lambda pair: float(Decimal(pair[0]).scaleb(-pair[1]))
)


def _one_by_one(prices: list[float]) -> Revenue:
    # Decimal prices take the price-by-price path; repr(x) is the decimal a float is read as.
    return Revenue(tuple(Decimal(repr(price)) for price in prices))


def _same(fast: Revenue, slow: Revenue) -> None:
    assert fast.prices == slow.prices
    assert all(type(price) is Fraction for price in fast.prices)
    assert fast.unit == slow.unit
    assert fast.num_candidates == slow.num_candidates
    np.testing.assert_array_equal(fast.scaled_prices, slow.scaled_prices)
    np.testing.assert_array_equal(fast.thresholds, slow.thresholds)
    assert fast == slow


@settings(deadline=None, max_examples=200)
@given(st.lists(DECIMALS, min_size=1, max_size=30, unique=True))
def test_a_float_grid_reads_as_its_decimals(values: list[float]) -> None:
    prices = sorted(values)
    try:
        slow = _one_by_one(prices)
    except ValueError:
        # beyond int64 in units of the smallest place: the float grid is refused the same way
        with pytest.raises(ValueError, match="int64"):
            Revenue(prices)
        return
    _same(Revenue(prices), slow)
    _same(Revenue(np.array(prices)), slow)


def test_a_large_cent_grid_and_its_scores() -> None:
    prices = [float(Decimal(i).scaleb(-2)) for i in range(1, 20_001)]  # $0.01 ... $200.00
    fast = Revenue(prices)
    assert fast.unit == Fraction(1, 100)
    np.testing.assert_array_equal(fast.scaled_prices, np.arange(1, 20_001))
    assert fast.prices[69] == Fraction(70, 100)
    values = np.array([0.7, 0.69, 150.0, 200.0, 0.01])
    expected = [
        round(price * 100)
        * sum(1 for v in values.tolist() if Decimal(repr(v)) >= Decimal(repr(price)))
        for price in prices[:100] + prices[-100:]
    ]
    scores = fast.compute(values)
    assert scores[:100].tolist() + scores[-100:].tolist() == expected


@pytest.mark.parametrize(
    ("prices", "message"),
    [
        ([0.5, 0.25], "sorted strictly increasing"),
        ([0.5, 0.5], "sorted strictly increasing"),
        ([0.1 + 0.2], "15 significant digits"),
        ([1.0000000000000002], "15 significant digits"),
        ([-0.5, 1.0], "> 0"),
        ([0.0, 1.0], "> 0"),
        ([float("nan")], "finite"),
        ([1e-300, 1.0], "int64"),
    ],
)
def test_bad_float_grids_are_refused_as_before(prices: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Revenue(prices)


def test_the_float_grid_keeps_prices_as_a_compact_sequence_of_fractions() -> None:
    fast = Revenue([0.05, 0.5, 1.25])
    slow = Revenue([Fraction(1, 20), Fraction(1, 2), Fraction(5, 4)])
    assert fast.prices == slow.prices == (Fraction(1, 20), Fraction(1, 2), Fraction(5, 4))
    assert hash(fast.prices) == hash(slow.prices)
    assert hash(fast) == hash(slow)
    assert fast.prices[1:] == (Fraction(1, 2), Fraction(5, 4))
    assert fast.prices[-1] == Fraction(5, 4)
    assert list(fast.prices) == list(slow.prices)
    assert pickle.loads(pickle.dumps(fast)) == fast
    assert fast.prices != (Fraction(1, 20), Fraction(1, 2))
    assert Revenue([0.05, 0.5]) != fast
    with pytest.raises(ValueError, match="read-only"):
        fast.scaled_prices[0] = 7
