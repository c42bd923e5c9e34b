"""Quantile intervals (issue 27): the stated 95% holds, for the data's own quantiles.

Each case makes many releases with the pure functions (no pipeline), on fresh data every time:
the quantile release (one selection, or the default joint split for several quantiles), then
its intervals at the default share of epsilon
(:data:`~beam_dp.summaries.quantiles.intervals.DEFAULT_INTERVAL_FRACTION`), and counts how
often every interval of a release contains all of its data quantile: every value whose rank
range holds ``alpha N`` in the bounded data. The check is the exact binomial one of
tests/test_accuracy_calibration.py: it fails only if the count is below what a true coverage
of exactly 95% gives with probability ``FPR`` (1e-6). Running this file as a script
(``python tests/test_interval_calibration.py``) prints the table recorded in
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats
from stats_helpers import FPR

from beam_dp.mechanisms import InsecureRandomWarning, InsecureSeededRandom
from beam_dp.summaries.histogram import Grid
from beam_dp.summaries.quantiles import plan_quantiles, select_quantiles
from beam_dp.summaries.quantiles.intervals import (
    DEFAULT_INTERVAL_FRACTION,
    IntervalPlan,
    intervals_for_plan,
    select_intervals,
)

pytestmark = pytest.mark.filterwarnings("ignore::beam_dp.mechanisms.InsecureRandomWarning")

CONFIDENCE = 0.95
EPSILON = Fraction(1)
Data = Callable[[np.random.Generator, int], npt.NDArray[np.float64]]


def _seeded(seed: int) -> InsecureSeededRandom:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureRandomWarning)
        return InsecureSeededRandom(seed)


def holds_at_confidence(covered: int, releases: int, confidence: float = CONFIDENCE) -> bool:
    """False only if ``covered`` is below what coverage ``confidence`` gives w.p. ``FPR``."""
    return bool(stats.binom.cdf(covered, releases, confidence) >= FPR)


# ----------------------------------------------------------------------------- data sets

UNIFORM = Grid.uniform(0.0, 100.0, 201)  # 0.5 apart: integers are grid points
LOG = Grid.log(0.01, 1000.0, 200)


def continuous(rng: np.random.Generator, rows: int) -> npt.NDArray[np.float64]:
    """No ties: N(30, 12) on [0, 100]."""
    return np.asarray(rng.normal(30.0, 12.0, rows), dtype=np.float64)


def integer_tied(rng: np.random.Generator, rows: int) -> npt.NDArray[np.float64]:
    """Integer minutes ~ Poisson(4): a fifth of the rows share the median's value."""
    return rng.poisson(4.0, rows).astype(np.float64)


def heavy_tailed(rng: np.random.Generator, rows: int) -> npt.NDArray[np.float64]:
    """Lognormal(0, 2) on [0.01, 1000] (a log grid): a tail over five decades."""
    return np.asarray(rng.lognormal(0.0, 2.0, rows), dtype=np.float64)


def bimodal(rng: np.random.Generator, rows: int) -> npt.NDArray[np.float64]:
    """Two modes, N(20, 3) and N(80, 3), half each: the median falls in the empty gap."""
    half = rows // 2
    return np.concatenate([rng.normal(20.0, 3.0, half), rng.normal(80.0, 3.0, rows - half)])


GRIDS: dict[str, Grid] = {
    "continuous": UNIFORM,
    "integer_tied": UNIFORM,
    "heavy_tailed": LOG,
    "bimodal": UNIFORM,
}


def quantile_set(values: npt.NDArray[np.float64], alpha: Fraction) -> tuple[float, float]:
    """``[x_(ceil(alpha N)), x_(floor(alpha N) + 1)]``: the values whose rank range holds
    ``alpha N`` (1-based order statistics of the sorted, bounded values)."""
    n = values.size
    target = alpha * n
    return float(values[math.ceil(target) - 1]), float(values[math.floor(target)])


@dataclass(frozen=True)
class Coverage:
    case: str
    data: str
    relation: str
    covered: int
    releases: int
    #: Median over releases of the interval's width in ranks (mean over its quantiles).
    rank_width: float


