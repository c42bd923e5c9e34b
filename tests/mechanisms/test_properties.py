"""Hypothesis properties and parameter validation of the selection API."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_dp.mechanisms import score_loss_bound, select, selection_probabilities, top_k
from beam_dp.mechanisms.exact_scores import (
    STEPS_PER_SENSITIVITY,
    exact_scores,
    scores_in_public_steps,
)

METHODS = st.sampled_from(["permute_and_flip", "exponential"])
SCORES = st.lists(st.integers(-1000, 1000), min_size=1, max_size=40)
FLOAT_SCORES = st.lists(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=30,
)
EPSILONS = st.floats(min_value=1e-3, max_value=20.0)
BAD_REALS = st.sampled_from([0.0, -1.0, math.nan, math.inf, -math.inf])


@settings(deadline=None, max_examples=60)
@given(scores=SCORES, epsilon=EPSILONS, monotonic=st.booleans(), method=METHODS)
def test_probabilities_sum_to_one(
    scores: list[int], epsilon: float, monotonic: bool, method: str
) -> None:
    probs = selection_probabilities(
        scores,
        epsilon=epsilon,
        sensitivity=1,
        monotonic=monotonic,
        method=method,  # type: ignore[arg-type]
    )
    assert probs.shape == (len(scores),)
    assert (probs >= 0).all()
    assert probs.sum() == pytest.approx(1.0, abs=1e-9)


@settings(deadline=None, max_examples=60)
@given(scores=SCORES, shift=st.integers(-(10**9), 10**9), epsilon=EPSILONS, method=METHODS)
def test_probabilities_invariant_to_a_constant(
    scores: list[int], shift: int, epsilon: float, method: str
) -> None:
    base = selection_probabilities(scores, epsilon=epsilon, sensitivity=1, method=method)  # type: ignore[arg-type]
    shifted = selection_probabilities(
        [s + shift for s in scores],
        epsilon=epsilon,
        sensitivity=1,
        method=method,  # type: ignore[arg-type]
    )
    np.testing.assert_allclose(base, shifted, rtol=1e-9, atol=1e-12)


@settings(deadline=None, max_examples=40)
@given(scores=SCORES, method=METHODS)
def test_best_candidate_is_most_likely(scores: list[int], method: str) -> None:
    probs = selection_probabilities(scores, epsilon=1.0, sensitivity=1, method=method)  # type: ignore[arg-type]
    best = int(np.argmax(scores))
    assert probs[best] == pytest.approx(probs.max(), rel=1e-9)


@settings(deadline=None, max_examples=40)
@given(scores=SCORES, method=METHODS, monotonic=st.booleans())
def test_select_returns_a_valid_index(scores: list[int], method: str, monotonic: bool) -> None:
    chosen = select(scores, epsilon=1.0, sensitivity=1, method=method, monotonic=monotonic)  # type: ignore[arg-type]
    assert 0 <= chosen < len(scores)


@settings(deadline=None, max_examples=80)
@given(scores=FLOAT_SCORES)
def test_float_scores_are_converted_exactly(scores: list[float]) -> None:
    exact = exact_scores(np.array(scores))
    recovered = [int(v) * exact.unit for v in exact.integers]
    top = max(Fraction(s) for s in scores)
    assert recovered == [Fraction(s) for s in scores]
    assert top == max(recovered)


def test_fraction_and_huge_integer_scores() -> None:
    exact = exact_scores([Fraction(1, 3), Fraction(1, 6), 2])
    assert [int(v) * exact.unit for v in exact.integers] == [
        Fraction(1, 3),
        Fraction(1, 6),
        Fraction(2),
    ]
    huge = exact_scores([10**30, 1, -(10**30)])
    assert huge.integers.dtype == object
    assert select([10**30, 1, -(10**30)], epsilon=1.0, sensitivity=1) == 0
    # no common factor is divided out: the unit of integers is 1, whatever their values
    kept = exact_scores([10**30, 0, -(10**30)])
    assert kept.integers.dtype == object and kept.unit == 1
    assert kept.integers.tolist() == [10**30, 0, -(10**30)]


@settings(deadline=None, max_examples=40)
@given(bad=BAD_REALS)
def test_epsilon_and_sensitivity_must_be_positive_and_finite(bad: float) -> None:
    with pytest.raises(ValueError, match="'epsilon' must be > 0 and finite"):
        select([1, 2], epsilon=bad, sensitivity=1)
    with pytest.raises(ValueError, match="'sensitivity' must be > 0 and finite"):
        select([1, 2], epsilon=1.0, sensitivity=bad)
    with pytest.raises(ValueError, match="'epsilon'"):
        selection_probabilities([1, 2], epsilon=bad, sensitivity=1)
    with pytest.raises(ValueError, match="'epsilon'"):
        score_loss_bound(3, epsilon=bad, sensitivity=1)
    with pytest.raises(ValueError, match="'epsilon'"):
        top_k([1, 2], 1, epsilon=bad, sensitivity=1)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_scores_must_be_finite_and_message_has_no_value(bad: float) -> None:
    scores = [1.0, 123456.789, bad]
    with pytest.raises(ValueError, match="'scores' must be finite") as info:
        select(scores, epsilon=1.0, sensitivity=1)
    assert "123456" not in str(info.value)


def test_other_validation_messages() -> None:
    with pytest.raises(ValueError, match="'scores' must hold at least one candidate"):
        select([], epsilon=1.0, sensitivity=1)
    with pytest.raises(ValueError, match="'scores' must be one-dimensional"):
        select(np.zeros((2, 2)), epsilon=1.0, sensitivity=1)
    with pytest.raises(ValueError, match="'method' must be one of"):
        select([1], epsilon=1.0, sensitivity=1, method="gumbel")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'k' must be at most the number of candidates"):
        top_k([1, 2], 3, epsilon=1.0, sensitivity=1)
    with pytest.raises(ValueError, match="'k' must be an integer >= 1"):
        top_k([1, 2], 0, epsilon=1.0, sensitivity=1)
    with pytest.raises(ValueError, match="'confidence' must be strictly between 0 and 1"):
        score_loss_bound(3, epsilon=1.0, sensitivity=1, confidence=1.0)
    with pytest.raises(ValueError, match="'num_candidates' must be an integer >= 1"):
        score_loss_bound(0, epsilon=1.0, sensitivity=1)
    with pytest.raises(TypeError, match="'scores' must be numbers"):
        select([True, False], epsilon=1.0, sensitivity=1)


SENSITIVITIES = st.sampled_from([Fraction(1), Fraction(1, 3), Fraction(5, 2), Fraction(1, 1 << 10)])


@settings(deadline=None, max_examples=80)
@given(first=FLOAT_SCORES, second=FLOAT_SCORES, sensitivity=SENSITIVITIES)
def test_the_samplers_unit_is_fixed_by_the_type_and_the_sensitivity(
    first: list[float], second: list[float], sensitivity: Fraction
) -> None:
    # the coins' rate is epsilon * unit / sensitivity: a unit taken from the values (the
    # floats' smallest exponent, the integers' gcd) would make the coins' work private
    step = sensitivity / STEPS_PER_SENSITIVITY
    assert scores_in_public_steps(np.array(first), sensitivity).unit == step
    assert scores_in_public_steps([Fraction(v) for v in second], sensitivity).unit == step
    ints = [int(v) for v in first]
    assert scores_in_public_steps(np.array(ints, dtype=np.int64), sensitivity).unit == 1
    assert scores_in_public_steps(ints, sensitivity).unit == 1
    # an iterator is read once: its floats are not taken for an empty list of integers
    assert scores_in_public_steps(iter(first), sensitivity).unit == step
    # Python ints beyond int64 (a combiner's object array) are integers too
    big = np.array([v * 2**70 for v in ints], dtype=object)
    assert scores_in_public_steps(big, sensitivity).unit == 1


@settings(deadline=None, max_examples=120)
@given(scores=FLOAT_SCORES, sensitivity=SENSITIVITIES, data=st.data())
def test_the_grid_keeps_the_sensitivity_and_the_order(
    scores: list[float], sensitivity: Fraction, data: st.DataObject
) -> None:
    # each score becomes floor(score / step); a neighbour's scores, each moved by at most the
    # sensitivity (all one way or not), move by at most STEPS_PER_SENSITIVITY grid steps
    moves = data.draw(st.lists(st.fractions(-1, 1), min_size=len(scores), max_size=len(scores)))
    exact = [Fraction(v) for v in scores]
    neighbour = [v + m * sensitivity for v, m in zip(exact, moves, strict=True)]
    grid = scores_in_public_steps(exact, sensitivity)
    moved = scores_in_public_steps(neighbour, sensitivity)
    step = sensitivity / STEPS_PER_SENSITIVITY
    assert [int(g) for g in grid.integers] == [math.floor(v / step) for v in exact]
    for g, h in zip(grid.integers.tolist(), moved.integers.tolist(), strict=True):
        assert abs(int(g) - int(h)) <= STEPS_PER_SENSITIVITY
    pairs = zip(itertools.pairwise(exact), itertools.pairwise(grid.integers.tolist()), strict=True)
    for (a, b), (g, h) in pairs:
        assert (a <= b) <= (g <= h)  # the order is kept (ties may appear, never inversions)
    floats = scores_in_public_steps(np.array(scores), sensitivity)
    assert floats.integers.tolist() == grid.integers.tolist()
