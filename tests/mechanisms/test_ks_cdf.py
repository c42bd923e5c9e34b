"""The KS synthetic-sample mechanism: exact law, privacy on neighbours, audit, accuracy, API."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from audit_power import audit_escape_probability
from hypothesis import given, settings
from hypothesis import strategies as st
from stats_helpers import FPR, audited_epsilon_lower_bound, chi_square_pvalue

from beam_dp.mechanisms import InsecureRandomWarning, InsecureSeededRandom, SecureRandom
from beam_dp.mechanisms.cdf import (
    MAX_CELLS,
    KSMechanism,
    cumulative_counts_from_slots,
    ks_accuracy_bound,
    ks_deviation,
    ks_pmf_bruteforce,
    ks_suggested_k,
    sample_ks_synthetic,
)
from beam_dp.mechanisms.cdf.bands import points_from_path
from beam_dp.mechanisms.cdf.ks import Sampler
from beam_dp.mechanisms.cdf.plan import PlanOptions
from beam_dp.summaries.histogram import Grid


def _counts(values: tuple[int, ...] | list[int], m: int) -> list[int]:
    """Cumulative counts N_i = #(x <= i) of grid indices."""
    per_point = [0] * m
    for v in values:
        per_point[v] += 1
    return list(itertools.accumulate(per_point))


# ------------------------------------------------------------------ the exact law

# (name, cumulative counts, k, epsilon, relation, n_public, max_contributions)
CASES = {
    "replace": ([1, 3, 3, 7, 10], 3, 1.0, "replace", None, 1),
    "add_remove_count_below_n": ([1, 3, 3, 7, 10], 3, 1.0, "add_remove", 8, 1),
    "add_remove_count_above_n_c2": ([0, 2, 5, 5, 6], 3, 2.0, "add_remove", 9, 2),
    "replace_six_points": ([0, 1, 4, 4, 9, 12], 3, 0.7, "replace", None, 1),
    "replace_many_points_each": ([2, 2, 5], 6, 1.5, "replace", None, 1),
}
# Planner settings change the cost, never the law: big strides (eight band counts, so blocks
# span several breakpoints and rounds are rejected), an early tail (the all-paths block may
# take half of the proposal) and a single band count (almost everything is in one block).
# One round per draw in the last three: the rounds a draw runs after the accepted one are
# discarded, so the default (many) rounds only add time.
PLANS = {
    "default": PlanOptions(),
    "big_strides": PlanOptions(band_counts=8, rounds=1),
    "early_tail": PlanOptions(tail_bits=1, rounds=1),
    "one_count": PlanOptions(band_counts=1, rounds=1),
}
DRAWS = 8_000


def _mechanism(case: str) -> tuple[list[int], KSMechanism]:
    counts, k, epsilon, relation, n_public, c = CASES[case]
    mechanism = KSMechanism(
        k=k,
        epsilon=epsilon,  # type: ignore[arg-type]
        relation=relation,  # type: ignore[arg-type]
        n_public=n_public,
        max_contributions=c,
    )
    return counts, mechanism


def _pmf(case: str) -> dict[tuple[int, ...], float]:
    counts, k, epsilon, relation, n_public, c = CASES[case]
    return ks_pmf_bruteforce(
        counts,
        k=k,
        epsilon=epsilon,
        relation=relation,
        n_public=n_public,
        max_contributions=c,
    )


def _goodness_of_fit(case: str, draws: list[tuple[int, ...]]) -> float:
    pmf = _pmf(case)
    support = sorted(pmf)
    index = {z: i for i, z in enumerate(support)}
    observed = np.zeros(len(support), dtype=np.int64)
    for z in draws:
        observed[index[z]] += 1
    return chi_square_pvalue(observed, np.array([pmf[z] for z in support]))


# Every case under the default plan, and every other plan on one or two cases (the one-count
# plan rejects most rounds, each after a geometric draw, so it gets fewer draws).
PAIRS = [(case, "default") for case in sorted(CASES)] + [
    ("add_remove_count_above_n_c2", "big_strides"),
    ("replace_six_points", "big_strides"),
    ("add_remove_count_above_n_c2", "early_tail"),
    ("replace_six_points", "early_tail"),
    ("replace_six_points", "one_count"),
]


