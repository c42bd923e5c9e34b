"""select_per_key: for every key, exactly the law of select() on that key's scores.

Statistical tests compare against the exact pmfs (``selection_probabilities``) and against
``select`` called per key, each at a family-wise false-positive rate of at most ``FPR``
(Bonferroni over the keys compared). The index bookkeeping (mixed candidate counts, chunks,
2-D and concatenated input) is checked exactly with keys whose best candidate wins with
probability ``1 - exp(-5000)`` or more.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from stats_helpers import FPR, chi_square_pvalue

from beam_dp.mechanisms import per_key, select, selection_probabilities
from beam_dp.mechanisms.per_key import select_per_key
from beam_dp.mechanisms.randomness import SecureRandom

METHOD_NAMES = ["permute_and_flip", "exponential"]

# Mixed candidate counts (1 to 10), ties at the top and below it, floats and fractions.
KEYS: list[list[Any]] = [
    [7],
    [1, 0],
    [2, 2],
    [3, 1, 0, 2, 2, -1],
    [4, 4, 4, 1, 0],
    [-abs(2 * k - 9) for k in range(10)],
    [5, 5, 4, 4, 3, 0, 1],
    [0, 3, 3, 1, 3, 0, 2, 1, 0],
]
FLOAT_KEYS: list[list[Any]] = [[0.25, -1.5, 0.75, 0.5, -0.125], [1.0, 1.0], [0.0, 2.5, 2.0]]
FRACTION_KEYS: list[list[Any]] = [
    [Fraction(1, 3), Fraction(2, 3), Fraction(-1, 7), Fraction(1, 2)],
    [Fraction(5, 2), Fraction(5, 2), Fraction(1)],
]


def _concatenated(keys: list[list[Any]], repeats: int) -> tuple[list[Any], list[int]]:
    scores: list[Any] = []
    counts: list[int] = []
    for _ in range(repeats):
        for key in keys:
            scores.extend(key)
            counts.append(len(key))
    return scores, counts


def _per_key_counts(chosen: np.ndarray, keys: list[list[Any]], repeats: int) -> list[np.ndarray]:
    by_key = chosen.reshape(repeats, len(keys))
    return [np.bincount(by_key[:, k], minlength=len(key)) for k, key in enumerate(keys)]


@pytest.mark.parametrize("method", METHOD_NAMES)
@pytest.mark.parametrize("monotonic", [False, True])
@pytest.mark.parametrize("keys", [KEYS, FLOAT_KEYS + FRACTION_KEYS], ids=["ints", "rationals"])
def test_each_key_follows_the_exact_probabilities(
    keys: list[list[Any]], monotonic: bool, method: str
) -> None:
    repeats = 20_000
    epsilon, sensitivity = 1.3, 1.0
    scores, counts = _concatenated(keys, repeats)
    chosen = select_per_key(
        scores,
        counts,
        epsilon=epsilon,
        sensitivity=sensitivity,
        monotonic=monotonic,
        method=method,  # type: ignore[arg-type]
    )
    assert chosen.shape == (len(counts),)
    for key, observed in zip(keys, _per_key_counts(chosen, keys, repeats), strict=True):
        probs = selection_probabilities(
            key,
            epsilon=epsilon,
            sensitivity=sensitivity,
            monotonic=monotonic,
            method=method,  # type: ignore[arg-type]
        )
        assert chi_square_pvalue(observed, probs) > FPR / len(keys)


def _homogeneity_pvalue(first: np.ndarray, second: np.ndarray, min_expected: float = 5.0) -> float:
    """Chi-square test that two count vectors come from one law (small cells pooled)."""
    table = np.vstack([first, second]).astype(float)
    expected = table.sum(axis=0) * table.sum(axis=1)[:, None] / table.sum()
    small = expected.min(axis=0) < min_expected
    columns = [table[:, ~small]]
    if small.any():
        columns.append(table[:, small].sum(axis=1, keepdims=True))
    pooled = np.hstack(columns)
    pooled = pooled[:, pooled.sum(axis=0) > 0]
    if pooled.shape[1] < 2:
        return 1.0
    return float(stats.chi2_contingency(pooled, correction=False)[1])


@pytest.mark.parametrize("method", METHOD_NAMES)
def test_same_law_as_select_called_per_key(method: str) -> None:
    keys = [KEYS[1], KEYS[3], KEYS[5], FLOAT_KEYS[0]]
    repeats = 1_500
    epsilon, sensitivity = 0.9, 1.0
    scores, counts = _concatenated(keys, repeats)
    chosen = select_per_key(
        scores,
        counts,
        epsilon=epsilon,
        sensitivity=sensitivity,
        method=method,  # type: ignore[arg-type]
    )
    batched = _per_key_counts(chosen, keys, repeats)
    source = SecureRandom()
    for key, observed in zip(keys, batched, strict=True):
        one_by_one = np.zeros(len(key), dtype=np.int64)
        for _ in range(repeats):
            one_by_one[
                select(
                    key,
                    epsilon=epsilon,
                    sensitivity=sensitivity,
                    method=method,  # type: ignore[arg-type]
                    rng=source,
                )
            ] += 1
        assert _homogeneity_pvalue(observed, one_by_one) > FPR / len(keys)


@pytest.mark.parametrize("method", METHOD_NAMES)
def test_beyond_int64_falls_back_with_the_same_law(method: str) -> None:
    # The keys together span more than 2**61 score steps: the exact integers become Python ints.
    keys: list[list[Any]] = [[0, 1, 1], [2**65, 2**65 + 1, 2**65 - 1]]
    repeats = 3_000
    scores, counts = _concatenated(keys, repeats)
    chosen = select_per_key(scores, counts, epsilon=1.0, sensitivity=1, method=method)  # type: ignore[arg-type]
    for key, observed in zip(keys, _per_key_counts(chosen, keys, repeats), strict=True):
        probs = selection_probabilities(key, epsilon=1.0, sensitivity=1, method=method)  # type: ignore[arg-type]
        assert chi_square_pvalue(observed, probs) > FPR / len(keys)


def test_exponential_rounds_past_the_padding_keep_the_law(monkeypatch: pytest.MonkeyPatch) -> None:
    # One padded round instead of 32: many keys draw further rounds (the residual path).
    monkeypatch.setattr(per_key, "_ROUNDS", 1)
    keys = [KEYS[3], KEYS[5]]
    repeats = 10_000
    scores, counts = _concatenated(keys, repeats)
    chosen = select_per_key(scores, counts, epsilon=0.5, sensitivity=1, method="exponential")
    for key, observed in zip(keys, _per_key_counts(chosen, keys, repeats), strict=True):
        probs = selection_probabilities(key, epsilon=0.5, sensitivity=1, method="exponential")
        assert chi_square_pvalue(observed, probs) > FPR / len(keys)


# --------------------------------------------------------------- exact index bookkeeping

# A key: its number of candidates, where the winner sits, and a base score. Every other
# candidate is at least 10**4 below the winner, so with epsilon = 1, sensitivity = 1 its coin
# has probability <= exp(-5000): the winner is chosen whatever the method.
DOMINANT_KEYS = st.lists(
    st.tuples(st.integers(1, 12), st.integers(0, 11), st.integers(-(10**6), 10**6)),
    min_size=1,
    max_size=60,
)


def _dominant(keys: list[tuple[int, int, int]]) -> tuple[list[int], list[int], list[int]]:
    scores: list[int] = []
    counts: list[int] = []
    winners: list[int] = []
    for size, where, base in keys:
        winner = where % size
        scores.extend(base + (10**4 if i == winner else -(i % 3)) for i in range(size))
        counts.append(size)
        winners.append(winner)
    return scores, counts, winners


@settings(deadline=None, max_examples=40)
@given(keys=DOMINANT_KEYS, method=st.sampled_from(METHOD_NAMES), as_array=st.booleans())
def test_each_key_gets_its_own_winner(
    keys: list[tuple[int, int, int]], method: str, as_array: bool
) -> None:
    scores, counts, winners = _dominant(keys)
    given_scores: Any = np.array(scores, dtype=np.int64) if as_array else scores
    chosen = select_per_key(given_scores, counts, epsilon=1, sensitivity=1, method=method)  # type: ignore[arg-type]
    assert chosen.dtype == np.int64
    assert chosen.tolist() == winners


@settings(deadline=None, max_examples=20)
@given(keys=DOMINANT_KEYS, chunk=st.integers(1, 30), method=st.sampled_from(METHOD_NAMES))
def test_chunks_keep_keys_apart(keys: list[tuple[int, int, int]], chunk: int, method: str) -> None:
    scores, counts, winners = _dominant(keys)
    original = per_key._CHUNK_CANDIDATES
    per_key._CHUNK_CANDIDATES = chunk  # hypothesis forbids function-scoped fixtures
    try:
        chosen = select_per_key(scores, counts, epsilon=1, sensitivity=1, method=method)  # type: ignore[arg-type]
    finally:
        per_key._CHUNK_CANDIDATES = original
    assert chosen.tolist() == winners


@settings(deadline=None, max_examples=30)
@given(
    rows=st.integers(0, 30),
    width=st.integers(1, 8),
    winner=st.integers(0, 7),
    method=st.sampled_from(METHOD_NAMES),
)
def test_two_dimensional_scores_are_one_key_per_row(
    rows: int, width: int, winner: int, method: str
) -> None:
    scores = np.zeros((rows, width), dtype=np.float64)
    columns = (np.arange(rows) + winner) % width
    scores[np.arange(rows), columns] = 1e4
    chosen = select_per_key(scores, epsilon=1, sensitivity=1, method=method)  # type: ignore[arg-type]
    assert chosen.tolist() == columns.tolist()


@settings(deadline=None, max_examples=30)
@given(
    sizes=st.lists(st.integers(1, 10), min_size=1, max_size=40),
    spread=st.integers(0, 5),
    method=st.sampled_from(METHOD_NAMES),
)
def test_indices_stay_within_each_key(sizes: list[int], spread: int, method: str) -> None:
    rng = np.random.default_rng(sum(sizes) + spread)
    scores = rng.integers(0, spread + 1, size=sum(sizes))
    chosen = select_per_key(scores, sizes, epsilon=0.3, sensitivity=1, method=method)  # type: ignore[arg-type]
    assert ((chosen >= 0) & (chosen < np.array(sizes))).all()


# --------------------------------------------------------------- validation


def test_no_keys_gives_an_empty_result() -> None:
    assert select_per_key([], [], epsilon=1, sensitivity=1).shape == (0,)
    assert select_per_key(np.zeros((0, 3)), epsilon=1, sensitivity=1).shape == (0,)
    with pytest.raises(ValueError, match="'epsilon' must be > 0"):
        select_per_key([], [], epsilon=0, sensitivity=1)


@pytest.mark.parametrize(
    ("scores", "counts", "message"),
    [
        ([1, 2, 3], [1, 1], "'counts' must add up to the number of scores"),
        ([1, 2, 3], [3, 0], "'counts' must be >= 1"),
        ([1, 2, 3], [[3]], "'counts' must be a one-dimensional"),
        ([1, 2, 3], [1.5, 1.5], "'counts' must be a one-dimensional"),
        ([1, 2, 3], None, "'scores' must be two-dimensional"),
        (np.zeros((2, 2)), [2, 2], "'scores' must be one-dimensional"),
        (np.zeros((2, 0)), None, "at least one candidate per key"),
        ([[1, 2], [3]], None, "'scores' must be rectangular"),
        ([1.0, math.nan], [2], "'scores' must be finite"),
        ([1.0, math.inf, 0.0], [1, 2], "'scores' must be finite"),
    ],
)
def test_bad_arguments_are_refused(scores: Any, counts: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        select_per_key(scores, counts, epsilon=1, sensitivity=1)


def test_bad_method_and_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="'method' must be one of"):
        select_per_key([1, 2], [2], epsilon=1, sensitivity=1, method="gumbel")  # type: ignore[arg-type]
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="'epsilon' must be > 0"):
            select_per_key([1, 2], [2], epsilon=bad, sensitivity=1)
        with pytest.raises(ValueError, match="'sensitivity' must be > 0"):
            select_per_key([1, 2], [2], epsilon=1, sensitivity=bad)
    with pytest.raises(TypeError, match="booleans"):
        select_per_key(np.array([True, False]), [2], epsilon=1, sensitivity=1)


# --------------------------------------------------------------- below_each


def test_below_each_is_uniform_for_every_bound() -> None:
    source = SecureRandom()
    bounds = np.array([1, 2, 3, 7, 10], dtype=np.int64)
    repeats = 20_000
    draws = source.below_each(np.tile(bounds, repeats)).reshape(repeats, bounds.size)
    for column, bound in enumerate(bounds.tolist()):
        observed = np.bincount(draws[:, column], minlength=bound)
        assert observed.size == bound
        assert chi_square_pvalue(observed, np.full(bound, 1.0 / bound)) > FPR / bounds.size


def test_below_each_takes_the_largest_bound_and_refuses_others() -> None:
    source = SecureRandom()
    big = source.below_each(np.array([2**63], dtype=np.uint64))
    assert int(big[0]) >= 0  # int64 holds every value below 2**63
    assert source.below_each(np.zeros(0, dtype=np.int64)).shape == (0,)
    with pytest.raises(ValueError, match="'bounds' must hold integers in"):
        source.below_each(np.array([3, 0], dtype=np.int64))
    with pytest.raises(ValueError, match="'bounds' must be a one-dimensional"):
        source.below_each(np.array([1.5]))  # type: ignore[arg-type]