def coverage(
    data: Data,
    quantiles: list[float],
    relation: str,
    *,
    rows: int,
    releases: int,
    seed: int = 0,
    epsilon: Fraction = EPSILON,
    max_contributions: int = 1,
    max_partitions: int = 1,
    shrink: Callable[[IntervalPlan], IntervalPlan] | None = None,
) -> Coverage:
    """How often every interval of a release holds all of its data quantile."""
    grid = GRIDS[data.__name__]
    share = epsilon * DEFAULT_INTERVAL_FRACTION
    options = {"relation": relation, "max_contributions": max_contributions}
    plan = plan_quantiles(
        quantiles,
        epsilon=epsilon - share,
        num_candidates=grid.num_points,
        max_partitions=max_partitions,
        **options,  # type: ignore[arg-type]
    )
    intervals = intervals_for_plan(plan, grid, epsilon=share, confidence=CONFIDENCE)
    if shrink is not None:
        intervals = shrink(intervals)
    data_rng = np.random.default_rng(seed)
    source = _seeded(seed)
    covered = 0
    widths = []
    for _ in range(releases):
        values = np.sort(grid.prepare(data(data_rng, rows)))
        histogram = grid.histogram(values)
        selection = select_quantiles(histogram, grid, plan, rng=source)
        release = select_intervals(histogram, grid, intervals, selection.values, rng=source)
        ok = True
        width = []
        for item in release.intervals:
            low, high = quantile_set(values, item.alpha)
            ok &= item.lower <= low and high <= item.upper
            ranks = np.searchsorted(values, [item.lower, item.upper], side="left")
            width.append(float(ranks[1] - ranks[0]))
        covered += ok
        widths.append(float(np.mean(width)))
    name = "median" if quantiles == [0.5] else f"quantiles {quantiles}"
    if plan.split == "joint":
        name += " (joint split)"
    return Coverage(name, data.__name__, relation, covered, releases, float(np.median(widths)))


DATA = [continuous, integer_tied, heavy_tailed, bimodal]
QUARTILES = [0.25, 0.5, 0.75]


@pytest.mark.parametrize("relation", ["add_remove", "replace"])
@pytest.mark.parametrize("data", DATA)
def test_one_quantiles_interval_holds_it_at_the_stated_confidence(
    data: Data, relation: str
) -> None:
    result = coverage(data, [0.5], relation, rows=300, releases=150, seed=1)
    assert holds_at_confidence(result.covered, result.releases), result


@pytest.mark.parametrize("relation", ["add_remove", "replace"])
@pytest.mark.parametrize("data", DATA)
def test_several_quantiles_intervals_hold_them_all_at_once(data: Data, relation: str) -> None:
    """The default joint split for the quartiles, and their six interval ends."""
    result = coverage(
        data, QUARTILES, relation, rows=3000, releases=80, seed=2, epsilon=Fraction(3)
    )
    assert holds_at_confidence(result.covered, result.releases), result


def test_per_key_bounds_keep_the_coverage() -> None:
    """Two values per unit and two keys per unit (the per-key release's sensitivities)."""
    result = coverage(
        integer_tied,
        [0.9],
        "add_remove",
        rows=2000,
        releases=100,
        seed=3,
        max_contributions=2,
        max_partitions=2,
    )
    assert holds_at_confidence(result.covered, result.releases), result


def test_the_check_rejects_intervals_without_the_shift() -> None:
    """The calibration has teeth: aimed at the quantile itself (shift 0), the ends miss it
    about half the time each, and the binomial check says so."""
    for data in (continuous, bimodal):
        result = coverage(
            data,
            [0.5],
            "add_remove",
            rows=300,
            releases=40,
            seed=4,
            shrink=lambda plan: dataclasses.replace(plan, shifts=(0,) * len(plan.shifts)),
        )
        assert not holds_at_confidence(result.covered, result.releases), result


def main() -> None:  # pragma: no cover - prints the RESULTS.md table
    rows = [
        *(
            coverage(d, [0.5], r, rows=300, releases=300, seed=1)
            for r in ("add_remove", "replace")
            for d in DATA
        ),
        *(
            coverage(d, QUARTILES, r, rows=3000, releases=150, seed=2, epsilon=Fraction(3))
            for r in ("add_remove", "replace")
            for d in DATA
        ),
    ]
    print("| release | data | relation | observed coverage | releases | median rank width |")
    print("|---|---|---|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row.case} | {row.data} | {row.relation} | {row.covered / row.releases:.3f} | "
            f"{row.releases} | {row.rank_width:.0f} |"
        )


if __name__ == "__main__":  # pragma: no cover
    main()
