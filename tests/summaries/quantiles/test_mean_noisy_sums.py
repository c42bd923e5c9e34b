"""The default private mean: noisy centred sum and count (exact discrete Laplace), issue 38.

Its sensitivities in integer steps, the exact law of its noise, the coverage of its stated
accuracy on small counts (exact binomial), and the options that choose it.
"""

from __future__ import annotations

import warnings
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy import stats
from stats_helpers import FPR, chi_square_pvalue

from beam_dp import PrivateMean
from beam_dp.mechanisms import InsecureSeededRandom
from beam_dp.mechanisms.noise import discrete_laplace_tail, noisy_sum_and_count
from beam_dp.summaries.histogram import ExactSum, Grid
from beam_dp.summaries.quantiles.mean import (
    MEAN_SUM_STEPS,
    _centred_steps,
    plan_mean,
    release_noisy_mean,
)

LOWER, UPPER = 0.0, 10.0
GRID = Grid.uniform(LOWER, UPPER, 11)


def _seeded(seed: int) -> InsecureSeededRandom:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InsecureSeededRandom(seed)


def _steps(values: list[float]) -> int:
    plan = plan_mean(GRID, epsilon=1.0)
    return _centred_steps(ExactSum(LOWER, UPPER).add(values), plan.step)


# ------------------------------------------------------------------------ sensitivities


@pytest.mark.parametrize("k", [1, 3])
def test_adding_a_unit_moves_the_centred_sum_by_at_most_its_declared_steps(k: int) -> None:
    plan = plan_mean(GRID, epsilon=1.0, max_contributions=k)
    assert plan.sum_sensitivity == k * MEAN_SUM_STEPS // 2 and plan.count_sensitivity == k
    rng = np.random.default_rng(k)
    worst = 0
    for _ in range(50):
        background = list(rng.uniform(LOWER, UPPER, rng.integers(0, 30)))
        base = _steps(background)
        for end in (LOWER, UPPER, 3.3):
            for added in range(1, k + 1):
                worst = max(worst, abs(_steps(background + [end] * added) - base))
    assert worst == plan.sum_sensitivity  # reached: k values at an end


def test_replacing_a_unit_moves_the_centred_sum_by_at_most_its_declared_steps() -> None:
    k = 2
    plan = plan_mean(GRID, epsilon=1.0, relation="replace", n=40, max_contributions=k)
    assert plan.sum_sensitivity == k * MEAN_SUM_STEPS
    rng = np.random.default_rng(5)
    worst = 0
    for _ in range(50):
        background = list(rng.uniform(LOWER, UPPER, 38))
        for before, after in (([LOWER] * k, [UPPER] * k), ([UPPER], [LOWER, LOWER]), ([], [0.1])):
            worst = max(worst, abs(_steps(background + after) - _steps(background + before)))
    assert worst == plan.sum_sensitivity


# ------------------------------------------------------------------------ the exact law


def _laplace_pmf(scale: Fraction, support: np.ndarray) -> np.ndarray:
    a = np.exp(-1.0 / float(scale))
    return (1 - a) / (1 + a) * a ** np.abs(support)


@pytest.mark.slow
def test_the_sum_and_the_count_draw_their_discrete_laplace_laws() -> None:
    source = _seeded(3)
    share, epsilon = Fraction(3, 5), Fraction(1)
    draws = [
        noisy_sum_and_count(
            100,
            20,
            epsilon=epsilon,
            sum_share=share,
            sum_sensitivity=2,
            count_sensitivity=1,
            rng=source,
        )
        for _ in range(4000)
    ]
    sums = np.array([s for s, _ in draws]) - 100
    counts = np.array([c for _, c in draws]) - 20
    for noise, scale in ((sums, 2 / (share * epsilon)), (counts, 1 / ((1 - share) * epsilon))):
        support = np.arange(-60, 61)
        observed = np.array([np.count_nonzero(noise == z) for z in support])
        assert observed.sum() == noise.size  # nothing beyond +/- 60 at these scales
        assert chi_square_pvalue(observed, _laplace_pmf(scale, support)) > FPR


def test_the_stated_tail_is_the_smallest_integer_that_holds() -> None:
    for scale in (Fraction(1, 3), Fraction(7, 2), Fraction(40)):
        for confidence in (0.9, 0.95, 0.999):
            t = discrete_laplace_tail(scale, confidence)
            a = np.exp(-1.0 / float(scale))
            assert 2 * a ** (t + 1) / (1 + a) <= 1 - confidence
            assert t == 0 or 2 * a**t / (1 + a) > 1 - confidence


# ------------------------------------------------------------------------ the statement


