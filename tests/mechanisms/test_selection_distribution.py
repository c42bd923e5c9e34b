"""select() draws exactly from selection_probabilities(); the latter is right by brute force."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from stats_helpers import FPR, chi_square_pvalue, draw_counts

from beam_dp.mechanisms import select, selection_probabilities, top_k

SHAPES = {
    "clear_winner": [10, 2, 1, 0, 0, 0],
    "close": [5, 5, 4, 4, 3, 0, 1],
    "flat": [3, 3, 3, 3],
    "floats": [0.25, -1.5, 0.75, 0.5, -0.125],
    "fractions": [Fraction(1, 3), Fraction(2, 3), Fraction(-1, 7), Fraction(1, 2)],
    "quantile_like": [-abs(2 * k - 9) for k in range(10)],
}


def _brute_force_permute_and_flip(gammas: list[float]) -> list[float]:
    """P(r) = p_r * E[1 / (1 + #other successes)], enumerating every outcome of the coins."""
    coins = [math.exp(-g) for g in gammas]
    d = len(coins)
    result = [0.0] * d
    for outcome in itertools.product((0, 1), repeat=d):
        weight = math.prod(c if o else 1 - c for c, o in zip(coins, outcome, strict=True))
        successes = sum(outcome)
        for r in range(d):
            if outcome[r]:
                result[r] += weight / successes
    return result


@pytest.mark.parametrize("monotonic", [False, True])
@pytest.mark.parametrize("scores", [[3, 1, 0, 2, 2, -1], [0.5, 0.0, 1.75, 1.0], [4, 4, 4, 1]])
def test_permute_and_flip_closed_form_matches_enumeration(
    scores: list[float], monotonic: bool
) -> None:
    epsilon, sensitivity = 1.3, 1.0
    divisor = 1 if monotonic else 2
    top = max(scores)
    gammas = [epsilon * (top - s) / (divisor * sensitivity) for s in scores]
    expected = _brute_force_permute_and_flip(gammas)
    got = selection_probabilities(
        scores, epsilon=epsilon, sensitivity=sensitivity, monotonic=monotonic
    )
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-14)


def test_permute_and_flip_large_candidate_set_closed_form() -> None:
    # 2000 candidates: the quadrature must still sum to one and favour the best.
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 50, 2000)
    probs = selection_probabilities(scores, epsilon=1.0, sensitivity=1.0)
    em = selection_probabilities(scores, epsilon=1.0, sensitivity=1.0, method="exponential")
    assert probs.sum() == pytest.approx(1.0, abs=1e-12)
    # permute-and-flip is never worse than the exponential mechanism in expected score
    assert (probs * scores).sum() >= (em * scores).sum() - 1e-9


@pytest.mark.slow
@pytest.mark.parametrize("method", ["permute_and_flip", "exponential"])
@pytest.mark.parametrize("monotonic", [False, True])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_select_matches_exact_distribution(method: str, monotonic: bool, shape: str) -> None:
    scores = SHAPES[shape]
    kwargs = {"epsilon": 0.9, "sensitivity": 1, "monotonic": monotonic, "method": method}
    probs = selection_probabilities(scores, **kwargs)  # type: ignore[arg-type]
    counts = draw_counts(lambda: select(scores, **kwargs), len(scores), 6_000)  # type: ignore[arg-type]
    assert chi_square_pvalue(counts, probs) > FPR


@pytest.mark.slow
def test_select_large_candidate_set_distribution() -> None:
    # 10^4 candidates: compare the distribution of the chosen score gap. The exponential
    # mechanism is drawn with 2 padded rounds instead of 32 (the law does not depend on the
    # padding, only the cost does): a draw at 10^4 candidates and 32 rounds costs about 70 ms,
    # and with 2 rounds the draws that run past the padding are exercised as well.
    from beam_dp.mechanisms import SecureRandom
    from beam_dp.mechanisms.exact_scores import exact_scores
    from beam_dp.mechanisms.selection import _exponential, _rate

    rng = np.random.default_rng(7)
    scores = rng.integers(0, 40, 10_000)
    gaps = scores.max() - scores
    exact = exact_scores(scores)
    rate = _rate(0.5, 1, False, exact.unit)
    source = SecureRandom()
    for method in ("permute_and_flip", "exponential"):
        probs = selection_probabilities(scores, epsilon=0.5, sensitivity=1, method=method)  # type: ignore[arg-type]
        gap_probs = np.bincount(gaps, weights=probs)
        counts = np.zeros_like(gap_probs, dtype=np.int64)
        for _ in range(3_000):
            if method == "exponential":
                chosen = _exponential(exact.gaps(), rate, source, rounds=2)
            else:
                chosen = select(scores, epsilon=0.5, sensitivity=1, method=method)  # type: ignore[arg-type]
            counts[gaps[chosen]] += 1
        assert chi_square_pvalue(counts, gap_probs) > FPR


@pytest.mark.slow
@pytest.mark.parametrize("method", ["permute_and_flip", "exponential"])
def test_top_k_first_round_is_a_selection_at_epsilon_over_k(method: str) -> None:
    scores = [6, 5, 3, 3, 0]
    k = 2
    first_round = selection_probabilities(scores, epsilon=1.0 / k, sensitivity=1, method=method)  # type: ignore[arg-type]
    counts = np.zeros(len(scores), dtype=np.int64)
    for _ in range(5_000):
        chosen = top_k(scores, k, epsilon=1.0, sensitivity=1, method=method)  # type: ignore[arg-type]
        assert len(set(chosen)) == k
        counts[chosen[0]] += 1
    assert chi_square_pvalue(counts, first_round) > FPR


def test_top_k_returns_everything_when_k_is_d() -> None:
    assert sorted(top_k([1, 2, 3], 3, epsilon=1.0, sensitivity=1)) == [0, 1, 2]


@pytest.mark.slow
def test_permute_and_flip_by_ranks_is_exact_on_many_candidates() -> None:
    # Many candidates near the top (the case the old lazy walk handled): every coin is
    # flipped and the success of smallest random rank is chosen; the chosen gap must follow
    # the exact distribution.
    from fractions import Fraction

    from beam_dp.mechanisms import SecureRandom
    from beam_dp.mechanisms.selection import _permute_and_flip

    rng = np.random.default_rng(11)
    gaps = rng.integers(0, 12, 4_000)
    probs = selection_probabilities(-gaps, epsilon=1.0, sensitivity=1)
    gap_probs = np.bincount(gaps, weights=probs)
    counts = np.zeros_like(gap_probs, dtype=np.int64)
    source = SecureRandom()
    for _ in range(4_000):
        counts[gaps[_permute_and_flip(gaps, Fraction(1, 2), source)]] += 1
    assert chi_square_pvalue(counts, gap_probs) > FPR
