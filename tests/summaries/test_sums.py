"""The exact sum behind the private mean: exact, mergeable, and one rule for non-data values."""

from __future__ import annotations

import math
import pickle
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from property_settings import fresh_examples

from beam_dp.scores import MeanScore
from beam_dp.scores._exact import finite_values
from beam_dp.summaries.histogram import ExactSum as ReexportedExactSum
from beam_dp.summaries.histogram import Grid
from beam_dp.summaries.sums import ExactSum


def test_exact_sum_is_still_importable_from_histogram() -> None:
    assert ReexportedExactSum is ExactSum


# -------------------------------------------------------------------------- exact sum


def test_exact_sum_is_exact_and_applies_the_input_rule() -> None:
    values = [0.1, 0.2, math.nan, 5e-324, 1e-310, 30.0, -math.inf, 2.5, math.inf, -7.0]
    summary = ExactSum(-1.0, 20.0).add(values)

    kept = (0.1, 0.2, 5e-324, 1e-310, 20.0, 2.5, -1.0)  # NaN and infinities dropped, clamped
    assert summary.total == sum((Fraction(v) for v in kept), Fraction(0))
    assert summary.count == 7


@fresh_examples(50)
@given(
    values=st.lists(
        st.one_of(
            st.floats(-1e300, 1e300, allow_subnormal=True),
            st.sampled_from([math.nan, math.inf, -math.inf]),
        ),
        max_size=80,
    ),
    cut=st.integers(0, 80),
)
def test_exact_sum_merges_exactly(values: list[float], cut: int) -> None:
    lower, upper = -1e300, 1e300
    array = np.array(values, dtype=np.float64)
    one = ExactSum(lower, upper).add(array)
    merged = ExactSum(lower, upper).add(array[:cut]).merge(ExactSum(lower, upper).add(array[cut:]))

    kept = np.clip(array[np.isfinite(array)], lower, upper)
    assert one == merged
    assert one.total == sum((Fraction(float(v)) for v in kept), Fraction(0))
    assert one.count == kept.size
    assert pickle.loads(pickle.dumps(one)) == one


@fresh_examples(60)
@given(
    values=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), max_size=40),
    bounds=st.sampled_from([(-1.0, 1.0), (0.0, 1e6), (-1e300, 1e300), (0.1, 0.7)]),
)
def test_one_rule_for_values_that_are_not_data(
    values: list[float], bounds: tuple[float, float]
) -> None:
    # Every statistic keeps the same values: the quantile grid, the mean's summary and the
    # mean score drop NaN and infinities and clamp the rest, through one shared helper.
    lower, upper = bounds
    kept = [min(max(v, lower), upper) for v in values if math.isfinite(v)]
    grid = Grid.uniform(lower, upper, 5)
    summary = ExactSum(lower, upper).add(values)
    score = MeanScore((lower,), lower, upper, n=1)

    assert finite_values(values).tolist() == [v for v in values if math.isfinite(v)]
    assert grid.prepare(values).tolist() == kept
    assert summary.count == len(kept)
    assert summary.total == sum((Fraction(v) for v in kept), Fraction(0))
    assert score.clamped_sum(values) == summary.total


def test_values_that_are_not_numbers_are_refused_without_showing_them() -> None:
    secret = "alice@example.org"
    for call in (
        lambda: Grid.uniform(0.0, 1.0, 3).prepare([0.5, secret]),
        lambda: ExactSum(0.0, 1.0).add(np.array([secret], dtype=object)),
        lambda: MeanScore((0.0,), 0, 1, n=1).compute([secret]),
    ):
        with pytest.raises(TypeError, match="'values' must be an array of real numbers") as info:
            call()
        error: BaseException | None = info.value
        while error is not None:  # no chained library message quotes the value either
            assert secret not in str(error)
            error = error.__cause__ or error.__context__


def test_exact_sum_refuses_mismatched_bounds() -> None:
    with pytest.raises(ValueError, match="different clamping bounds"):
        ExactSum(0.0, 1.0).merge(ExactSum(0.0, 2.0))
    with pytest.raises(ValueError, match="'lower' must be < 'upper'"):
        ExactSum(1.0, 1.0)
    assert "count=<private>" in repr(ExactSum(0.0, 1.0))
