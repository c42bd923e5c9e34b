"""Privately chosen contribution bounds (issue 14): sensitivity, exact-pmf privacy, audit.

Privacy is checked as for every mechanism here: (1) the declared sensitivity is never
exceeded by the measured score change over random neighbouring histograms (and is attained);
(2) the exact output pmfs of the selection on random neighbouring histograms never differ by
more than epsilon in log (and a version calibrated at 2 epsilon does); (3) sampling: on a pair
where the loss of one outcome is exactly epsilon, the Clopper-Pearson lower bound of the
loss stays at or below epsilon for the real chooser and exceeds it at 2 epsilon.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from audit_power import audit_escape_probability
from stats_helpers import audited_epsilon_lower_bound

from beam_dp.mechanisms import selection_probabilities
from beam_dp.summaries.contribution_bounds import (
    BoundScores,
    bound_scores,
    candidate_bounds,
    choice_scores,
    choose_bound,
    count_histogram,
    merge_counts,
    quantile_noise_per_bound,
    split_epsilon,
)

CAP = 16
RULES = [
    ("quantile", {"alpha": Fraction(1, 2)}),
    ("quantile", {"alpha": Fraction(9, 10)}),
    ("quantile", {"alpha": 0.3}),
    ("tradeoff", {"noise_per_bound": 3}),
    ("tradeoff", {"noise_per_bound": Fraction(7, 2)}),
]


def _random_histogram(rng: np.random.Generator, cap: int = CAP) -> np.ndarray:
    h = np.zeros(cap + 1, dtype=np.int64)
    for c in rng.integers(1, cap + 1, rng.integers(0, 12)):
        h[c] += 1
    return h


def _neighbour(h: np.ndarray, rng: np.random.Generator, relation: str) -> np.ndarray | None:
    """A neighbour of ``h``: one unit added or removed (add_remove), or changed (replace)."""
    other = h.copy()
    if relation == "add_remove":
        if h.sum() and rng.random() < 0.5:
            other[rng.choice(np.flatnonzero(h))] -= 1
        else:
            other[rng.integers(1, h.size)] += 1
        return other
    if not h.sum():
        return None
    other[rng.choice(np.flatnonzero(h))] -= 1
    other[rng.integers(1, h.size)] += 1
    return other


def _pairs(relation: str, count: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    pairs = []
    while len(pairs) < count:
        h = _random_histogram(rng)
        other = _neighbour(h, rng, relation)
        if other is not None:
            pairs.append((h, other))
    return pairs


def _pmf(scored: BoundScores, epsilon: float, method: str) -> np.ndarray:
    return selection_probabilities(
        scored.scores,
        epsilon=epsilon,
        sensitivity=scored.scaled_sensitivity,
        method=method,  # type: ignore[arg-type]
    )


# --------------------------------------------------------------------------- basics


def test_candidates_are_the_powers_of_two_up_to_the_cap() -> None:
    assert candidate_bounds(1) == (1,)
    assert candidate_bounds(16) == (1, 2, 4, 8, 16)
    assert candidate_bounds(1000) == tuple(2**i for i in range(10))
    with pytest.raises(ValueError, match="'cap'"):
        candidate_bounds(0)


def test_count_histogram_caps_and_merges() -> None:
    h = count_histogram([1, 1, 3, 40, 5000], cap=16)
    assert h.tolist() == [0, 2, 0, 1] + [0] * 12 + [2]
    assert merge_counts(h, h).tolist() == (2 * h).tolist()
    with pytest.raises(ValueError, match="different caps"):
        merge_counts(h, count_histogram([1], cap=8))


@pytest.mark.parametrize("bad", [[0, 3], [-7], [1.5]])
def test_count_errors_never_show_a_count(bad: list[float]) -> None:
    with pytest.raises(ValueError) as error:
        count_histogram(bad)
    assert not any(str(v) in str(error.value) for v in bad if v not in (0, 1))


def test_a_histogram_with_units_of_no_rows_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'counts\[0\]'"):
        bound_scores([3, 1, 0])


def test_parameters_are_validated_by_name() -> None:
    h = count_histogram([4, 4], cap=8)
    with pytest.raises(ValueError, match="'rule'"):
        choose_bound(h, epsilon=1, rule="median")
    with pytest.raises(ValueError, match="'noise_per_bound'"):
        choose_bound(h, epsilon=1, rule="tradeoff")
    with pytest.raises(ValueError, match="'epsilon'"):
        choose_bound(h, epsilon=math.nan)
    with pytest.raises(ValueError, match="'method'"):
        choose_bound(h, epsilon=1, method="laplace")
    with pytest.raises(ValueError, match="'alpha'"):
        choose_bound(h, epsilon=1, alpha=1.0)


def test_split_epsilon_is_exact() -> None:
    bound, statistic = split_epsilon(1.0, 0.1)
    assert bound == Fraction(1, 10) and statistic == Fraction(9, 10)
    with pytest.raises(ValueError, match="'share'"):
        split_epsilon(1.0, 1.0)


def test_the_tradeoff_optimum_is_the_bucket_of_the_minimisers_of_dropped_plus_noise() -> None:
    # Its zero-score candidates are exactly the buckets (b/2, b] that hold a minimiser of
    # D(b) + lambda b over all integer bounds (lambda below the number of units).
    rng = np.random.default_rng(3)
    for _ in range(200):
        counts = rng.integers(1, 65, rng.integers(2, 40))
        h = count_histogram(counts, cap=64)
        lam = Fraction(int(rng.integers(1, counts.size)), int(rng.integers(1, 4)))
        scored = bound_scores(h, rule="tradeoff", noise_per_bound=lam)
        objective = {b: np.maximum(counts - b, 0).sum() + lam * b for b in range(1, 65)}
        best = min(objective.values())
        minimisers = {b for b, v in objective.items() if v == best}
        zero = {b for b, s in zip(scored.bounds, scored.scores, strict=True) if s == 0}
        assert zero == {b for b in scored.bounds if minimisers & set(range(b // 2 + 1, b + 1))}


def test_quantile_rule_prefers_the_smallest_bound_that_fits() -> None:
    # Every unit holds 5 rows: bucket 8 scores 0 and every other bound -n * max share.
    scored = bound_scores(count_histogram([5] * 10, cap=64), alpha=0.9)
    best = scored.bounds[int(np.argmax(scored.scores))]
    assert best == 8 and sorted(scored.scores.tolist())[-2] < 0


def test_choices_follow_the_data() -> None:
    # 2 000 units of 40-60 rows: bucket 64 (32, 64]; every other bound scores -1 000 below it.
    counts = np.random.default_rng(0).integers(40, 61, 2000)
    h = count_histogram(counts)
    chosen = {choose_bound(h, epsilon=1.0).bound for _ in range(20)}
    assert chosen == {64}
    choice = choose_bound(h, epsilon=0.5, rule="tradeoff", noise_per_bound=10)
    assert choice.secure and choice.rule == "tradeoff" and choice.cap == 1024
    record = choice.ledger_record()
    assert record["value"] == choice.bound and record["epsilon"] == 0.5
    assert record["sensitivity"] == 1.0 and record["candidates"] == list(candidate_bounds(1024))


def test_several_counts_per_unit_multiply_the_sensitivity() -> None:
    # A unit holding 3 (unit, key) counts moves each score by up to 3 x the sensitivity.
    h = count_histogram([4, 4, 9], cap=16)
    other = h + count_histogram([1, 1, 1], cap=16)
    a, b = bound_scores(h, alpha=Fraction(1, 2)), bound_scores(other, alpha=Fraction(1, 2))
    assert int(np.abs(a.scores - b.scores).max()) * a.unit == 3 * a.sensitivity
    choice = choose_bound(h, epsilon=1, alpha=Fraction(1, 2), counts_per_unit=3)
    assert choice.sensitivity == Fraction(3, 2)
    with pytest.raises(ValueError, match="'counts_per_unit'"):
        choose_bound(h, epsilon=1, counts_per_unit=0)


def test_quantile_noise_per_bound_is_the_loss_bound_per_row() -> None:
    lam = quantile_noise_per_bound(1.0, 1000)
    assert abs(float(lam) - 2 * (math.log(1000) + math.log(20))) < 1e-3


# ----------------------------------------------------------------------- sensitivity


@pytest.mark.parametrize("relation", ["add_remove", "replace"])
@pytest.mark.parametrize(("rule", "options"), RULES)
def test_measured_score_change_never_exceeds_the_declared_sensitivity(
    rule: str, options: dict[str, object], relation: str
) -> None:
    largest = Fraction(0)
    declared = None
    for h, other in _pairs(relation, 400, seed=11):
        a = bound_scores(h, rule=rule, relation=relation, **options)  # type: ignore[arg-type]
        b = bound_scores(other, rule=rule, relation=relation, **options)  # type: ignore[arg-type]
        assert a.unit == b.unit
        change = int(np.abs(a.scores - b.scores).max()) * a.unit
        largest = max(largest, change)
        declared = a.sensitivity
    assert declared is not None
    assert largest <= declared
    assert largest == declared  # attained: the derivation is tight


def test_declared_sensitivities() -> None:
    h = count_histogram([2, 3], cap=8)
    assert bound_scores(h, alpha=0.9).sensitivity == Fraction(9, 10)
    assert bound_scores(h, alpha=0.9, relation="replace").sensitivity == 1
    assert bound_scores(h, rule="tradeoff", noise_per_bound=2.5).sensitivity == 1
    assert (
        bound_scores(h, rule="tradeoff", noise_per_bound=2.5, relation="replace").sensitivity == 1
    )


# ------------------------------------------------------------------- exact pmf privacy


def _max_loss(
    pairs: list[tuple[np.ndarray, np.ndarray]],
    rule: str,
    options: dict[str, object],
    relation: str,
    method: str,
    calibrated_at: float,
) -> float:
    worst = 0.0
    for h, other in pairs:
        # The law choose_bound samples (with the quantile rule's tail penalty at its epsilon).
        p = _pmf(
            choice_scores(h, epsilon=calibrated_at, rule=rule, relation=relation, **options),  # type: ignore[arg-type]
            calibrated_at,
            method,
        )
        q = _pmf(
            choice_scores(other, epsilon=calibrated_at, rule=rule, relation=relation, **options),  # type: ignore[arg-type]
            calibrated_at,
            method,
        )
        worst = max(worst, float(np.abs(np.log(p) - np.log(q)).max()))
    return worst


@pytest.mark.parametrize("method", ["permute_and_flip", "exponential"])
@pytest.mark.parametrize("relation", ["add_remove", "replace"])
@pytest.mark.parametrize(("rule", "options"), RULES)
def test_exact_pmf_never_loses_more_than_epsilon(
    rule: str, options: dict[str, object], relation: str, method: str
) -> None:
    pairs = _pairs(relation, 150, seed=5)
    epsilon = 0.7
    honest = _max_loss(pairs, rule, options, relation, method, epsilon)
    assert honest <= epsilon * (1 + 1e-9)
    # The same check sees a chooser calibrated at 2 epsilon: its loss grows 1.5-2x, and exceeds
    # epsilon wherever the random pairs come close to the bound (alpha = 9/10 under
    # add_remove stays below: its full sensitivity moves only candidates below the unit).
    twice = _max_loss(pairs, rule, options, relation, method, 2 * epsilon)
    assert twice > 1.5 * honest
    if honest > 0.6 * epsilon:
        assert twice > epsilon * 1.05


# ------------------------------------------------------------------------ sampling audit

# Found by exact search over small histograms (cap 16, 12 to 60 units) of the law choose_bound
# samples, margin and tail penalty included (/tmp search, 6 000 random pairs; the largest
# loss found at epsilon = 1 was 0.951 before the depth inside the target's bucket): adding one
# unit of 2 rows to these 19 units moves the median rule's probability of choosing bound 2 by
# a factor e^1.000 at epsilon = 1 (permute-and-flip; 0.438 against 0.161). The audit runs at
# 0.5, where the chooser calibrated at 2 epsilon is caught. Power at TRIALS = 6 000: the
# probability that the audit's lower bound stays <= 0.5 at 2 epsilon, summed exactly over both
# binomial hit counts with the Clopper-Pearson bounds of audited_epsilon_lower_bound, is
# 2e-21, far below the 1e-9 bar (12 000 trials gave 5e-60: excess power at twice the draws).
# The honest test's false-positive rate is <= FPR at any count.
AUDIT_H = np.array([0, 2, 0, 3, 1, 0, 1, 1, 2, 0, 2, 1, 1, 3, 0, 1, 1], dtype=np.int64)
AUDIT_NEIGHBOUR = AUDIT_H.copy()
AUDIT_NEIGHBOUR[2] += 1
AUDIT_EVENT = 2  # the bound whose probability moves most
AUDIT_EPSILON = 0.5
MEDIAN = Fraction(1, 2)
TRIALS = 6_000


def test_the_audit_pair_is_tight() -> None:
    p = _pmf(choice_scores(AUDIT_NEIGHBOUR, epsilon=1.0, alpha=MEDIAN), 1.0, "permute_and_flip")
    q = _pmf(choice_scores(AUDIT_H, epsilon=1.0, alpha=MEDIAN), 1.0, "permute_and_flip")
    index = candidate_bounds(CAP).index(AUDIT_EVENT)
    assert 0.99 < math.log(p[index] / q[index]) <= 1.0 + 1e-9


def _audit(epsilon: float) -> float:
    """Clopper-Pearson lower bound of the loss of choosing ``AUDIT_EVENT``, calibrated at
    ``epsilon``."""

    def hits(h: np.ndarray) -> int:
        return sum(
            choose_bound(h, epsilon=epsilon, alpha=MEDIAN).bound == AUDIT_EVENT
            for _ in range(TRIALS)
        )

    return audited_epsilon_lower_bound(hits(AUDIT_NEIGHBOUR), hits(AUDIT_H), TRIALS)


@pytest.mark.slow
def test_choose_bound_passes_the_audit() -> None:
    assert _audit(AUDIT_EPSILON) <= AUDIT_EPSILON


@pytest.mark.slow
def test_audit_catches_a_chooser_at_twice_epsilon() -> None:
    assert _audit(2 * AUDIT_EPSILON) > AUDIT_EPSILON


def test_the_audit_catches_twice_epsilon_with_overwhelming_power() -> None:
    # The trial count's justification (comment at TRIALS), recomputed from the exact pmfs: the
    # chooser at 2 epsilon escapes the audit with probability below 1e-9.
    twice = 2 * AUDIT_EPSILON
    index = candidate_bounds(CAP).index(AUDIT_EVENT)
    p = _pmf(choice_scores(AUDIT_NEIGHBOUR, epsilon=twice, alpha=MEDIAN), twice, "permute_and_flip")
    q = _pmf(choice_scores(AUDIT_H, epsilon=twice, alpha=MEDIAN), twice, "permute_and_flip")
    escape = audit_escape_probability(float(p[index]), float(q[index]), TRIALS, AUDIT_EPSILON)
    assert escape < 1e-9