@pytest.mark.parametrize(("case", "plan"), PAIRS)
def test_sampler_draws_the_brute_force_law(case: str, plan: str) -> None:
    counts, mechanism = _mechanism(case)
    sampler = Sampler(counts, mechanism, PLANS[plan])
    source = SecureRandom()
    draws = [
        points_from_path(sampler.draw(source))
        for _ in range(DRAWS // 4 if plan == "one_count" else DRAWS)
    ]
    assert _goodness_of_fit(case, draws) > FPR


@pytest.mark.parametrize("plan", ["default", "big_strides"])
def test_deviation_law_on_a_problem_too_big_to_list(plan: str) -> None:
    # m = 40, k = 12: C(51, 12) ~ 1.6e11 multisets, 239 breakpoints; blocks span several
    # breakpoints, so rounds are rejected. The exact law of D from the band counts:
    # P(D = b_j) ∝ (A(b_j) - A(b_{j-1})) exp(-γ (b_j - D_min)).
    rng = np.random.default_rng(3)
    values = np.clip((rng.lognormal(0.0, 0.7, 300) * 8).astype(int), 0, 39)
    counts = [int(c) for c in np.cumsum(np.bincount(values, minlength=40))]
    mechanism = KSMechanism(k=12, epsilon=Fraction(1), relation="replace")
    sampler = Sampler(counts, mechanism, PLANS[plan])
    assert any(b.end is not None and b.level > b.start for b in sampler.blocks)
    every = sampler.bands.breakpoints()
    levels = [int(b) for b in every if b >= sampler.minimum]
    sizes = [sampler.bands.count(level) for level in levels]
    shells = np.diff(np.array([0, *sizes], dtype=np.float64))
    gamma = float(mechanism.gamma)
    law = shells * np.exp(-gamma * (np.array(levels, dtype=np.float64) - levels[0]))
    law /= law.sum()
    index = {level: i for i, level in enumerate(levels)}
    observed = np.zeros(len(levels), dtype=np.int64)
    source = SecureRandom()
    for _ in range(3_000):
        observed[index[sampler.bands.deviation(sampler.draw(source))]] += 1
    assert chi_square_pvalue(observed, law) > FPR


def test_public_function_draws_the_brute_force_law() -> None:
    counts, k, epsilon, relation, n_public, c = CASES["add_remove_count_below_n"]
    draws = [
        sample_ks_synthetic(
            counts,
            k=k,
            epsilon=epsilon,
            relation=relation,
            n_public=n_public,
            max_contributions=c,
        )
        for _ in range(1_500)
    ]
    assert all(len(z) == k and list(z) == sorted(z) for z in draws)
    assert _goodness_of_fit("add_remove_count_below_n", draws) > FPR


@pytest.mark.parametrize("plan", sorted(PLANS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_blocks_partition_the_levels_with_valid_envelopes(case: str, plan: str) -> None:
    counts, mechanism = _mechanism(case)
    sampler = Sampler(counts, mechanism, PLANS[plan])
    scale = mechanism.normaliser(counts)
    deviations = [
        ks_deviation(counts, z, k=mechanism.k, n_hat=scale)
        for z in itertools.combinations_with_replacement(range(len(counts)), mechanism.k)
    ]
    assert sampler.minimum == min(deviations)
    blocks = sampler.blocks
    assert blocks[0].start == sampler.minimum
    assert blocks[-1].end is None and blocks[-1].count == len(deviations)
    for before, after in itertools.pairwise(blocks):
        assert before.end == after.start
    for block in blocks:
        # the envelope is the exact size of a band that holds every level of the block
        assert block.count == sum(d <= block.level for d in deviations)
        if block.end is not None:
            assert block.start <= block.level < block.end
            assert not any(block.level < d < block.end for d in deviations)


# ------------------------------------------------------------------ privacy


@st.composite
def _neighbours(draw: st.DrawFn) -> tuple[list[int], list[int], int, str, int | None, int]:
    m = draw(st.integers(1, 4))
    k = draw(st.integers(1, 3))
    c = draw(st.integers(1, 2))
    relation = draw(st.sampled_from(["replace", "add_remove"]))
    values = draw(st.lists(st.integers(0, m - 1), min_size=0, max_size=7))
    changed = draw(st.lists(st.integers(0, m - 1), min_size=1, max_size=c))
    if relation == "replace":
        keep = draw(st.lists(st.integers(0, m - 1), min_size=len(changed), max_size=len(changed)))
        x = values + changed
        neighbour = values + keep
        n_public = None
    else:
        x = values + changed
        neighbour = values
        n_public = draw(st.integers(0, 10))
    return _counts(x, m), _counts(neighbour, m), k, relation, n_public, c


@settings(max_examples=120, deadline=None)
@given(_neighbours(), st.sampled_from([0.1, 1.0, 3.0]))
def test_no_release_loses_more_than_epsilon_on_neighbours(
    pair: tuple[list[int], list[int], int, str, int | None, int], epsilon: float
) -> None:
    x, neighbour, k, relation, n_public, c = pair
    kwargs = {
        "k": k,
        "epsilon": epsilon,
        "relation": relation,
        "n_public": n_public,
        "max_contributions": c,
    }
    p = ks_pmf_bruteforce(x, **kwargs)  # type: ignore[arg-type]
    q = ks_pmf_bruteforce(neighbour, **kwargs)  # type: ignore[arg-type]
    worst = max(abs(math.log(p[z] / q[z])) for z in p)
    assert worst <= epsilon + 1e-9


@settings(max_examples=120, deadline=None)
@given(_neighbours())
def test_deviation_moves_by_at_most_the_sensitivity(
    pair: tuple[list[int], list[int], int, str, int | None, int],
) -> None:
    x, neighbour, k, relation, n_public, c = pair
    mechanism = KSMechanism(
        k=k,
        epsilon=Fraction(1),
        relation=relation,  # type: ignore[arg-type]
        n_public=n_public,
        max_contributions=c,
    )
    scale = mechanism.normaliser(x) if relation == "add_remove" else x[-1]
    for z in itertools.combinations_with_replacement(range(len(x)), k):
        change = ks_deviation(x, z, k=k, n_hat=scale) - ks_deviation(neighbour, z, k=k, n_hat=scale)
        assert abs(change) <= mechanism.sensitivity == c * k


def test_the_sensitivity_is_attained() -> None:
    # The bound c * k is tight: moving one record changes a deviation by exactly k.
    x, neighbour = _counts([0, 0, 4], 5), _counts([0, 0, 0], 5)
    change = ks_deviation(x, (4,), k=1, n_hat=3) - ks_deviation(neighbour, (4,), k=1, n_hat=3)
    assert abs(change) == 1


# The audited pairs: the neighbour and the event that a sampler calibrated at 2 * epsilon
# gives away most clearly (found by listing small configurations); m = 5, k = 1.
# Power at AUDIT_TRIALS = 3 000: under the sampler at 2 * epsilon the event has exact
# probabilities (brute-force pmf) 0.3512 / 0.00982 (log ratio 3.58) under replace and
# 0.4399 / 0.01418 (3.43) under add_remove; the probability that the audit's lower bound stays
# <= epsilon, summed exactly over both binomial hit counts with the Clopper-Pearson bounds of
# audited_epsilon_lower_bound, is 5.3e-11 (replace) and 1.0e-13 (add_remove), so the
# 2-epsilon mutant is caught except with probability far below the 1e-6 bar (6 000 trials,
# the former count, gave 1e-35 and 1e-42: excess power, at twice the draws). The honest
# test's false-positive rate is <= FPR at any count.
AUDIT_EPSILON = 2.0
AUDIT_TRIALS = 3_000
AUDITS = {
    "replace": (_counts([0, 0, 4], 5), _counts([0, 0, 0], 5), None),
    "add_remove": (_counts([0, 1, 1, 3, 3], 5), _counts([1, 1, 3, 3], 5), 3),
}


def _audit(relation: str, epsilon: float) -> float:
    """The audited lower bound on the privacy loss of the event, from AUDIT_TRIALS draws each.

    Each dataset is planned once and drawn from many times (the planner is deterministic, so
    this is the law of repeated releases; the public function is tested on its own above).
    """
    x, neighbour, n_public = AUDITS[relation]
    kwargs = {"k": 1, "relation": relation, "n_public": n_public}
    calibrated_p = ks_pmf_bruteforce(x, epsilon=2 * AUDIT_EPSILON, **kwargs)  # type: ignore[arg-type]
    calibrated_q = ks_pmf_bruteforce(neighbour, epsilon=2 * AUDIT_EPSILON, **kwargs)  # type: ignore[arg-type]
    ratios = sorted(calibrated_p, key=lambda z: -calibrated_p[z] / calibrated_q[z])
    size = 1 if relation == "add_remove" else 4
    event = set(ratios[:size])
    mechanism = KSMechanism(k=1, epsilon=Fraction(epsilon), relation=relation, n_public=n_public)  # type: ignore[arg-type]
    source = SecureRandom()

    def hits(counts: list[int]) -> int:
        sampler = Sampler(counts, mechanism)
        return sum(points_from_path(sampler.draw(source)) in event for _ in range(AUDIT_TRIALS))

    return audited_epsilon_lower_bound(hits(x), hits(neighbour), AUDIT_TRIALS)


def test_the_audited_events_are_tight_enough() -> None:
    # The honest loss of each audited event is below epsilon, the calibrated one well above.
    for relation, (x, neighbour, n_public) in AUDITS.items():
        kwargs = {"k": 1, "relation": relation, "n_public": n_public}
        for epsilon, low, high in [(AUDIT_EPSILON, 1.2, 2.0), (2 * AUDIT_EPSILON, 3.0, 4.0)]:
            p = ks_pmf_bruteforce(x, epsilon=epsilon, **kwargs)  # type: ignore[arg-type]
            q = ks_pmf_bruteforce(neighbour, epsilon=epsilon, **kwargs)  # type: ignore[arg-type]
            best = max(math.log(p[z] / q[z]) for z in p)
            assert low < best <= high


@pytest.mark.slow
@pytest.mark.parametrize("relation", sorted(AUDITS))
def test_sampler_passes_the_audit(relation: str) -> None:
    assert _audit(relation, AUDIT_EPSILON) <= AUDIT_EPSILON


@pytest.mark.slow
@pytest.mark.parametrize("relation", sorted(AUDITS))
def test_audit_catches_a_sampler_at_twice_epsilon(relation: str) -> None:
    assert _audit(relation, 2 * AUDIT_EPSILON) > AUDIT_EPSILON


# ------------------------------------------------------------------ accuracy


@pytest.mark.parametrize(
    ("values", "m", "k", "epsilon"),
    [
        ([0, 1, 1, 2, 5, 5, 5, 6, 7, 7] * 3, 8, 3, 1.0),
        ([0] * 40 + [3] * 10, 4, 6, 0.5),
        ([2, 3], 5, 4, 2.0),
    ],
)
def test_accuracy_bound_holds_with_its_confidence(
    values: list[int], m: int, k: int, epsilon: float
) -> None:
    # Exactly: the probability (brute-force pmf) that the KS distance exceeds the bound.
    counts = _counts(values, m)
    n = counts[-1]
    bound = ks_accuracy_bound(m, k, epsilon=epsilon, n=n, confidence=0.95)
    pmf = ks_pmf_bruteforce(counts, k=k, epsilon=epsilon, relation="replace")
    exceed = sum(
        p for z, p in pmf.items() if Fraction(ks_deviation(counts, z, k=k, n_hat=n), k * n) > bound
    )
    assert exceed <= 0.05


def test_accuracy_bound_formula() -> None:
    m, k, n, epsilon = 1000, 100, 10**6, 1.0
    expected = 1 / 200 + 2 * (math.log(math.comb(m + k - 1, k)) + math.log(20)) / (epsilon * n)
    assert ks_accuracy_bound(m, k, epsilon=epsilon, n=n) == pytest.approx(expected, rel=1e-12)
    with_count = ks_accuracy_bound(m, k, epsilon=epsilon, n=n, count_error=50)
    assert with_count == pytest.approx(expected + 100 / n, rel=1e-12)
    assert ks_accuracy_bound(m, k, epsilon=epsilon, n=0) == 1.0
    assert ks_accuracy_bound(50, 10, epsilon=0.01, n=10) == 1.0  # capped


def test_large_n_release_is_within_the_bound() -> None:
    rng = np.random.default_rng(4)
    values = np.clip(np.round(rng.lognormal(0.0, 1.0, 20_000) * 10), 0, 199).astype(int)
    counts = _counts(list(values), 200)
    z = sample_ks_synthetic(counts, k=40, epsilon=1.0, relation="replace")
    distance = Fraction(ks_deviation(counts, z, k=40, n_hat=counts[-1]), 40 * counts[-1])
    # fails with probability <= 1e-6 by the utility guarantee at confidence 1 - 1e-6
    assert distance <= ks_accuracy_bound(200, 40, epsilon=1.0, n=counts[-1], confidence=1 - 1e-6)


# ------------------------------------------------------------------ scores and inputs


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda m: st.tuples(
            st.just(m),
            st.lists(st.integers(0, m - 1), max_size=9),
            st.lists(st.integers(0, m - 1), min_size=1, max_size=4),
            st.integers(0, 12),
        )
    )
)
def test_deviation_is_the_scaled_ks_distance(data: tuple[int, list[int], list[int], int]) -> None:
    m, values, points, n_hat = data
    counts = _counts(values, m)
    k = len(points)
    synthetic = _counts(points, m)
    ks = max((abs(Fraction(counts[i] * k - n_hat * synthetic[i])) for i in range(m - 1)), default=0)
    assert ks_deviation(counts, points, k=k, n_hat=n_hat) == ks
    if n_hat and values and n_hat == len(values):
        distance = max(
            (abs(Fraction(counts[i], n_hat) - Fraction(synthetic[i], k)) for i in range(m)),
            default=Fraction(0),
        )
        assert Fraction(ks, k * n_hat) == distance


def test_cumulative_counts_from_a_grid_histogram() -> None:
    grid = Grid.explicit([1.0, 2.0, 3.0], lower=0.0, upper=10.0)
    values = [0.5, 1.0, 1.5, 2.0, 2.0, 2.5, 3.0, 7.0]
    # x <= 1 (0.5 below the grid, 1.0); values in (1, 2] snap up to 2; above 3 snap to 3.
    assert cumulative_counts_from_slots(grid.histogram(values).counts()) == (2, 5, 8)
    with pytest.raises(ValueError, match="'slot_counts'"):
        cumulative_counts_from_slots([1, 2])


def test_trivial_problems_are_uniform() -> None:
    # One grid point: one multiset. No data or a zero count: every multiset scores the same.
    assert sample_ks_synthetic([5], k=3, epsilon=1.0, relation="replace") == (0, 0, 0)
    for counts, relation, n_public in [
        ([0, 0, 0], "replace", None),
        ([2, 4, 4], "add_remove", 0),
    ]:
        draws = [
            sample_ks_synthetic(counts, k=2, epsilon=1.0, relation=relation, n_public=n_public)
            for _ in range(3_000)
        ]
        support = list(itertools.combinations_with_replacement(range(3), 2))
        observed = np.array([sum(d == z for d in draws) for z in support])
        assert chi_square_pvalue(observed, np.full(len(support), 1 / len(support))) > FPR


def test_seeded_source_reproduces_a_release() -> None:
    counts = [3, 9, 9, 20, 31, 40]
    with pytest.warns(InsecureRandomWarning):
        first = sample_ks_synthetic(
            counts, k=7, epsilon=1.0, relation="replace", rng=InsecureSeededRandom(5)
        )
    with pytest.warns(InsecureRandomWarning):
        second = sample_ks_synthetic(
            counts, k=7, epsilon=1.0, relation="replace", rng=np.random.default_rng(5)
        )
    assert first == second


SECRET = 987_654


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"k": 0}, ValueError, "'k'"),
        ({"k": 2.5}, TypeError, "'k'"),
        ({"epsilon": float("nan")}, ValueError, "'epsilon'"),
        ({"epsilon": float("inf")}, ValueError, "'epsilon'"),
        ({"epsilon": 0.0}, ValueError, "'epsilon'"),
        ({"relation": "add-remove"}, ValueError, "'relation'"),
        ({"relation": "add_remove", "n_public": None}, ValueError, "'n_public'"),
        ({"relation": "add_remove", "n_public": -1}, ValueError, "'n_public'"),
        ({"relation": "add_remove", "n_public": True}, TypeError, "'n_public'"),
        ({"n_public": SECRET + 1}, ValueError, "'n_public'"),
        ({"max_contributions": 0}, ValueError, "'max_contributions'"),
        ({"counts": [SECRET, SECRET - 1]}, ValueError, "'cumulative_counts'"),
        ({"counts": [-SECRET, 0]}, ValueError, "'cumulative_counts'"),
        ({"counts": [0.5, SECRET]}, TypeError, "'cumulative_counts'"),
        ({"counts": [True, SECRET]}, TypeError, "'cumulative_counts'"),
        ({"counts": []}, ValueError, "'cumulative_counts'"),
        ({"counts": [[SECRET]]}, ValueError, "'cumulative_counts'"),
        ({"counts": "12"}, TypeError, "'cumulative_counts'"),
        ({"counts": list(range(MAX_CELLS // 100)), "k": 100}, ValueError, "grid size"),
    ],
)
def test_bad_parameters_fail_closed_without_showing_counts(
    kwargs: dict[str, object], error: type[Exception], fragment: str
) -> None:
    arguments: dict[str, object] = {"k": 2, "epsilon": 1.0, "relation": "replace"}
    arguments.update(kwargs)
    counts = arguments.pop("counts", [1, 5, SECRET])
    with pytest.raises(error) as raised:
        sample_ks_synthetic(counts, **arguments)  # type: ignore[arg-type]
    assert fragment in str(raised.value)
    assert str(SECRET) not in str(raised.value) and f"{SECRET:,}" not in str(raised.value)


def test_brute_force_refuses_large_problems() -> None:
    with pytest.raises(ValueError, match="small"):
        ks_pmf_bruteforce(list(range(60)), k=8, epsilon=1.0, relation="replace")


@pytest.mark.parametrize(
    ("m", "n", "epsilon"), [(1000, 10**3, 1.0), (50, 10**5, 0.3), (7, 40, 2.0)]
)
def test_suggested_k_minimises_the_bound(m: int, n: int, epsilon: float) -> None:
    k = ks_suggested_k(m, epsilon=epsilon, n=n)
    bounds = [ks_accuracy_bound(m, j, epsilon=epsilon, n=n) for j in range(1, 3 * k + 50)]
    assert bounds[k - 1] == min(bounds)
    assert ks_suggested_k(m, epsilon=epsilon, n=0) == 1
    assert ks_suggested_k(m, epsilon=epsilon, n=n, max_k=2) <= 2
    with pytest.raises(ValueError, match="'max_k'"):
        ks_suggested_k(m, epsilon=epsilon, n=n, max_k=0)


def test_the_audit_catches_twice_epsilon_with_overwhelming_power() -> None:
    # The trial count's justification (comment at AUDIT_TRIALS), recomputed: the sampler at
    # 2 * epsilon escapes the audit with probability below 1e-9 on both pairs.
    for relation, (x, neighbour, n_public) in AUDITS.items():
        kwargs = {"k": 1, "relation": relation, "n_public": n_public}
        p = ks_pmf_bruteforce(x, epsilon=2 * AUDIT_EPSILON, **kwargs)  # type: ignore[arg-type]
        q = ks_pmf_bruteforce(neighbour, epsilon=2 * AUDIT_EPSILON, **kwargs)  # type: ignore[arg-type]
        size = 1 if relation == "add_remove" else 4
        event = sorted(p, key=lambda z: -p[z] / q[z])[:size]
        escape = audit_escape_probability(
            sum(p[z] for z in event), sum(q[z] for z in event), AUDIT_TRIALS, AUDIT_EPSILON
        )
        assert escape < 1e-9
