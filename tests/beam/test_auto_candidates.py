"""Why ``TopCandidates`` has no ``max_candidates_per_unit="auto"``, and that it is refused.

The distinct-unit count has sensitivity 1 whatever a unit names, so a bound on the distinct
candidates per unit never lowers the noise: a privately chosen one would pay ``share *
epsilon`` and drop candidates for nothing (:mod:`beam_dp.summaries.contribution_bounds`,
"Which bounds are worth choosing"). These tests hold the measurement behind that statement
(exact pmfs over the pipeline's own bounding rule) and the refusal of ``"auto"`` before any
pipeline runs (fail closed). DP key selection is another matter: there the bound sets the
release threshold, and ``KeySelection(max_candidates_per_unit="auto")`` chooses it
(tests/beam/test_auto_key_selection.py).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from beam_dp.batching import ContributionBounds, bound_rows
from beam_dp.batching.columns import CANDIDATE, UNIT
from beam_dp.beam.selection import TopCandidates
from beam_dp.mechanisms import selection_probabilities
from beam_dp.scores import DistinctUnitCount
from beam_dp.summaries.contribution_bounds import (
    DEFAULT_SHARE,
    bound_scores,
    candidate_bounds,
    count_histogram,
)

NUM_CANDIDATES = 50
NUM_UNITS = 2_000


def _units(seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Synthetic units: unit ``u`` names ``1 + Poisson(6)`` distinct candidates (Zipf-like)."""
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(1, NUM_CANDIDATES + 1) ** 0.3
    popularity /= popularity.sum()
    sizes = np.minimum(1 + rng.poisson(6, NUM_UNITS), NUM_CANDIDATES)
    named = [rng.choice(NUM_CANDIDATES, size=s, replace=False, p=popularity) for s in sizes]
    units = np.repeat(np.arange(NUM_UNITS, dtype=np.uint64), sizes)
    return units, np.concatenate(named).astype(np.int64), sizes


def _counts(units: np.ndarray, candidates: np.ndarray, bound: int | None, salt: int) -> np.ndarray:
    """Distinct-unit counts after the pipeline's bounding rule (TopCandidates' bounds)."""
    bounds = ContributionBounds(max_contributions_per_unit=bound, distinct_candidates=True)
    kept = bound_rows({UNIT: units, CANDIDATE: candidates}, bounds, salt)
    score = DistinctUnitCount(NUM_CANDIDATES, bound if bound is not None else NUM_CANDIDATES)
    return score.compute_from_pairs(kept[UNIT].astype(np.int64), kept[CANDIDATE])


def test_sensitivity_is_one_at_every_bound() -> None:
    for bound in candidate_bounds(64):
        for relation in ("add_remove", "replace"):
            assert DistinctUnitCount(NUM_CANDIDATES, bound).sensitivity(relation) == 1


def test_no_bound_beats_every_bound_a_choice_could_pick() -> None:
    """P(true top) without a bound at epsilon exceeds it at every candidate bound with the
    statistic's part (1 - share) epsilon: the measurement in contribution_bounds' docstring."""
    units, candidates, sizes = _units()
    unbounded = _counts(units, candidates, None, salt=0)
    top = int(np.argmax(unbounded))
    epsilon = Fraction(1, 50)
    statistic_epsilon = (1 - DEFAULT_SHARE) * epsilon
    p_none = selection_probabilities(unbounded, epsilon=epsilon, sensitivity=1, monotonic=True)
    at_bound: dict[int, float] = {}
    for bound in candidate_bounds(16):
        probabilities = [
            selection_probabilities(
                _counts(units, candidates, bound, salt),
                epsilon=statistic_epsilon,
                sensitivity=1,
                monotonic=True,
            )[top]
            for salt in range(3)
        ]
        at_bound[bound] = float(np.mean(probabilities))
    assert p_none[top] == pytest.approx(0.89, abs=0.01)
    assert at_bound[16] == pytest.approx(0.84, abs=0.02)
    assert at_bound[8] == pytest.approx(0.80, abs=0.02)
    assert at_bound[4] == pytest.approx(0.41, abs=0.03)
    assert all(p < p_none[top] for p in at_bound.values())
    # The 0.9-quantile rule's best candidate on these units (what "auto" would aim at).
    scored = bound_scores(count_histogram(sizes, 64), alpha=Fraction(9, 10))
    assert scored.bounds[int(np.argmax(scored.scores))] == 16


@pytest.mark.parametrize("variant", ["Globally", "PerKey"])
def test_top_candidates_refuses_auto_candidate_bound(variant: str) -> None:
    extra = {"keys": ["a", "b"], "key_column": "k"} if variant == "PerKey" else {}
    with pytest.raises(
        ValueError, match=r"'max_candidates_per_unit' takes no 'auto'.*sensitivity 1"
    ):
        getattr(TopCandidates, variant)(
            candidate_column="c",
            candidates=["x", "y"],
            unit_column="u",
            epsilon=1.0,
            max_candidates_per_unit="auto",
            **extra,
        )


def test_selections_refuse_auto_key_bound_and_say_where_it_is() -> None:
    """``max_keys_per_unit="auto"`` is wired for the quantile family and the mean only: the
    selections refuse it at construction, naming it and where it is available."""
    with pytest.raises(
        ValueError, match=r"'max_keys_per_unit'.*'auto'.*available for the quantiles"
    ):
        TopCandidates.PerKey(
            candidate_column="c",
            candidates=["x", "y"],
            unit_column="u",
            epsilon=1.0,
            keys=["a", "b"],
            key_column="k",
            max_keys_per_unit="auto",
        )
