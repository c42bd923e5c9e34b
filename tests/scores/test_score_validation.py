"""Constructors and compute methods reject bad input with messages naming the parameter."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_dp.scores import (
    DistinctUnitCount,
    MeanScore,
    PluralityVote,
    QuantileScore,
    Revenue,
    VoteMargin,
)

non_finite = st.sampled_from([math.nan, math.inf, -math.inf])
non_positive_ints = st.integers(max_value=0)
not_ints = st.one_of(st.floats(allow_nan=True), st.booleans(), st.text(max_size=3), st.none())


def _raises(error: type[Exception], name: str, build: Any, *args: Any, **kwargs: Any) -> None:
    with pytest.raises(error, match=f"'{name}'"):
        build(*args, **kwargs)


# --- integer parameters ----------------------------------------------------------------------


@given(non_positive_ints)
def test_counts_reject_non_positive(value: int) -> None:
    _raises(ValueError, "num_candidates", DistinctUnitCount, value)
    _raises(ValueError, "max_candidates_per_unit", DistinctUnitCount, 3, value)
    _raises(ValueError, "num_candidates", PluralityVote, value)
    _raises(ValueError, "max_contributions", QuantileScore, 0.5, [0.0], value)
    _raises(ValueError, "n", MeanScore, [0.0], 0, 1, value)
    _raises(ValueError, "max_contributions", MeanScore, [0.0], 0, 1, 5, value)
    _raises(ValueError, "resolution", MeanScore, [0.0], 0, 1, 5, 1, value)


@given(not_ints)
def test_counts_reject_non_integers(value: Any) -> None:
    _raises(TypeError, "num_candidates", DistinctUnitCount, value)
    _raises(TypeError, "num_candidates", PluralityVote, value)
    _raises(TypeError, "max_contributions", QuantileScore, 0.5, [0.0], value)


def test_message_names_parameter_and_rule() -> None:
    with pytest.raises(ValueError) as error:
        QuantileScore(0.5, [0.0], max_contributions=0)
    assert str(error.value) == "'max_contributions' must be an integer >= 1; received 0"


# --- alpha -----------------------------------------------------------------------------------


@given(
    st.one_of(
        st.floats(max_value=0.0),
        st.floats(min_value=1.0),
        non_finite,
        st.fractions(max_value=0),
        st.fractions(min_value=1),
    )
)
def test_alpha_outside_open_unit_interval(alpha: float | Fraction) -> None:
    _raises(ValueError, "alpha", QuantileScore, alpha, [0.0])


@given(st.floats(min_value=0.0, max_value=1.0, exclude_min=True, exclude_max=True))
def test_alpha_inside_is_accepted_or_too_fine(alpha: float) -> None:
    # Every float in (0, 1) is read as its decimal; very fine ones need a huge denominator.
    try:
        score = QuantileScore(alpha, [0.0])
    except ValueError as error:
        assert "'alpha'" in str(error) and "int64" in str(error)
    else:
        assert score.alpha == Fraction(repr(alpha))


def test_alpha_rejects_other_types() -> None:
    _raises(TypeError, "alpha", QuantileScore, True, [0.0])
    _raises(TypeError, "alpha", QuantileScore, "0.5", [0.0])


# --- grids -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build", [lambda g: QuantileScore(0.5, g), lambda g: MeanScore(g, 0, 1, 3)]
)
@given(
    grid=st.lists(st.floats(-10, 10), min_size=1, max_size=5),
    bad=st.sampled_from(["nan", "inf", "unsorted", "duplicate", "empty", "2d", "text"]),
)
def test_grids_rejected(build: Any, grid: list[float], bad: str) -> None:
    grid = sorted(set(grid))
    broken: Any
    if bad in ("nan", "inf"):
        broken = [*grid, math.nan if bad == "nan" else -math.inf]
        error: type[Exception] = ValueError
    elif bad == "unsorted":
        broken = [grid[-1] + 1.0, *grid]
        error = ValueError
    elif bad == "duplicate":
        broken = [*grid, grid[-1]]
        error = ValueError
    elif bad == "empty":
        broken = []
        error = ValueError
    elif bad == "2d":
        broken = [grid, grid]
        error = ValueError
    else:
        broken = "abc"
        error = TypeError
    _raises(error, "grid", build, broken)


def test_grid_accepts_arrays_and_stores_a_tuple() -> None:
    score = QuantileScore(0.5, np.array([1.0, 2.5]))
    assert score.grid == (1.0, 2.5)
    assert score.num_candidates == 2
    assert score.candidates == (1.0, 2.5)


# --- prices ----------------------------------------------------------------------------------


@given(
    st.one_of(
        st.floats(max_value=0.0),
        non_finite,
        st.integers(max_value=0),
        st.sampled_from([Fraction(1, 3), Fraction(-1, 4), Decimal("NaN"), Decimal("-0.5")]),
        st.sampled_from([0.1 + 0.2, 1.0000000000000002, Fraction(1, 2**60)]),
    )
)
def test_prices_rejected(price: Any) -> None:
    with pytest.raises(ValueError, match="'prices'"):
        Revenue([price])


@pytest.mark.parametrize(
    ("prices", "error"),
    [
        ([], ValueError),
        ([1, 1], ValueError),
        ([2, 1], ValueError),
        ("1.5", TypeError),
        ([True], TypeError),
        (["1.5"], TypeError),
        (5, TypeError),
    ],
)
def test_price_lists_rejected(prices: Any, error: type[Exception]) -> None:
    _raises(error, "prices", Revenue, prices)


@given(st.integers(max_value=0))
def test_cents_rejected(cents: int) -> None:
    _raises(ValueError, "cents", Revenue.from_cents, [5, cents])


def test_prices_accept_exact_decimals() -> None:
    score = Revenue([Decimal("0.05"), 0.1, Fraction(1, 4), 3])
    assert score.prices == (Fraction(1, 20), Fraction(1, 10), Fraction(1, 4), Fraction(3))
    assert score.unit == Fraction(1, 100)
    assert Revenue([0.5, 2]).unit == Fraction(1, 10)


# --- mean bounds -----------------------------------------------------------------------------


@given(st.floats(allow_nan=True), st.floats(allow_nan=True))
def test_mean_bounds(lower: float, upper: float) -> None:
    if math.isfinite(lower) and math.isfinite(upper) and lower < upper:
        score = MeanScore([0.0], lower, upper, n=3)
        assert score.sensitivity("replace") == (Fraction(upper) - Fraction(lower)) / 3
        return
    with pytest.raises(ValueError, match=r"'lower'|'upper'"):
        MeanScore([0.0], lower, upper, n=3)


def test_mean_refuses_scores_beyond_int64() -> None:
    with pytest.raises(ValueError, match="int64"):
        MeanScore([1e6], 0, 1e-300, n=10**6)


# --- relations -------------------------------------------------------------------------------

ALL_SCORES = [
    DistinctUnitCount(3),
    PluralityVote(3),
    VoteMargin(),
    Revenue.default(),
    QuantileScore(0.5, [0.0]),
    MeanScore([0.0], 0, 1, n=3),
]


@pytest.mark.parametrize("score", ALL_SCORES, ids=lambda s: type(s).__name__)
@given(st.text(max_size=12).filter(lambda s: s not in ("add_remove", "replace")))
def test_unknown_relation(score: Any, relation: str) -> None:
    for method in (score.sensitivity, score.scaled_sensitivity, score.monotone):
        _raises(ValueError, "relation", method, relation)


# --- data passed to compute ------------------------------------------------------------------


def test_index_data_rejected() -> None:
    _raises(ValueError, "votes", PluralityVote(3).compute, [0, 3])
    _raises(ValueError, "votes", PluralityVote(3).compute, [-1])
    _raises(TypeError, "votes", PluralityVote(3).compute, [0.0, 1.0])
    _raises(TypeError, "votes", VoteMargin().compute, [True, False])
    _raises(ValueError, "votes", VoteMargin().compute, [2])
    _raises(ValueError, "candidate_idx", DistinctUnitCount(2).compute_from_pairs, [0], [2])
    _raises(ValueError, "unit_ids", DistinctUnitCount(2).compute_from_pairs, [0, 1], [1])


def test_distinct_unit_count_enforces_the_per_unit_bound() -> None:
    score = DistinctUnitCount(4, max_candidates_per_unit=2)
    assert score.compute([[0, 1, 1, 0]]).tolist() == [1, 1, 0, 0]
    _raises(ValueError, "max_candidates_per_unit", score.compute, [[0, 1, 2]])


def test_empty_data() -> None:
    assert DistinctUnitCount(2).compute([]).tolist() == [0, 0]
    assert PluralityVote(2).compute([]).tolist() == [0, 0]
    assert VoteMargin().compute([]).tolist() == [0, 0]
    assert Revenue.from_cents([1, 2]).compute([]).tolist() == [0, 0]
    assert QuantileScore(0.5, [0.0, 1.0]).compute([]).tolist() == [0, 0]


def test_counts_rejected() -> None:
    score = QuantileScore(0.5, [0.0, 1.0])
    ties = {"equal": [0, 0]}
    _raises(ValueError, "less", score.compute_from_counts, [1], [1, 1], **ties)
    _raises(ValueError, "greater", score.compute_from_counts, [1, 1], [1, -1], **ties)
    _raises(TypeError, "less", score.compute_from_counts, [1.0, 1.0], [1, 1], **ties)
    _raises(ValueError, "equal", score.compute_from_counts, [1, 1], [1, 1], equal=[0, -1])
    _raises(ValueError, "equal", score.compute_from_counts, [1, 1], [1, 1], equal=[0])


def test_mean_data_rejected() -> None:
    score = MeanScore([0.0, 1.0], 0, 1, n=3)
    # A sum that no 'count' clamped values can have is a programming error; the count itself
    # is never compared with n (issue 8: that would make success depend on the data).
    _raises(ValueError, "total", score.compute_from_sum, Fraction(7, 2), 3)
    _raises(ValueError, "total", score.compute_from_sum, Fraction(1, 2), 0)
    _raises(ValueError, "count", score.compute_from_sum, 0, -1)
    _raises(TypeError, "count", score.compute_from_sum, 0, 1.0)
    _raises(TypeError, "values", score.compute, ["a", "b", "c"])


def test_quantile_score_drops_infinities_like_every_statistic() -> None:
    from beam_dp.scores import QuantileScore

    score = QuantileScore(0.5, [0.0, 1.0, 2.0])
    finite = score.compute([0.5, 1.5])
    assert (score.compute([0.5, 1.5, np.inf, -np.inf, np.nan]) == finite).all()
