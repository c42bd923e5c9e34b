"""DP key selection: the exact discrete Laplace sampler, the threshold, and its δ guarantee."""

from __future__ import annotations

import itertools
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from stats_helpers import FPR, chi_square_pvalue, clopper_pearson

from beam_dp.mechanisms import InsecureSeededRandom
from beam_dp.mechanisms.partition_selection import (
    NO_DELTA_HINT,
    check_key_selection,
    discrete_laplace,
    key_selection_threshold,
    release_probability,
    select_keys,
    sure_release_count,
)


def _seeded(seed: int) -> InsecureSeededRandom:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InsecureSeededRandom(seed)


def _discrete_laplace_pmf(scale: float, support: np.ndarray) -> np.ndarray:
    a = math.exp(-1.0 / scale)
    return (1 - a) / (1 + a) * a ** np.abs(support)


@pytest.mark.parametrize("scale", [0.7, 2.0, Fraction(10, 3), 25.0])
def test_discrete_laplace_matches_its_pmf(scale: float | Fraction) -> None:
    n = 40_000
    samples = discrete_laplace(scale, n, _seeded(11))
    assert samples.dtype == np.int64 and samples.shape == (n,)
    width = int(12 * float(scale)) + 3
    support = np.arange(-width, width + 1)
    counts = np.array([(samples == z).sum() for z in support] + [(np.abs(samples) > width).sum()])
    probs = _discrete_laplace_pmf(float(scale), support)
    probs = np.append(probs, max(0.0, 1.0 - probs.sum()))
    assert chi_square_pvalue(counts, probs / probs.sum()) > FPR


def test_discrete_laplace_with_a_numerator_beyond_63_bits() -> None:
    # scale = (2**70 + 1) / 2**69, just above 2: the exact Python-integer path.
    scale = Fraction(2**70 + 1, 2**69)
    samples = discrete_laplace(scale, 4_000, _seeded(3))
    support = np.arange(-12, 13)
    counts = np.array([(samples == z).sum() for z in support] + [(np.abs(samples) > 12).sum()])
    probs = _discrete_laplace_pmf(float(scale), support)
    probs = np.append(probs, 1.0 - probs.sum())
    assert chi_square_pvalue(counts, probs) > FPR


def test_discrete_laplace_validates_and_handles_zero_samples() -> None:
    assert discrete_laplace(1.0, 0).shape == (0,)
    with pytest.raises(ValueError, match="'scale'"):
        discrete_laplace(float("nan"), 3)
    with pytest.raises(ValueError, match="'n'"):
        discrete_laplace(1.0, -1)


@pytest.mark.parametrize(
    ("epsilon", "delta", "per_unit"),
    [(1.0, 1e-6, 1), (0.1, 1e-9, 10), (2.5, 1e-3, 3), (0.5, 0.2, 1), (8.0, 1e-12, 2)],
)
def test_threshold_is_the_smallest_that_keeps_single_unit_labels_below_delta(
    epsilon: float, delta: float, per_unit: int
) -> None:
    threshold = key_selection_threshold(epsilon, delta, per_unit)
    a = math.exp(-epsilon / per_unit)

    def tail(k: int) -> float:  # P(Z >= k), summed from the pmf (an independent computation)
        z = np.arange(k, k + 20_000)
        return float(np.sum((1 - a) / (1 + a) * a ** np.abs(z)))

    # A label held by one unit has count 1 and is released when 1 + Z >= threshold.
    assert tail(threshold - 1) <= delta / per_unit * (1 + 1e-9)
    assert tail(threshold - 2) > delta / per_unit
    assert release_probability(1, epsilon, delta, per_unit) == pytest.approx(
        tail(threshold - 1), rel=1e-9
    )


def test_release_probability_is_monotone_and_reaches_confidence() -> None:
    probabilities = [release_probability(n, 1.0, 1e-6, 2) for n in range(1, 80)]
    assert all(b >= a for a, b in itertools.pairwise(probabilities))
    sure = sure_release_count(1.0, 1e-6, 2, 0.95)
    assert release_probability(sure, 1.0, 1e-6, 2) >= 0.95
    assert release_probability(sure - 1, 1.0, 1e-6, 2) < 0.95


def test_single_unit_labels_are_released_at_most_with_probability_delta_over_c() -> None:
    # A large delta makes the rare event measurable: c = 2 labels held by one unit each.
    epsilon, delta, per_unit, trials = 1.0, 0.2, 2, 20_000
    released = select_keys(
        np.ones(trials, dtype=np.int64),
        epsilon=epsilon,
        delta=delta,
        max_keys_per_unit=per_unit,
        rng=_seeded(5),
    )
    exact = release_probability(1, epsilon, delta, per_unit)
    low, high = clopper_pearson(int(released.sum()), trials, FPR)
    assert exact <= delta / per_unit
    assert low <= exact <= high


def test_popular_labels_are_released_and_absent_counts_rejected() -> None:
    counts = np.array([1, 1, 500, 1000])
    kept = select_keys(counts, epsilon=1.0, delta=1e-9, max_keys_per_unit=1)
    assert kept[2] and kept[3]
    with pytest.raises(ValueError, match=">= 1"):
        select_keys(np.array([0, 3]), epsilon=1.0, delta=1e-6, max_keys_per_unit=1)


@pytest.mark.parametrize("delta", [None, 0, 0.0])
def test_no_delta_is_an_error_that_explains_why(delta: float | None) -> None:
    with pytest.raises(ValueError) as info:
        check_key_selection(1.0, delta, 1)
    message = str(info.value)
    assert NO_DELTA_HINT in message
    assert "single privacy unit" in message and "public list" in message


@pytest.mark.parametrize(
    ("epsilon", "delta", "per_unit", "match"),
    [
        (float("nan"), 1e-6, 1, "'epsilon'"),
        (-1.0, 1e-6, 1, "'epsilon'"),
        (1.0, 1.5, 1, "'delta'"),
        (1.0, float("nan"), 1, "'delta'"),
        (1.0, 1e-6, 0, "'max_keys_per_unit'"),
    ],
)
def test_bad_parameters_are_named(epsilon: float, delta: float, per_unit: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        check_key_selection(epsilon, delta, per_unit)
