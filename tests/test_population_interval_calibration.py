"""Population quantile intervals (issue 27, optional field): the stated 95% holds for the
population's quantile, over the sample and the mechanism.

Each release draws a fresh i.i.d. sample from a known population (continuous, integer-tied,
heavy-tailed, bimodal), releases the quantiles (one selection, or the default joint split) and
their population intervals at a share of epsilon, and counts how often every interval holds the
population quantile ``inf{x : F(x) >= alpha}``. Exact binomial check at ``FPR`` (1e-6), as in
tests/test_interval_calibration.py. Running this file as a script prints the table recorded in
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest
from scipy import optimize, stats
from test_interval_calibration import (
    GRIDS,
    bimodal,
    continuous,
    heavy_tailed,
    holds_at_confidence,
    integer_tied,
)

from beam_dp.mechanisms import InsecureRandomWarning, InsecureSeededRandom
from beam_dp.summaries.quantiles import plan_quantiles, select_quantiles
from beam_dp.summaries.quantiles.intervals import intervals_for_plan, select_intervals
from beam_dp.summaries.quantiles.population_intervals import (
    population_intervals_for_plan,
    select_population_intervals,
)

pytestmark = pytest.mark.filterwarnings("ignore::beam_dp.mechanisms.InsecureRandomWarning")

Data = Callable[[np.random.Generator, int], npt.NDArray[np.float64]]


def _mixture_quantile(alpha: float) -> float:
    def cdf(x: float) -> float:
        return float(0.5 * stats.norm.cdf(x, 20, 3) + 0.5 * stats.norm.cdf(x, 80, 3) - alpha)

    return float(optimize.brentq(cdf, -100.0, 200.0, xtol=1e-12))


#: ``inf{x : F(x) >= alpha}`` of each population (the samplers of the other calibration file).
POPULATION: dict[str, Callable[[float], float]] = {
    "continuous": lambda a: float(stats.norm.ppf(a, 30, 12)),
    "integer_tied": lambda a: float(stats.poisson.ppf(a, 4.0)),
    "heavy_tailed": lambda a: float(stats.lognorm.ppf(a, 2.0)),
    "bimodal": _mixture_quantile,
}


@dataclass(frozen=True)
class Coverage:
    case: str
    data: str
    relation: str
    covered: int
    releases: int
    median_width: float


def _seeded(seed: int) -> InsecureSeededRandom:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureRandomWarning)
        return InsecureSeededRandom(seed)


def coverage(
    data: Data,
    quantiles: list[float],
    relation: str,
    *,
    rows: int,
    releases: int,
    seed: int,
    epsilon: Fraction = Fraction(2),
    sample_only: bool = False,
) -> Coverage:
    """How often every population interval of a release holds its population quantile.

    ``sample_only`` releases the intervals for the data's own quantiles instead (a control:
    they are not meant to hold the population's).
    """
    grid = GRIDS[data.__name__]
    share = epsilon / 2
    plan = plan_quantiles(
        quantiles,
        epsilon=epsilon - share,
        num_candidates=grid.num_points,
        relation=relation,  # type: ignore[arg-type]
    )
    if sample_only:
        own = intervals_for_plan(plan, grid, epsilon=share)
    else:
        population = population_intervals_for_plan(plan, grid, epsilon=share)
    targets = {q: POPULATION[data.__name__](q) for q in quantiles}
    data_rng = np.random.default_rng(seed)
    source = _seeded(seed)
    covered = 0
    widths = []
    for _ in range(releases):
        histogram = grid.histogram(data(data_rng, rows))
        values = select_quantiles(histogram, grid, plan, rng=source).values
        release = (
            select_intervals(histogram, grid, own, values, rng=source)
            if sample_only
            else select_population_intervals(histogram, grid, population, values, rng=source)
        )
        covered += all(
            item.lower <= targets[float(item.alpha)] <= item.upper for item in release.intervals
        )
        widths.append(float(np.mean([item.width for item in release.intervals])))
    name = "median" if quantiles == [0.5] else f"quantiles {quantiles}"
    return Coverage(name, data.__name__, relation, covered, releases, float(np.median(widths)))


DATA = [continuous, integer_tied, heavy_tailed, bimodal]


@pytest.mark.parametrize("relation", ["add_remove", "replace"])
@pytest.mark.parametrize("data", DATA)
def test_a_population_interval_holds_the_population_median(data: Data, relation: str) -> None:
    result = coverage(data, [0.5], relation, rows=400, releases=120, seed=11)
    assert holds_at_confidence(result.covered, result.releases), result


@pytest.mark.parametrize("data", [continuous, bimodal])
def test_population_intervals_hold_the_quartiles_at_once(data: Data) -> None:
    result = coverage(
        data, [0.25, 0.5, 0.75], "add_remove", rows=3000, releases=60, seed=12, epsilon=Fraction(6)
    )
    assert holds_at_confidence(result.covered, result.releases), result


def test_the_check_rejects_the_data_quantiles_interval_as_a_population_interval() -> None:
    """The control: at a large epsilon the interval for the data's own median is narrow, and
    misses the population median about as often as the sample median misses it by more."""
    result = coverage(
        continuous,
        [0.5],
        "replace",
        rows=400,
        releases=80,
        seed=13,
        epsilon=Fraction(400),
        sample_only=True,
    )
    assert not holds_at_confidence(result.covered, result.releases), result


def main() -> None:  # pragma: no cover - prints the RESULTS.md table
    rows = [
        *(
            coverage(d, [0.5], r, rows=400, releases=300, seed=11)
            for r in ("add_remove", "replace")
            for d in DATA
        ),
        *(
            coverage(
                d,
                [0.25, 0.5, 0.75],
                "add_remove",
                rows=3000,
                releases=150,
                seed=12,
                epsilon=Fraction(6),
            )
            for d in DATA
        ),
    ]
    print("| release | population | relation | observed coverage | releases | median width |")
    print("|---|---|---|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row.case} | {row.data} | {row.relation} | {row.covered / row.releases:.3f} | "
            f"{row.releases} | {row.median_width:.3g} |"
        )


if __name__ == "__main__":  # pragma: no cover
    main()
