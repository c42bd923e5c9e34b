"""Population quantile intervals (issue 27, optional field): ranks, sensitivity, privacy."""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from property_settings import fresh_examples
from scipy import stats

from beam_dp.mechanisms import InsecureRandomWarning, InsecureSeededRandom, selection_probabilities
from beam_dp.summaries.histogram import Grid
from beam_dp.summaries.quantiles import plan_quantiles
from beam_dp.summaries.quantiles.intervals import end_candidates, target_scores
from beam_dp.summaries.quantiles.population_intervals import (
    DEFAULT_COUNT_FRACTION,
    POPULATION_METHOD,
    _targets,
    plan_population_intervals,
    population_intervals_for_plan,
    population_targets,
    select_population_intervals,
)

pytestmark = pytest.mark.filterwarnings("ignore::beam_dp.mechanisms.InsecureRandomWarning")

GRID = Grid.explicit([1.0, 2.0, 3.5, 5.0, 6.0, 9.0], -2.0, 12.0)


def _seeded(seed: int) -> InsecureSeededRandom:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureRandomWarning)
        return InsecureSeededRandom(seed)


def _failure(n: int, alpha: float, target: int, side: str, plan, index: int) -> float:  # type: ignore[no-untyped-def]
    """The failure bound of an end aimed at ``target``, summed over every binomial outcome."""
    ranks = np.arange(n + 1)
    pmf = stats.binom.pmf(ranks, n, alpha)
    weight = (plan.num_candidates - 1) * (0.5 if plan.method == "permute_and_flip" else 1.0)
    rate = float(plan.selection_epsilon) / (2 * float(plan.sensitivities[index]))
    gaps = ranks - target if side == "lower" else target - ranks
    tail = np.where(gaps <= 0, 1.0, np.minimum(1.0, weight * np.exp(-rate * np.maximum(gaps, 0))))
    return float((pmf * tail).sum())


def _targets_of(n: int, plan, index: int = 0) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    return population_targets(
        n,
        plan.distinct[index],
        epsilon=plan.selection_epsilon,
        sensitivity=plan.sensitivities[index],
        num_candidates=plan.num_candidates,
        method=plan.method,
        failure_probability=plan.end_failure,
    )


@pytest.mark.parametrize("quantile", [0.5, 0.1, 0.75])
@pytest.mark.parametrize("n", [1, 7, 40, 151, 5000])
def test_targets_are_the_farthest_in_whose_failure_is_within_the_share(
    n: int, quantile: float
) -> None:
    """Sampling and privacy together: the end aimed at T fails with probability <= beta_e,
    and aiming one rank closer to the quantile would not keep that."""
    plan = plan_population_intervals([quantile], grid=GRID, epsilon=1.0, relation="replace")
    low, high = _targets_of(n, plan)
    beta = plan.end_failure
    assert _failure(n, quantile, low, "lower", plan, 0) <= beta
    assert _failure(n, quantile, low + 1, "lower", plan, 0) > beta
    assert _failure(n, quantile, high, "upper", plan, 0) <= beta
    assert _failure(n, quantile, high - 1, "upper", plan, 0) > beta
    assert low < quantile * n < high


def test_targets_grow_by_zero_or_one_with_the_sample() -> None:
    """What the add/remove targets need: w(n) moves by at most max(alpha, 1 - alpha)."""
    for quantile in (0.5, 0.05):
        plan = plan_population_intervals([quantile], grid=GRID, epsilon=1.0)
        targets = np.array([_targets_of(n, plan) for n in range(0, 1500)])
        steps = np.diff(targets, axis=0)
        assert set(np.unique(steps).tolist()) <= {0, 1}


def test_plans_split_epsilon_over_the_count_and_the_ends() -> None:
    added = plan_population_intervals([0.5, 0.9], grid=GRID, epsilon=1.0)
    assert added.count_epsilon == DEFAULT_COUNT_FRACTION
    assert added.selection_epsilon == (1 - DEFAULT_COUNT_FRACTION) / 4
    assert added.count_scale == 1 / DEFAULT_COUNT_FRACTION and added.rounds == 5
    # count error: scale ln(2 / beta), beta = 0.05 / 5 events (two ends each, the count)
    assert added.end_failure == pytest.approx(0.01)
    assert added.count_error == math.ceil(5 * math.log(2 / 0.01))
    replaced = plan_population_intervals([0.5], grid=GRID, epsilon=1.0, relation="replace")
    assert replaced.count_epsilon is None and replaced.count_error is None
    assert replaced.selection_epsilon == Fraction(1, 2) and replaced.rounds == 2
    assert replaced.end_failure == pytest.approx(0.025) and replaced.shifts == (None,)
    plan = plan_quantiles([0.3], epsilon=1.0, num_candidates=GRID.num_points, max_partitions=2)
    assert population_intervals_for_plan(plan, GRID, epsilon=1.0).count_scale == 2 / Fraction(1, 5)
    with pytest.raises(ValueError, match="'count_fraction'"):
        plan_population_intervals([0.5], grid=GRID, epsilon=1.0, count_fraction=1.0)
    with pytest.raises(TypeError, match="'plan' must be a QuantilePlan"):
        population_intervals_for_plan("plan", GRID, epsilon=1.0)  # type: ignore[arg-type]