def _coverage(options: dict[str, Any], values: np.ndarray, trials: int, seed: int) -> int:
    """How many of ``trials`` releases of the transform's spec lie within its statement."""
    transform = PrivateMean.Globally(
        value_column="v", unit_column="u", lower=LOWER, upper=UPPER, rng=_seeded(seed), **options
    )
    spec = transform._spec
    summary = ExactSum(LOWER, UPPER).add(values)
    truth = float(np.mean(np.clip(values, LOWER, UPPER)))
    covered = 0
    for _ in range(trials):
        release = spec.release_merged(summary)
        bounds = release.statement.bounds
        if "count_error" in bounds:
            assert values.size > bounds["count_error"]  # a small count the statement covers
            stated = bounds["sum_error"] / (values.size - bounds["count_error"])
        else:
            stated = bounds["value_error"]
        covered += abs(release.value - truth) <= stated
    return covered


COVERAGE_CASES = {
    # few values, all far from the middle: the count's noise weighs most
    "add_remove, 25 values, k 1": ({"epsilon": 1.0}, np.full(25, 9.0)),
    "add_remove, 60 values, sum share 0.9": ({"epsilon": 1.0, "sum_share": 0.9}, np.full(60, 9.0)),
    "add_remove, 40 values, k 2, eps 2": (
        {"epsilon": 2.0, "max_contributions": 2},
        np.linspace(0.5, 9.5, 40),
    ),
    "replace, n 25": ({"epsilon": 0.5, "relation": "replace", "n": 25}, np.full(25, 9.0)),
}


@pytest.mark.parametrize("case", sorted(COVERAGE_CASES))
def test_the_stated_95_percent_bound_covers_at_least_95_percent_of_releases(case: str) -> None:
    options, values = COVERAGE_CASES[case]
    trials = 600
    covered = _coverage(options, values, trials, seed=len(case))
    # exact binomial: coverage >= 0.95 is not rejected at FPR (one-sided)
    assert stats.binom.cdf(covered, trials, 0.95) > FPR, (case, covered)


# ------------------------------------------------------------------------ the options


def test_the_noisy_sums_mean_is_the_default_and_the_selection_stays_reachable() -> None:
    common: dict[str, Any] = {"value_column": "v", "unit_column": "u", "lower": 0, "upper": 1}
    assert PrivateMean.Globally(epsilon=1.0, **common).mechanism == "laplace"
    selection = PrivateMean.Globally(epsilon=1.0, estimator="selection", **common)
    assert selection.mechanism == "permute_and_flip"
    with pytest.raises(ValueError, match="'estimator'"):
        PrivateMean.Globally(epsilon=1.0, estimator="median", **common)
    with pytest.raises(ValueError, match="'sum_share'"):
        PrivateMean.Globally(epsilon=1.0, relation="replace", n=5, sum_share=0.5, **common)
    with pytest.raises(ValueError, match="'sum_share'"):
        PrivateMean.Globally(epsilon=1.0, sum_share=1.5, **common)
    with pytest.raises(ValueError, match="'sum_share'"):
        PrivateMean.Globally(epsilon=1.0, estimator="selection", sum_share=0.5, **common)


def test_a_release_is_clamped_and_never_fails_on_the_data() -> None:
    plan = plan_mean(GRID, epsilon=0.01)
    for values in ([], [UPPER], [LOWER] * 3):
        summary = ExactSum(LOWER, UPPER).add(values)
        for seed in range(20):
            released = release_noisy_mean(summary, plan, rng=_seeded(seed))
            assert LOWER <= released.value <= UPPER


def test_under_zcdp_the_noisy_mean_and_its_bound_choice_pay_the_pure_rate() -> None:
    from beam_dp.accounting import PrivacyBudget

    budget = PrivacyBudget(10.0, delta=1e-6, composition="zcdp")
    share = budget.spend("m", mechanism="laplace", epsilon=0.8, rounds=1)
    transform = PrivateMean.Globally(
        lower=0.0,
        upper=10.0,
        unit_column="user",
        epsilon=share,
        method="exponential",  # the choice still runs a pure mechanism: one rate for both
        max_contributions="auto",
    )
    auto = transform._spec.auto
    assert auto is not None and auto.statistic_rho is not None
    assert auto.method == "permute_and_flip"
    rho = Fraction(transform._spec.rho)  # type: ignore[arg-type]
    statistic = Fraction(1, 2) * auto.statistic_epsilon**2  # pure epsilon-DP: epsilon^2 / 2
    choice = Fraction(1, 2) * auto.choice_epsilon**2
    assert auto.statistic_rho == statistic
    assert statistic + choice <= rho
    wrong = PrivacyBudget(1.0).spend("p", mechanism="permute_and_flip", epsilon=0.5, rounds=1)
    with pytest.raises(ValueError, match="'laplace'"):
        PrivateMean.Globally(lower=0.0, upper=1.0, unit_column="user", epsilon=wrong)
