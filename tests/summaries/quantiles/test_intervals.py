"""Quantile intervals in value units (issue 27): scores, sensitivity, privacy, coverage bound."""

from __future__ import annotations

import dataclasses
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from property_settings import fresh_examples

from beam_dp.mechanisms import InsecureRandomWarning, InsecureSeededRandom, selection_probabilities
from beam_dp.summaries.histogram import Grid
from beam_dp.summaries.quantiles import plan_quantiles, select_quantiles
from beam_dp.summaries.quantiles.intervals import (
    INTERVAL_METHOD,
    count_candidates,
    end_candidates,
    endpoint_scores,
    endpoint_sensitivity,
    intervals_for_plan,
    plan_intervals,
    quantile_interval,
    rank_shift,
    select_intervals,
    tighten,
)

pytestmark = pytest.mark.filterwarnings("ignore::beam_dp.mechanisms.InsecureRandomWarning")

GRIDS = {
    "uniform": Grid.uniform(0.0, 10.0, 11),
    # Bounds beyond the grid: values in [-2, 1) and (9, 12] fall in the under/overflow slots.
    "explicit": Grid.explicit([1.0, 2.0, 3.5, 5.0, 6.0, 9.0], -2.0, 12.0),
}


def _seeded(seed: int) -> InsecureSeededRandom:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureRandomWarning)
        return InsecureSeededRandom(seed)


def _brute_ranks(values: np.ndarray, grid: Grid, side: str) -> tuple[np.ndarray, ...]:
    """Each end's candidates and rank ranges, counted from the values (module docstring)."""
    data = np.clip(values, grid.lower, grid.upper)
    points = grid.points.tolist()
    if side == "lower":
        candidates = sorted({grid.lower, *points})
        low = np.array([np.sum(data < p) for p in candidates])
        high = np.append(low[1:], 0)
    else:
        candidates = sorted({*points, grid.upper})
        high = np.array([np.sum(data <= p) for p in candidates])
        low = np.insert(high[:-1], 0, 0)
    return np.array(candidates), low, high


def _scores(values: np.ndarray, grid: Grid, alpha: Fraction, shift: int, side: str) -> np.ndarray:
    _, low, high, total = end_candidates(grid.histogram(values).counts(), grid, side)  # type: ignore[arg-type]
    return endpoint_scores(low, high, total, alpha, shift, side)[0]  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- the scores


@pytest.mark.parametrize("side", ["lower", "upper"])
@pytest.mark.parametrize("name", sorted(GRIDS))
def test_candidates_and_their_ranks_match_counting_the_values(name: str, side: str) -> None:
    grid = GRIDS[name]
    rng = np.random.default_rng(4)
    values = np.concatenate([rng.uniform(-3, 13, 40), grid.points[[0, 2, 2, 3]]])
    candidates, low, high, total = end_candidates(grid.histogram(values).counts(), grid, side)  # type: ignore[arg-type]
    expected = _brute_ranks(values, grid, side)
    assert total == values.size
    assert grid.num_points <= candidates.size <= count_candidates(grid)
    np.testing.assert_array_equal(candidates, expected[0])
    # The first low and the last high are placeholders (open ranges); the rest are counts.
    np.testing.assert_array_equal(low[1:], expected[1][1:])
    np.testing.assert_array_equal(high[:-1], expected[2][:-1])


def _distance(target: float, low: float, high: float) -> float:
    return max(0.0, low - target, target - high)


@pytest.mark.parametrize("side", ["lower", "upper"])
@pytest.mark.parametrize("alpha", [Fraction(1, 2), Fraction(1, 3), Fraction(9, 10)])
def test_endpoint_scores_are_the_distance_to_each_candidates_rank_range(
    side: str, alpha: Fraction
) -> None:
    grid = GRIDS["explicit"]
    values = np.random.default_rng(5).uniform(-2, 12, 30)
    _, low, high, total = end_candidates(grid.histogram(values).counts(), grid, side)  # type: ignore[arg-type]
    shift = 4
    scores, common = endpoint_scores(low, high, total, alpha, shift, side)  # type: ignore[arg-type]
    assert common == alpha.denominator
    target = float(alpha) * total + (shift if side == "upper" else -shift)
    lows = [-math.inf, *low[1:].tolist()]
    highs = [*high[:-1].tolist(), math.inf]
    expected = [-_distance(target, a, b) for a, b in zip(lows, highs, strict=True)]
    np.testing.assert_allclose(scores / common, expected, atol=1e-9)
    assert scores.max() == 0  # some candidate's range always holds the target


