"""Quantiles next to large blocks of tied values (issue 22, item 4): each released value is
within its stated rank bound of the truth.

The shape of the report: hours worked, 28 500 rows, 54% of them 40, the value 35 at the ranks
21.1%-27.1% and 38 from 29.3%. Quartiles on a grid at resolution 1 released 38 for the
0.25-quantile in every run, about 1 200 ranks from the truth, far beyond the stated bound: the
median's selection lands inside the block of 40s, and the block was shared half and half
between the two branches, so the left branch held 60% of the rows where it should hold 50%,
and its own median sat at 30% instead of 25%.

Each test counts, over many releases on the same data, how often every released quantile's
rank range ``[#(x < v), #(x <= v)]`` is within its stated ``rank_error`` of ``alpha N``. The
data put every quantile's target on a grid point and the median's target on one of the cuts a
tied block can take (``tie_parts``), so the grid adds nothing and the stated bound is the
whole guarantee: with the stated confidence (95%) all of a release's bounds hold together. The
check is exact binomial at a false-positive rate of 1e-6 (tests/stats_helpers.py).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats
from stats_helpers import FPR

from beam_dp.summaries.histogram import Grid
from beam_dp.summaries.quantiles import plan_quantiles, select_quantiles

CONFIDENCE = 0.95
RELEASES = 40
GRID = Grid.uniform(0.0, 100.0, 101)  # resolution 1: the integer values are grid points


def hours() -> dict[int, int]:
    """28 500 rows: 40 holds ranks 9 450-24 810 (33.2%-87.1%), 35 holds 6 014-7 724
    (21.1%-27.1%), 38 starts at 8 351 (29.3%); the rest spread over 1-34 and 41-99."""
    counts: dict[int, int] = {}
    for value in range(1, 35):  # 6 014 rows below 35
        counts[value] = 6014 // 34 + (1 if value <= 6014 % 34 else 0)
    counts.update({35: 1710, 36: 285, 37: 342, 38: 550, 39: 549, 40: 15_360})
    for value in range(41, 100):  # 3 690 rows above 40
        counts[value] = 3690 // 59 + (1 if value - 40 <= 3690 % 59 else 0)
    return counts


def mirrored() -> dict[int, int]:
    """The same shape upside down (``v -> 100 - v``): the 0.75-quantile is inside the block of
    65s, just above the large block of 60s."""
    return {100 - value: count for value, count in hours().items()}


def around_a_pair() -> dict[int, int]:
    """28 000 rows for six quantiles ``i / 7``, which the joint split selects two at a time
    first (2/7 and 5/7): 40 holds ranks 4 920-19 000, so 2/7 (rank 8 000) is inside the block
    and 1/7 (rank 4 000) is below it; 5/7 (rank 20 000) starts the value 43."""
    counts = {value: 4920 // 39 + (1 if value <= 4920 % 39 else 0) for value in range(1, 40)}
    counts.update({40: 14_080, 41: 500, 42: 500})
    for value in range(43, 100):  # 8 000 rows
        counts[value] = 8000 // 57 + (1 if value - 42 <= 8000 % 57 else 0)
    return counts


QUARTILES = [0.25, 0.5, 0.75]
SEVENTHS = [float(Fraction(i, 7)) for i in range(1, 7)]
#: (data, quantiles, the quantiles whose selections cut the data for later ones)
CASES = {
    "hours": (hours, QUARTILES, [0.5]),
    "mirrored": (mirrored, QUARTILES, [0.5]),
    "around_a_pair": (around_a_pair, SEVENTHS, [SEVENTHS[1], SEVENTHS[4]]),
}


def values_of(counts: dict[int, int]) -> np.ndarray:
    return np.repeat(np.array(list(counts), dtype=float), list(counts.values()))


def rank_gaps(values: np.ndarray, quantiles: list[float], released: tuple[float, ...]) -> list:
    """Distance from ``alpha N`` to each released value's rank range ``[#(x < v), #(x <= v)]``."""
    ordered = np.sort(values)
    n = ordered.size
    gaps = []
    for alpha, value in zip(quantiles, released, strict=True):
        below = int(np.searchsorted(ordered, value, side="left"))
        at_or_below = int(np.searchsorted(ordered, value, side="right"))
        target = Fraction(alpha).limit_denominator(1000) * n  # the plan reads 2/7, not the float
        gaps.append(max(Fraction(0), below - target, target - at_or_below))
    return gaps


