"""Scores equal a brute-force computation in exact rationals (``Fraction``) on random data."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from property_settings import fresh_examples

from beam_dp.scores import DistinctUnitCount, MeanScore, PluralityVote, QuantileScore, Revenue
from beam_dp.scores._exact import exact_float_sum

finite_floats = st.floats(allow_nan=False, allow_infinity=False)
data_floats = st.floats(allow_nan=True, allow_infinity=True, width=64)


def _decimal(x: float) -> Fraction:
    """The decimal a float denotes (its shortest round-trip representation)."""
    return Fraction(repr(float(x)))


# --- exact helpers ---------------------------------------------------------------------------


@fresh_examples(100)
@given(st.lists(finite_floats, max_size=40))
def test_exact_float_sum_matches_fractions(values: list[float]) -> None:
    assert exact_float_sum(np.array(values, dtype=np.float64)) == sum(map(Fraction, values))


def test_exact_float_sum_extremes() -> None:
    tiny = 5e-324
    huge = 1.7976931348623157e308
    values = [huge, -huge, huge, tiny, -tiny * 3, 0.1, 1e-310, -0.0, 2.0**-60]
    assert exact_float_sum(np.array(values)) == sum(map(Fraction, values))
    # Many equal exponents: the split int64 sums must not overflow.
    many = np.full(200_000, 1.0 - 2.0**-53)
    assert exact_float_sum(many) == Fraction(1 - Fraction(1, 2**53)) * 200_000


# --- distinct-unit count and votes -----------------------------------------------------------


@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.lists(st.integers(0, 4), min_size=1, max_size=6)),
        max_size=12,
    )
)
def test_distinct_unit_count_matches_sets(records: list[tuple[int, list[int]]]) -> None:
    unit_ids = [unit for unit, candidates in records for _ in candidates]
    candidate_idx = [c for _, candidates in records for c in candidates]
    per_unit: dict[int, set[int]] = {}
    for unit, candidate in zip(unit_ids, candidate_idx, strict=True):
        per_unit.setdefault(unit, set()).add(candidate)
    bound = max((len(s) for s in per_unit.values()), default=1)
    score = DistinctUnitCount(5, max_candidates_per_unit=bound)
    expected = [sum(c in s for s in per_unit.values()) for c in range(5)]
    assert score.compute_from_pairs(unit_ids, candidate_idx).tolist() == expected
    assert score.compute(list(per_unit.values())).tolist() == expected


def test_distinct_unit_count_accepts_string_unit_ids() -> None:
    score = DistinctUnitCount(3, max_candidates_per_unit=2)
    scores = score.compute_from_pairs(["ann", "ann", "bo", "ann"], [2, 0, 2, 2])
    assert scores.dtype == np.int64
    assert scores.tolist() == [1, 0, 2]


@given(st.lists(st.integers(0, 3), max_size=30))
def test_plurality_vote_matches_counts(votes: list[int]) -> None:
    assert PluralityVote(4).compute(votes).tolist() == [votes.count(c) for c in range(4)]


# --- revenue ---------------------------------------------------------------------------------


def _revenue_brute_force(score: Revenue, values: list[float]) -> list[int]:
    out = []
    for price in score.prices:
        # NaN and ±inf are not data (one rule for every statistic): they buy at no price
        buyers = sum(1 for v in values if math.isfinite(v) and _decimal(v) >= price)
        out.append(int(Fraction(price) * buyers / score.unit))
    return out


def _near_prices(score: Revenue) -> st.SearchStrategy[float]:
    nearest = [float(p) for p in score.prices]
    around = [float(np.nextafter(p, d)) for p in nearest for d in (-math.inf, math.inf)]
    return st.sampled_from(nearest + around) | data_floats


@pytest.mark.parametrize(
    "score",
    [
        Revenue.default(),
        Revenue([Fraction(1, 8), 0.3, Fraction(7, 10), 1, 1.05, 123456.789]),
    ],
    ids=["cents", "mixed"],
)
@settings(max_examples=60)
@given(data=st.data())
def test_revenue_matches_decimal_comparison(score: Revenue, data: st.DataObject) -> None:
    values = data.draw(st.lists(_near_prices(score), max_size=12))
    scores = score.compute(values)
    assert scores.dtype == np.int64
    assert scores.tolist() == _revenue_brute_force(score, values)


@given(
    st.integers(1, 10**15 - 1),
    st.integers(-10, 10),
    st.sampled_from([-math.inf, math.inf]),
)
def test_nearest_float_comparison_is_the_decimal_comparison(
    digits: int, exponent: int, direction: float
) -> None:
    # The fact Revenue relies on: for a decimal price with <= 15 significant digits and any
    # float x, x >= float(price) exactly when the decimal of x is >= price.
    price = Fraction(digits) * Fraction(10) ** exponent
    nearest = float(price)
    for x in (nearest, float(np.nextafter(nearest, direction))):
        assert (x >= nearest) == (_decimal(x) >= price)


def test_revenue_float_values_read_as_decimals() -> None:
    score = Revenue.from_cents([70])
    assert Fraction(0.7) < Fraction(7, 10)  # the binary float is below 70 cents ...
    # ... but the value 0.7 buys at $0.70 (unit 1/10: 70 cents is 7/10 reduced).
    assert score.compute([0.7]).tolist() == [7]
    assert score.unit == Fraction(1, 10)
    assert score.compute([float(np.nextafter(0.7, 0.0))]).tolist() == [0]


# --- quantile --------------------------------------------------------------------------------


def _quantile_brute_force(score: QuantileScore, values: list[float]) -> list[int]:
    alpha = Fraction(score.alpha)
    values = [v for v in values if math.isfinite(v)]  # NaN and ±inf are not data (one rule)
    out = []
    for r in score.grid:
        less = sum(1 for v in values if v < r)
        at_most = sum(1 for v in values if v <= r)
        # Minus the distance from alpha N to the ranks [L, L + E] of the values equal to r.
        real = -max(Fraction(0), less - alpha * len(values), alpha * len(values) - at_most)
        integer = real / score.unit
        assert integer.denominator == 1
        out.append(int(integer))
    return out


@settings(max_examples=150)
@given(
    alpha=st.sampled_from([0.5, 0.9, 0.01, 0.123, Fraction(1, 3), Fraction(5, 7)]),
    grid=st.lists(finite_floats, min_size=1, max_size=8, unique=True).map(sorted),
    values=st.lists(data_floats, max_size=20),
    pick=st.lists(st.integers(0, 7), max_size=6),
)
def test_quantile_matches_fractions(
    alpha: float | Fraction, grid: list[float], values: list[float], pick: list[int]
) -> None:
    grid = sorted(set(grid))
    values = values + [grid[i % len(grid)] for i in pick]  # ties with candidates
    score = QuantileScore(alpha, grid)
    assert score.compute(values).tolist() == _quantile_brute_force(score, values)


def test_quantile_alpha_is_the_written_decimal() -> None:
    assert QuantileScore(0.9, [0.0]).alpha == Fraction(9, 10)
    assert QuantileScore(0.9, [0.0]).unit == Fraction(1, 10)
    assert QuantileScore(np.float64(0.05), [0.0]).alpha == Fraction(1, 20)
    assert QuantileScore(Fraction(2, 6), [0.0]).unit == Fraction(1, 3)
    assert QuantileScore(0.9, [0.0]).sensitivity() == Fraction(9, 10)


def test_quantile_counts_entry_point_matches_compute() -> None:
    rng = np.random.default_rng(7)
    grid = np.linspace(-1.0, 1.0, 41)
    values = np.round(rng.normal(size=500), 1)
    score = QuantileScore(0.25, grid, max_contributions=5)
    ordered = np.sort(values)
    less = np.searchsorted(ordered, grid, side="left")
    at_most = np.searchsorted(ordered, grid, side="right")
    counted = score.compute_from_counts(less, values.size - at_most, equal=at_most - less)
    assert np.array_equal(counted, score.compute(values))


def test_quantile_refuses_scores_beyond_int64() -> None:
    score = QuantileScore(Fraction(1, 2**40), [0.0])
    with pytest.raises(ValueError, match="int64"):
        score.compute_from_counts([2**30], [0], equal=[0])
    with pytest.raises(ValueError, match="int64"):  # the tied values count too
        score.compute_from_counts([2**22], [0], equal=[2**23 - 2**22])


# --- mean ------------------------------------------------------------------------------------


def _mean_brute_force(score: MeanScore, values: list[float]) -> list[int]:
    # The reference: NaN and infinities are not data (dropped), the rest clamped, and the
    # statistic is the centred sum over the public n, clamped to [lower, upper].
    lower = Fraction(score.lower)
    upper = Fraction(score.upper)
    middle = (lower + upper) / 2
    centred = Fraction(0)
    for v in values:
        if math.isfinite(v):
            centred += min(max(Fraction(v), lower), upper) - middle
    mean = min(max(middle + centred / score.n, lower), upper)
    return [math.floor(-abs(mean - Fraction(r)) / score.unit) for r in score.grid]


@settings(max_examples=150)
@given(
    bounds=st.sampled_from([(0, 1), (-2.5, 0.1), (Fraction(1, 3), Fraction(7, 3)), (0.0, 1e6)]),
    grid=st.lists(
        st.floats(min_value=-10.0, max_value=10.0), min_size=1, max_size=6, unique=True
    ).map(sorted),
    values=st.lists(data_floats, min_size=0, max_size=12),
    k=st.integers(1, 3),
    resolution=st.sampled_from([1, 7, 2**16]),
    n_offset=st.sampled_from([0, 0, -1, 1, 5]),
)
def test_mean_matches_fractions(
    bounds: tuple[float | Fraction, float | Fraction],
    grid: list[float],
    values: list[float],
    k: int,
    resolution: int,
    n_offset: int,
) -> None:
    # The public n is the number of values, or differs from the number kept (NaN, infinities,
    # a wrong n): scores are defined in every case and match exact arithmetic.
    lower, upper = bounds
    n = max(1, len(values) + n_offset)
    score = MeanScore(grid, lower, upper, n=n, max_contributions=k, resolution=resolution)
    scores = score.compute(values)
    assert scores.dtype == np.int64
    assert scores.tolist() == _mean_brute_force(score, values)
    kept = sum(1 for v in values if math.isfinite(v))
    assert np.array_equal(score.compute_from_sum(score.clamped_sum(values), kept), scores)


def test_mean_statistic_is_the_mean_when_n_values_are_kept() -> None:
    score = MeanScore((0.0, 1.0), 0, 1, n=4)
    values = [0.25, 0.5, 2.0, 0.125]  # 2.0 clamps to 1
    assert score.statistic(score.clamped_sum(values), 4) == Fraction(15, 32)  # 1.875 / 4
    # One value dropped: mid + sum(v - mid) / n = 1/2 + (-1/4 + 0 + 1/2) / 4.
    assert score.statistic(score.clamped_sum(values[:3]), 3) == Fraction(9, 16)
    # More values than n: the statistic stays inside [lower, upper].
    assert score.statistic(score.clamped_sum([1.0] * 9), 9) == 1


def test_mean_unit_and_sensitivity() -> None:
    score = MeanScore((0.0, 0.5, 1.0), 0, 1, n=100, max_contributions=2, resolution=1000)
    assert score.sensitivity("replace") == Fraction(2, 100)
    assert score.unit == Fraction(2, 100 * 1000)
    assert score.scaled_sensitivity("replace") == 1000


def test_mean_clamped_sum_is_mergeable() -> None:
    score = MeanScore((0.0, 1.0), Fraction(1, 10), 0.9, n=6)
    values = [0.05, 0.3, np.nan, 2.0, -np.inf, 0.1, np.inf]
    shards = score.clamped_sum(values[:2]) + score.clamped_sum(values[2:])
    assert shards == score.clamped_sum(values)
    lower, upper = Fraction(1, 10), Fraction(0.9)  # float bounds are taken exactly
    # 0.05 -> lower; NaN, -inf and +inf are not data (dropped); 2.0 -> upper; 0.1 (just above
    # 1/10) stays.
    expected = [lower, Fraction(0.3), upper, Fraction(0.1)]
    assert shards == sum(expected)