# ----------------------------------------------------------------------------- sensitivity


def _neighbours(
    data: st.DataObject, relation: str, k: int, pool: list[float]
) -> tuple[np.ndarray, np.ndarray]:
    base = data.draw(st.lists(st.sampled_from(pool), max_size=25), label="base")
    unit = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=k), label="unit")
    if relation == "add_remove":
        return np.array(base + unit), np.array(base, dtype=np.float64)
    other = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=k), label="other")
    return np.array(base + unit), np.array(base + other)


@pytest.mark.parametrize("relation", ["add_remove", "replace"])
@fresh_examples(150)
@given(data=st.data())
def test_endpoint_scores_move_by_at_most_their_sensitivity(
    relation: str, data: st.DataObject
) -> None:
    """Brute force on neighbours: both ends, grids with and without under/overflow."""
    grid = GRIDS[data.draw(st.sampled_from(sorted(GRIDS)), label="grid")]
    k = data.draw(st.integers(1, 3), label="k")
    alpha = data.draw(
        st.sampled_from([Fraction(1, 2), Fraction(1, 4), Fraction(2, 3), Fraction(19, 20)]),
        label="alpha",
    )
    shift = data.draw(st.integers(0, 30), label="shift")
    side = data.draw(st.sampled_from(["lower", "upper"]), label="side")
    pool = [*grid.points.tolist(), grid.lower, grid.upper, -5.0, 0.3, 4.4, 9.5, 15.0]
    x, y = _neighbours(data, relation, k, pool)
    bound = endpoint_sensitivity(alpha, relation, k) * alpha.denominator  # type: ignore[arg-type]
    scores = [_scores(v, grid, alpha, shift, side) for v in (x, y)]
    assert int(np.abs(scores[0] - scores[1]).max()) <= bound


@pytest.mark.parametrize("relation", ["add_remove", "replace"])
def test_the_sensitivity_is_reached(relation: str) -> None:
    """The bound is not loose: some neighbour moves some score by all of it."""
    grid = GRIDS["uniform"]
    alpha, k = Fraction(1, 4), 2
    bound = endpoint_sensitivity(alpha, relation, k) * alpha.denominator  # type: ignore[arg-type]
    rng = np.random.default_rng(6)
    worst = 0
    for _ in range(300):
        base = rng.choice(grid.points, size=int(rng.integers(0, 20)))
        unit = rng.choice(grid.points, size=k)
        other = rng.choice(grid.points, size=k)
        y = base if relation == "add_remove" else np.concatenate([base, other])
        for side in ("lower", "upper"):
            s = [_scores(v, grid, alpha, 3, side) for v in (np.concatenate([base, unit]), y)]
            worst = max(worst, int(np.abs(s[0] - s[1]).max()))
    assert worst == bound


# ----------------------------------------------------------------------------- privacy, exactly


def _end_probabilities(values: np.ndarray, grid: Grid, plan, alpha_index: int) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    """The exact law of both ends' choices (float pmfs of the exact samplers)."""
    alpha = plan.distinct[alpha_index]
    laws = []
    for side in ("lower", "upper"):
        _, low, high, total = end_candidates(grid.histogram(values).counts(), grid, side)
        scores, common = endpoint_scores(low, high, total, alpha, plan.shifts[alpha_index], side)
        laws.append(
            selection_probabilities(
                scores,
                epsilon=plan.selection_epsilon,
                sensitivity=plan.sensitivities[alpha_index] * common,
                method=plan.method,
            )
        )
    return laws


