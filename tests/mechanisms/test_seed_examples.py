"""The seeds' worked examples, computed by the library (they are acceptance tests)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beam_dp.mechanisms import score_loss_bound, selection_probabilities


def test_seed_003_village_election_margin_2() -> None:
    # Melon-pan 3 votes, Gyudon 1: margins +2 / -2, replace relation, sensitivity 2, eps 0.1.
    probabilities = selection_probabilities(
        [2, -2], epsilon=0.1, sensitivity=2, method="exponential"
    )
    assert probabilities == pytest.approx([0.52498, 0.47502], abs=5e-6)


def test_seed_003_margin_50() -> None:
    probabilities = selection_probabilities(
        [50, -50], epsilon=0.1, sensitivity=2, method="exponential"
    )
    assert probabilities == pytest.approx([0.92414, 0.07586], abs=5e-6)


@pytest.mark.parametrize(("counts", "margin"), [((3, 1), 2), ((26, -24), 50), ((60, 10), 50)])
def test_seed_003_count_form_equals_margin_form(counts: tuple[int, int], margin: int) -> None:
    # For two candidates, counts with sensitivity 1 give the margins' distribution with 2.
    from_counts = selection_probabilities(
        list(counts), epsilon=0.1, sensitivity=1, method="exponential"
    )
    from_margins = selection_probabilities(
        [margin, -margin], epsilon=0.1, sensitivity=2, method="exponential"
    )
    np.testing.assert_allclose(from_counts, from_margins, rtol=1e-12)


def test_seed_002_heavy_hitter_bound() -> None:
    # d = 100 websites, eps = 0.5, probability >= 0.99: within 36.84 of the best.
    bound = score_loss_bound(100, epsilon=0.5, sensitivity=1, confidence=0.99)
    assert bound == pytest.approx(36.84, abs=0.005)
    assert bound == pytest.approx(2 * 1 / 0.5 * (math.log(100) + math.log(100)))


def test_seed_002_pricing_bound() -> None:
    # d = 200 prices, sensitivity 1.99: 2 * 1.99 * (ln 200 + t) / eps; t = 0 gives 21.1/eps.
    # (The note's "about 31/eps" is an arithmetic slip, DESIGN.md section 3.)
    epsilon = 1.0
    t_zero = 2 * 1.99 * math.log(200) / epsilon
    assert t_zero == pytest.approx(21.09, abs=0.01)
    bound = score_loss_bound(200, epsilon=epsilon, sensitivity=1.99, confidence=0.95)
    assert bound == pytest.approx(2 * 1.99 * (math.log(200) + math.log(20)) / epsilon)


def test_monotone_bound_is_half() -> None:
    plain = score_loss_bound(50, epsilon=1.0, sensitivity=3.0)
    monotone = score_loss_bound(50, epsilon=1.0, sensitivity=3.0, monotonic=True)
    assert monotone == pytest.approx(plain / 2)