def covered_releases(
    counts: dict[int, int], quantiles: list[float], epsilon: float, releases: int = RELEASES
) -> tuple[int, list[tuple[float, ...]]]:
    values = values_of(counts)
    plan = plan_quantiles(
        quantiles, epsilon=epsilon, num_candidates=GRID.num_points, confidence=CONFIDENCE
    )
    histogram = GRID.histogram(values)
    covered, outputs = 0, []
    for _ in range(releases):
        selection = select_quantiles(histogram, GRID, plan)
        gaps = rank_gaps(values, quantiles, selection.values)
        covered += all(g <= b for g, b in zip(gaps, selection.rank_errors, strict=True))
        outputs.append(selection.values)
    return covered, outputs


def holds_at_confidence(covered: int, releases: int) -> bool:
    """False only if ``covered`` is below what coverage ``CONFIDENCE`` gives w.p. ``FPR``."""
    return bool(stats.binom.cdf(covered, releases, CONFIDENCE) >= FPR)


def test_the_hours_data_have_the_reported_shape() -> None:
    counts = hours()
    values = values_of(counts)
    assert values.size == 28_500 and counts[40] / values.size > 0.53
    assert ((values < 40).sum(), (values < 38).sum(), (values < 35).sum()) == (9450, 8351, 6014)
    truth = [35.0, 40.0, 40.0]
    assert rank_gaps(values, QUARTILES, tuple(truth)) == [0, 0, 0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_targets_are_grid_points_and_cuts(case: str) -> None:
    """What makes the stated bound the whole guarantee on these data (see the module): the
    values are grid points, and every target of a selection with later selections below it is
    the position of a cut (a grid point's ``k / Q`` share of its ties)."""
    data, quantiles, cutting = CASES[case]
    counts = data()
    values = np.sort(values_of(counts))
    plan = plan_quantiles(quantiles, epsilon=1, num_candidates=GRID.num_points)
    parts = plan.tie_parts
    assert all(float(v) in GRID.points for v in counts)
    cut_targets = [
        node.alpha if node.second_alpha is None else a
        for node in plan.nodes
        if node.cuts
        for a in ((node.alpha,) if node.second_alpha is None else (node.alpha, node.second_alpha))
    ]
    assert sorted(cut_targets) == sorted(Fraction(q).limit_denominator(100) for q in cutting)
    for alpha in cut_targets:
        target = alpha * values.size
        value = values[min(int(target), values.size - 1)]
        below = int(np.searchsorted(values, value, side="left"))
        tied = counts[int(value)]
        assert ((target - below) * parts / tied).denominator == 1


@pytest.mark.parametrize("case", sorted(CASES))
def test_quantiles_next_to_a_large_tie_block_are_within_their_bounds(case: str) -> None:
    data, quantiles, _ = CASES[case]
    covered, outputs = covered_releases(data(), quantiles, epsilon=1.0)
    assert holds_at_confidence(covered, RELEASES), (covered, outputs[:5])


@pytest.mark.parametrize(("case", "position", "truth"), [("hours", 0, 35.0), ("mirrored", 2, 65.0)])
def test_the_reported_value_is_gone(case: str, position: int, truth: float) -> None:
    """The 0.25-quantile was 38 in 10 of 10 runs (truth 35); at the report's epsilon the bias
    dwarfs the noise, so the truth comes out nearly always."""
    data, quantiles, _ = CASES[case]
    _, outputs = covered_releases(data(), quantiles, epsilon=1.0, releases=20)
    hits = sum(out[position] == truth for out in outputs)
    assert stats.binom.cdf(hits, 20, CONFIDENCE) >= FPR, outputs[:5]