@pytest.mark.parametrize("method", ["permute_and_flip", "exponential"])
@pytest.mark.parametrize("relation", ["add_remove", "replace"])
def test_the_intervals_cost_at_most_their_epsilon(relation: str, method: str) -> None:
    """Exact pmfs on random neighbours: every joint outcome of all the ends (independent given
    the data) has probability ratio at most exp(epsilon), and the audit sees a loss."""
    grid = GRIDS["explicit"]
    epsilon = 1.2
    plan = plan_intervals([0.3, 0.5], grid=grid, epsilon=epsilon, relation=relation, method=method)
    rng = np.random.default_rng(7)
    pool = np.concatenate([grid.points, [-2.0, 12.0, 0.5, 7.7]])
    worst = 0.0
    for _ in range(60):
        base = rng.choice(pool, size=int(rng.integers(0, 12)))
        unit = rng.choice(pool, size=1)
        y = base if relation == "add_remove" else np.concatenate([base, rng.choice(pool, size=1)])
        x = np.concatenate([base, unit])
        loss = 0.0
        for index in range(len(plan.distinct)):
            for p, q in zip(
                _end_probabilities(x, grid, plan, index),
                _end_probabilities(y, grid, plan, index),
                strict=True,
            ):
                loss += float(np.abs(np.log(p) - np.log(q)).max())
        worst = max(worst, loss)
    assert worst <= epsilon + 1e-9
    assert worst > 0.2 * epsilon


# ----------------------------------------------------------------------------- coverage bound


def _gap_data(total: int, alpha: Fraction) -> np.ndarray:
    """The worst case: the values up to the quantile at 0, the rest at the top of the grid,
    so that every point in between has the quantile's rank (about ``s`` from the target)."""
    below = math.ceil(alpha * total)
    return np.array([0.0] * below + [199.0] * (total - below))