def _scores(values: np.ndarray, plan, alpha_index: int, side: str, noisy: int | None):  # type: ignore[no-untyped-def]
    _, low, high, total = end_candidates(GRID.histogram(values).counts(), GRID, side)  # type: ignore[arg-type]
    alpha = plan.distinct[alpha_index]
    lower, upper, common = _targets(plan, alpha, plan.sensitivities[alpha_index], total, noisy)
    return target_scores(low, high, lower if side == "lower" else upper, common), common


@pytest.mark.parametrize("relation", ["add_remove", "replace"])
@fresh_examples(120)
@given(data=st.data())
def test_population_end_scores_move_by_at_most_their_sensitivity(
    relation: str, data: st.DataObject
) -> None:
    """Given the released count (public), neighbours move every score by at most Delta."""
    k = data.draw(st.integers(1, 3), label="k")
    quantile = data.draw(st.sampled_from([0.5, 0.25, 0.9]), label="alpha")
    plan = plan_population_intervals(
        [quantile], grid=GRID, epsilon=2.0, relation=relation, max_contributions=k
    )
    pool = [*GRID.points.tolist(), -2.0, 12.0, 0.5, 7.0, 20.0]
    base = data.draw(st.lists(st.sampled_from(pool), max_size=30), label="base")
    unit = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=k), label="unit")
    other = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=k), label="other")
    x = np.array(base + unit)
    y = np.array(base, dtype=np.float64) if relation == "add_remove" else np.array(base + other)
    noisy = None if relation == "replace" else data.draw(st.integers(-5, 40), label="count")
    side = data.draw(st.sampled_from(["lower", "upper"]), label="side")
    (sx, common), (sy, _) = (_scores(v, plan, 0, side, noisy) for v in (x, y))
    assert int(np.abs(sx - sy).max()) <= plan.sensitivities[0] * common


@pytest.mark.parametrize("relation", ["add_remove", "replace"])
def test_the_ends_cost_their_epsilon_given_the_count(relation: str) -> None:
    """Exact pmfs on random neighbours: the ends' losses add up to at most epsilon minus the
    count's share (the count itself is a discrete Laplace of sensitivity k)."""
    plan = plan_population_intervals([0.5, 0.2], grid=GRID, epsilon=1.5, relation=relation)
    ends = 2 * len(plan.distinct) * plan.selection_epsilon
    rng = np.random.default_rng(9)
    pool = np.concatenate([GRID.points, [-2.0, 12.0, 0.5, 7.7]])
    worst = 0.0
    for _ in range(40):
        base = rng.choice(pool, size=int(rng.integers(0, 15)))
        unit = rng.choice(pool, size=1)
        y = base if relation == "add_remove" else np.concatenate([base, rng.choice(pool, size=1)])
        noisy = None if relation == "replace" else int(rng.integers(0, 20))
        loss = 0.0
        for index in range(len(plan.distinct)):
            for side in ("lower", "upper"):
                laws = []
                for values in (np.concatenate([base, unit]), y):
                    scores, common = _scores(values, plan, index, side, noisy)
                    laws.append(
                        selection_probabilities(
                            scores,
                            epsilon=plan.selection_epsilon,
                            sensitivity=plan.sensitivities[index] * common,
                        )
                    )
                loss += float(np.abs(np.log(laws[0]) - np.log(laws[1])).max())
        worst = max(worst, loss)
    assert worst <= float(ends) + 1e-9
    assert worst > 0.2 * float(ends)


def test_a_population_release_records_its_method_and_holds_its_values() -> None:
    grid = Grid.uniform(0.0, 100.0, 201)
    values = np.random.default_rng(3).normal(50, 10, 2000)
    plan = plan_population_intervals([0.25, 0.5], grid=grid, epsilon=4.0)
    release = select_population_intervals(
        grid.histogram(values), grid, plan, [43.0, 50.0], rng=_seeded(1)
    )
    assert release.method == POPULATION_METHOD and release.rounds == 5
    (l25, h25), (l50, h50) = release.bounds
    assert l25 <= 43.0 <= h25 and l50 <= 50.0 <= h50 and l25 <= l50 and h25 <= h50
    # the population quartile and median of N(50, 10)
    assert l25 <= 50 - 6.745 <= h25 and l50 <= 50.0 <= h50
    empty = select_population_intervals(grid.histogram([]), grid, plan, None, rng=_seeded(2))
    assert empty.bounds[0][0] <= 10.0 and empty.bounds[0][1] >= 90.0
    other = Grid.uniform(0.0, 100.0, 101)
    with pytest.raises(ValueError, match="the plan was made for 201"):
        select_population_intervals(other.histogram([1.0]), other, plan, None)
