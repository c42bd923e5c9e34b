"""Empirical privacy audit of select(), and proof that the audit catches a broken sampler.

The neighbouring pair is tight for the non-monotone mechanisms: candidate 0 gains the full
sensitivity while every other candidate loses it, so the privacy loss of the event
"candidate 0 is chosen" approaches epsilon as the number of candidates grows. We draw enough
samples that the Clopper-Pearson lower bound on that loss is within ~0.1 of its true value; a
sampler that is epsilon-DP can never push the bound above epsilon (except with probability
FPR), and one calibrated at 2 * epsilon does so every time.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from stats_helpers import audited_epsilon_lower_bound

from beam_dp.mechanisms import select, selection_probabilities

EPSILON = 1.0
NUM_CANDIDATES = 20
SCORES_X = np.array([1] + [0] * (NUM_CANDIDATES - 1))  # candidate 0 ahead by the sensitivity
SCORES_NEIGHBOUR = np.array([0] + [1] * (NUM_CANDIDATES - 1))  # everyone else ahead instead
TRIALS = 25_000

Sampler = Callable[[np.ndarray, str], int]


def _honest(scores: np.ndarray, method: str) -> int:
    return select(scores, epsilon=EPSILON, sensitivity=1, method=method)  # type: ignore[arg-type]


def _calibrated_at_twice_epsilon(scores: np.ndarray, method: str) -> int:
    return select(scores, epsilon=2 * EPSILON, sensitivity=1, method=method)  # type: ignore[arg-type]


def _audit(sampler: Sampler, method: str) -> float:
    hits_x = sum(sampler(SCORES_X, method) == 0 for _ in range(TRIALS))
    hits_neighbour = sum(sampler(SCORES_NEIGHBOUR, method) == 0 for _ in range(TRIALS))
    return audited_epsilon_lower_bound(hits_x, hits_neighbour, TRIALS)


@pytest.mark.parametrize("method", ["permute_and_flip", "exponential"])
def test_the_pair_is_tight(method: str) -> None:
    # The true loss of the audited event, from the exact distributions: close to epsilon.
    kwargs = {"epsilon": EPSILON, "sensitivity": 1, "method": method}
    p_x = selection_probabilities(SCORES_X, **kwargs)[0]  # type: ignore[arg-type]
    p_neighbour = selection_probabilities(SCORES_NEIGHBOUR, **kwargs)[0]  # type: ignore[arg-type]
    loss = math.log(p_x / p_neighbour)
    assert 0.9 * EPSILON < loss <= EPSILON


@pytest.mark.slow
@pytest.mark.parametrize("method", ["permute_and_flip", "exponential"])
def test_select_passes_the_audit(method: str) -> None:
    assert _audit(_honest, method) <= EPSILON


@pytest.mark.slow
@pytest.mark.parametrize("method", ["permute_and_flip", "exponential"])
def test_audit_catches_a_sampler_at_twice_epsilon(method: str) -> None:
    assert _audit(_calibrated_at_twice_epsilon, method) > EPSILON