@pytest.mark.parametrize("method", ["permute_and_flip", "exponential"])
@pytest.mark.parametrize("relation", ["add_remove", "replace"])
def test_an_end_fails_with_at_most_its_share_of_the_failure_probability(
    relation: str, method: str
) -> None:
    """The coverage proof, checked on the worst data with exact pmfs: the lower end lands
    above the quantile with probability <= beta / 2, and the bound is nearly reached (the
    ``ln(n - 1)`` is needed)."""
    grid = Grid.uniform(0.0, 199.0, 200)
    alpha = Fraction(1, 2)
    plan = plan_intervals(
        [alpha], grid=grid, epsilon=0.5, relation=relation, method=method, confidence=0.9
    )
    values = _gap_data(101, alpha)
    quantile = float(np.sort(values)[math.ceil(alpha * values.size) - 1])
    candidates = end_candidates(grid.histogram(values).counts(), grid, "lower")[0]
    lower_law, _ = _end_probabilities(values, grid, plan, 0)
    bad = float(lower_law[candidates > quantile].sum())
    share = 0.1 / 2
    assert bad <= share
    assert bad > share / 3  # without the ln(n - 1) term it would not hold
    smaller = dataclasses.replace(plan, shifts=(plan.shifts[0] // 2,))
    lower_law, _ = _end_probabilities(values, grid, smaller, 0)
    assert float(lower_law[candidates > quantile].sum()) > share


def test_rank_shift_follows_its_formula() -> None:
    eps, delta, beta = Fraction(1, 4), Fraction(1, 2), 0.0125
    pf = rank_shift(1001, eps, delta, beta, "permute_and_flip")
    em = rank_shift(1001, eps, delta, beta, "exponential")
    assert pf == math.ceil(2 * 0.5 * math.log(500 / beta) / 0.25)
    assert em == math.ceil(2 * 0.5 * math.log(1000 / beta) / 0.25)
    assert rank_shift(1, eps, delta, beta) == 0  # one candidate: nothing can be bad
    assert rank_shift(1001, 2 * eps, delta, beta) < pf < rank_shift(4001, eps, delta, beta)


# ----------------------------------------------------------------------------- the release


def test_a_huge_epsilon_brackets_the_quantile_at_exactly_s_ranks() -> None:
    grid = Grid.uniform(0.0, 100.0, 101)
    values = np.arange(100, dtype=np.float64)  # one value per grid point 0..99
    plan = plan_intervals([0.5], grid=grid, epsilon=1e6)
    s = plan.shifts[0]
    assert s >= 1
    release = select_intervals(grid.histogram(values), grid, plan, [50.0], rng=_seeded(1))
    ((lower, upper),) = release.bounds
    # Point j stands for the ranks [j, j + 1] at both ends: rank 50 - s is in the ranges of
    # points 49 - s and 50 - s, rank 50 + s in those of 49 + s and 50 + s.
    assert s == 1 and lower in (48.0, 49.0) and upper in (50.0, 51.0)
    assert release.method == INTERVAL_METHOD and release.rounds == 2 and not release.secure


def test_intervals_read_the_plans_relation_bounds_and_method() -> None:
    grid = GRIDS["uniform"]
    plan = plan_quantiles(
        [0.25, 0.75, 0.25],
        epsilon=1.0,
        num_candidates=grid.num_points,
        relation="replace",
        max_contributions=2,
        max_partitions=3,
        method="exponential",
    )
    intervals = intervals_for_plan(plan, grid, epsilon=0.5)
    assert intervals.quantiles == plan.quantiles and intervals.distinct == plan.distinct
    assert intervals.relation == "replace" and intervals.method == "exponential"
    assert intervals.sensitivities == (Fraction(6), Fraction(6))  # k * partitions under replace
    assert intervals.selection_epsilon == Fraction(1, 8) and intervals.rounds == 4
    added = plan_intervals([0.25], grid=grid, epsilon=0.5, max_contributions=2)
    assert added.sensitivities == (Fraction(3, 2),)


def test_each_requested_quantile_gets_an_interval_holding_its_released_value() -> None:
    grid = Grid.uniform(0.0, 100.0, 201)
    rng = np.random.default_rng(8)
    values = rng.normal(50, 15, 500)
    histogram = grid.histogram(values)
    plan = plan_quantiles([0.75, 0.25, 0.5, 0.25], epsilon=1.0, num_candidates=grid.num_points)
    source = _seeded(2)
    selection = select_quantiles(histogram, grid, plan, rng=source)
    release = select_intervals(
        histogram, grid, intervals_for_plan(plan, grid, epsilon=1.0), selection.values, rng=source
    )
    assert [item.alpha for item in release.intervals] == list(plan.quantiles)
    for item, value in zip(release.intervals, selection.values, strict=True):
        assert item.value == value and item.lower <= value <= item.upper
    assert release.intervals[1] == release.intervals[3]
    lowers = [release.intervals[i].lower for i in (1, 2, 0)]
    uppers = [release.intervals[i].upper for i in (1, 2, 0)]
    assert lowers == sorted(lowers) and uppers == sorted(uppers)


def test_tighten_raises_lower_ends_and_lowers_upper_ends_across_sorted_quantiles() -> None:
    lowers, uppers = tighten([3.0, 1.0, 4.0], [9.0, 12.0, 10.0])
    assert lowers == (3.0, 3.0, 4.0)
    assert uppers == (9.0, 10.0, 10.0)
    with pytest.raises(ValueError, match="one length"):
        tighten([1.0], [])


def test_a_released_value_outside_the_bracket_widens_it() -> None:
    grid = Grid.uniform(0.0, 100.0, 101)
    values = np.full(200, 30.0)
    release = quantile_interval(
        grid.histogram(values), grid, alpha=0.5, value=90.0, epsilon=1e6, rng=_seeded(3)
    )
    ((lower, upper),) = release.bounds
    assert lower <= 30.0 and upper == 90.0


def test_empty_data_gives_a_wide_interval_without_an_error() -> None:
    grid = GRIDS["explicit"]
    release = quantile_interval(
        grid.histogram([]), grid, alpha=0.5, value=5.0, epsilon=50.0, rng=_seeded(4)
    )
    ((lower, upper),) = release.bounds
    assert lower <= 1.0 and upper >= 9.0


def test_the_default_randomness_is_the_os_csprng() -> None:
    grid = GRIDS["uniform"]
    release = quantile_interval(grid.histogram([1.0, 2.0]), grid, alpha=0.5, value=1.0, epsilon=1)
    assert release.secure


# ----------------------------------------------------------------------------- fail closed


def test_parameters_are_checked_before_any_data() -> None:
    grid = GRIDS["uniform"]
    with pytest.raises(ValueError, match="'epsilon' must be > 0"):
        plan_intervals([0.5], grid=grid, epsilon=0.0)
    with pytest.raises(ValueError, match="'epsilon' must be > 0"):
        plan_intervals([0.5], grid=grid, epsilon=math.nan)
    with pytest.raises(ValueError, match="'confidence'"):
        plan_intervals([0.5], grid=grid, epsilon=1.0, confidence=1.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'relations'"):
        plan_intervals([0.5], grid=grid, epsilon=1.0, relations="replace")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="'quantiles\\[0\\]'"):
        plan_intervals([1.5], grid=grid, epsilon=1.0)
    with pytest.raises(TypeError, match="'grid' must be a Grid"):
        plan_intervals([0.5], grid=[0.0, 1.0], epsilon=1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'plan' must be a QuantilePlan"):
        intervals_for_plan("plan", grid, epsilon=1.0)  # type: ignore[arg-type]


def test_release_inputs_are_checked() -> None:
    grid = GRIDS["uniform"]
    histogram = grid.histogram([1.0, 2.0, 3.0])
    plan = plan_intervals([0.5, 0.9], grid=grid, epsilon=1.0)
    with pytest.raises(ValueError, match="one released value per quantile"):
        select_intervals(histogram, grid, plan, [1.0])
    with pytest.raises(ValueError, match="'values\\[1\\]' must be a released value inside"):
        select_intervals(histogram, grid, plan, [1.0, math.nan])
    with pytest.raises(ValueError, match="inside the grid's bounds"):
        select_intervals(histogram, grid, plan, [1.0, 11.0])
    with pytest.raises(TypeError, match="'values\\[0\\]' must be a real number"):
        select_intervals(histogram, grid, plan, ["1", 2.0])  # type: ignore[list-item]
    other = Grid.uniform(0.0, 10.0, 21)
    with pytest.raises(ValueError, match="interval plan was made for 11"):
        select_intervals(other.histogram([1.0]), other, plan, [1.0, 2.0])
    with pytest.raises(ValueError, match="slots"):
        select_intervals(np.zeros(5, dtype=np.int64), grid, plan, [1.0, 2.0])


def test_an_end_inside_a_block_of_ties_is_the_tied_value() -> None:
    """Hours worked, most of them 40: both ends fall in the block, and the interval is [40, 40]
    (a closed grid cell around the block would make it [39, 41])."""
    grid = Grid.uniform(0.0, 100.0, 101)
    values = np.concatenate([np.full(600, 40.0), np.arange(100.0), np.full(300, 45.0)])
    release = quantile_interval(
        grid.histogram(values), grid, alpha=0.5, value=40.0, epsilon=1e4, rng=_seeded(5)
    )
    assert release.bounds == ((40.0, 40.0),)


def test_intervals_without_a_point_are_not_widened() -> None:
    grid = Grid.uniform(0.0, 100.0, 101)
    histogram = grid.histogram(np.arange(100.0))
    plan = plan_intervals([0.2, 0.5], grid=grid, epsilon=1e6)
    release = select_intervals(histogram, grid, plan, None, rng=_seeded(6))
    assert [item.value for item in release.intervals] == [None, None]
    (low_20, high_20), (low_50, high_50) = release.bounds
    assert 18.0 <= low_20 <= 19.0 and 20.0 <= high_20 <= 21.0
    assert 48.0 <= low_50 <= 49.0 and 50.0 <= high_50 <= 51.0
