"""Quantile intervals in value units (issue 27) against PostRI and Drechsler et al.

Run from the repository root::

    PYTHONPATH=$PWD python -m benchmarks.quantile_intervals    # ~25 minutes on a loaded machine
    python -m benchmarks.quantile_intervals --quick            # seconds; the smoke test

``--only randomization|population`` runs one section. For every data set and epsilon,
``--runs`` fresh data sets (300) of ``--rows`` values (1000), integers in public bounds (values
recorded at a resolution: hundredths of a minute, whole hours, dollars), and on each the same
total epsilon for every method, 95% coverage.

**Randomization intervals** (the data's own median):

- **beam-dp** (``ours``): the median by :func:`~beam_dp.summaries.quantiles.select_quantiles`
  (permute-and-flip, resolution grid) at ``(1 - f) epsilon`` and its interval by
  :mod:`beam_dp.summaries.quantiles.intervals` at ``f epsilon``, for ``f = 1/2`` (the default
  share, PostRI's default split) and ``f = 1/3``, under replace; the whole epsilon on the
  interval with its midpoint as the point (Drechsler et al.'s budget); the default share under
  add/remove.
- **PostRI** (``benchmarks/postri.py``): the even split and the paper's optimal split.
- **Drechsler et al.** (``benchmarks/drechsler.py``): both ends at ``epsilon / 2``, the
  midpoint as the median.

The anchors use the data size (bounded DP), so the head-to-head is under replace. Reported per
method: the observed coverage of the data's own median (every value whose rank range holds
``N / 2``; for even ``N`` the whole closed interval between the two middle values), the median
interval width in value units, and the mean absolute error of the point estimate (distance to
that set of medians) with the interval's share spent and without it (the method's median at
the full epsilon; for Drechsler et al. their mechanism for the median at the full epsilon).

**Population intervals** (sampling and privacy error): beam-dp's
:mod:`beam_dp.summaries.quantiles.population_intervals` (half of epsilon, the median with the
other half; and the whole epsilon on the interval) against Drechsler et al.'s simultaneous
interval, coverage of the population median of each data set's generator.

The script prints Markdown tables and the verdict against the issue's goal; it never fails.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from beam_dp.mechanisms import InsecureRandomWarning, InsecureSeededRandom
from beam_dp.summaries.grids import resolution_grid
from beam_dp.summaries.histogram import Grid
from beam_dp.summaries.quantiles import QuantilePlan, plan_quantiles, select_quantiles
from beam_dp.summaries.quantiles.intervals import (
    DEFAULT_INTERVAL_FRACTION,
    intervals_for_plan,
    select_intervals,
)
from beam_dp.summaries.quantiles.population_intervals import (
    PopulationPlan,
    plan_population_intervals,
    population_intervals_for_plan,
    select_population_intervals,
)
from benchmarks.drechsler import drechsler_interval, drechsler_population_interval, em_quantile
from benchmarks.postri import postri, postri_median

IntArray = npt.NDArray[np.int64]
CONFIDENCE = 0.95


@dataclass(frozen=True)
class DataSet:
    name: str
    unit: str
    scale: float  # value units per integer step
    lower: int
    upper: int
    draw: Callable[[np.random.Generator, int], IntArray]
    #: ``inf{x : F(x) >= 1/2}`` of the population the values are drawn from (integer units).
    population_median: float


def _continuous(rng: np.random.Generator, n: int) -> IntArray:
    """Minutes ~ N(30, 12) recorded to the hundredth: integers in [0, 10 000]."""
    return np.clip(np.round(rng.normal(30.0, 12.0, n) * 100), 0, 10_000).astype(np.int64)


def _hours(rng: np.random.Generator, n: int) -> IntArray:
    """Hours worked per week: 54% at 40, 6% at 35, the rest spread over 1-99 (ties)."""
    values = np.array([*range(1, 35), 35, 36, 37, 38, 39, 40, *range(41, 100)])
    weights = np.array(
        [0.211 / 34] * 34 + [0.06, 0.01, 0.012, 0.02, 0.018, 0.54] + [0.129 / 59] * 59
    )
    return np.asarray(rng.choice(values, size=n, p=weights / weights.sum()), dtype=np.int64)


def _incomes(rng: np.random.Generator, n: int) -> IntArray:
    """Incomes in dollars ~ lognormal(10.5, 1): heavy right tail, bounds [0, 500 000]."""
    return np.clip(np.round(rng.lognormal(10.5, 1.0, n)), 0, 500_000).astype(np.int64)


def _bimodal(rng: np.random.Generator, n: int) -> IntArray:
    """Two modes with nothing between them, the median in the gap: bounds [0, 1000]."""
    low = rng.normal(250.0, 30.0, n // 2)
    high = rng.normal(750.0, 30.0, n - n // 2)
    return np.clip(np.round(np.concatenate([low, high])), 0, 1000).astype(np.int64)


DATASETS = (
    # N(30, 12) rounded to the hundredth: P(X < 2999.5 / 100) < 1/2 < P(X < 3000.5 / 100).
    DataSet("continuous (minutes, 0.01)", "min", 0.01, 0, 10_000, _continuous, 3000.0),
    DataSet("integer ties (hours)", "h", 1.0, 0, 100, _hours, 40.0),
    # lognormal(10.5, 1) rounded to the dollar: P(round(X) <= 36315) = P(X < 36315.5) >= 1/2.
    DataSet("heavy-tailed (income, $)", "$", 1.0, 0, 500_000, _incomes, 36315.0),
    DataSet("bimodal (gap at median)", "", 1.0, 0, 1000, _bimodal, 500.0),
)


def median_set(values: IntArray) -> tuple[float, float]:
    """The data's medians: ``[x_(ceil(N/2)), x_(floor(N/2) + 1)]`` (1-based order stats)."""
    ordered = np.sort(values)
    n = ordered.size
    return float(ordered[math.ceil(n / 2) - 1]), float(ordered[n // 2])


def distance(value: float, medians: tuple[float, float]) -> float:
    return max(0.0, medians[0] - value, value - medians[1])


@dataclass
class Tally:
    covered: int = 0
    widths: list[float] = field(default_factory=list)
    errors: list[float] = field(default_factory=list)
    errors_alone: list[float] = field(default_factory=list)

    def add(
        self, lower: float, upper: float, point: float, alone: float, medians: tuple[float, float]
    ) -> None:
        self.covered += lower <= medians[0] and medians[1] <= upper
        self.widths.append(upper - lower)
        self.errors.append(distance(point, medians))
        self.errors_alone.append(distance(alone, medians))


class Ours:
    """beam-dp's median and interval on a resolution grid of the data's integer units.

    ``fraction`` is the interval's share ``f``; with ``f = 1`` the whole epsilon goes to the
    interval and the point is its midpoint (the budget Drechsler et al. give their interval).
    """

    def __init__(self, data: DataSet, epsilon: float, fraction: Fraction, relation: str):
        self.grid: Grid = resolution_grid(data.lower, data.upper, 1)
        self.fraction = fraction
        share = Fraction(epsilon) * fraction
        options = {"relation": relation}
        self.alone = plan_quantiles(
            [0.5], epsilon=epsilon, num_candidates=self.grid.num_points, **options
        )
        self.plan = (
            plan_quantiles(
                [0.5],
                epsilon=Fraction(epsilon) - share,
                num_candidates=self.grid.num_points,
                **options,
            )
            if fraction < 1
            else self.alone
        )
        self.intervals = intervals_for_plan(self.plan, self.grid, epsilon=share)

    def run(
        self, values: IntArray, source: InsecureSeededRandom
    ) -> tuple[float, float, float, float]:
        histogram = self.grid.histogram(values)
        alone = select_quantiles(histogram, self.grid, self.alone, rng=source).values[0]
        if self.fraction < 1:
            median = select_quantiles(histogram, self.grid, self.plan, rng=source).values[0]
            release = select_intervals(histogram, self.grid, self.intervals, [median], rng=source)
            lower, upper = release.bounds[0]
            return lower, upper, median, alone
        release = select_intervals(histogram, self.grid, self.intervals, None, rng=source)
        lower, upper = release.bounds[0]
        return lower, upper, (lower + upper) / 2, alone


#: beam-dp's variants: (interval share, relation).
OURS = (
    (Fraction(1, 2), "replace"),
    (DEFAULT_INTERVAL_FRACTION, "replace"),  # 1/3, the transforms' default
    (Fraction(1), "replace"),
    (DEFAULT_INTERVAL_FRACTION, "add_remove"),
)


def _label(fraction: Fraction, relation: str) -> str:
    if fraction == 1:
        return f"ours, interval at the full ε, midpoint ({relation})"
    return f"ours, f = {fraction} ({relation})"


def methods(
    data: DataSet, epsilon: float
) -> dict[str, Callable[..., tuple[float, float, float, float]]]:
    table: dict[str, Callable[..., tuple[float, float, float, float]]] = {
        _label(f, relation): Ours(data, epsilon, f, relation).run for f, relation in OURS
    }

    def post(fraction: float | None) -> Callable[..., tuple[float, float, float, float]]:
        def run(values: IntArray, rng: np.random.Generator) -> tuple[float, float, float, float]:
            result = postri(
                values, data.lower, data.upper, epsilon=epsilon, median_fraction=fraction, rng=rng
            )
            alone = postri_median(values, data.lower, data.upper, epsilon=epsilon, rng=rng)
            return result.lower, result.upper, result.median, alone

        return run

    def drechsler(values: IntArray, rng: np.random.Generator) -> tuple[float, float, float, float]:
        result = drechsler_interval(
            values, data.lower, data.upper, epsilon=epsilon, beta=1 - CONFIDENCE, rng=rng
        )
        alone = em_quantile(
            values, data.lower, data.upper, 0.5, epsilon=epsilon, granularity=0.5, rng=rng
        )
        return result.lower, result.upper, result.median, alone

    table["PostRI, even split"] = post(0.5)
    table["PostRI, optimal split"] = post(None)
    table["Drechsler et al."] = drechsler
    return table


def run_cell(data: DataSet, epsilon: float, rows: int, runs: int, seed: int) -> dict[str, Tally]:
    table = methods(data, epsilon)
    tallies = {name: Tally() for name in table}
    data_rng = np.random.default_rng(seed)
    peer_rng = np.random.default_rng(seed + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureRandomWarning)
        source = InsecureSeededRandom(seed + 2)
    for _ in range(runs):
        values = data.draw(data_rng, rows)
        medians = median_set(values)
        for name, method in table.items():
            rng = source if name.startswith("ours") else peer_rng
            tallies[name].add(*method(values, rng), medians)
    return tallies


def _fmt(value: float, scale: float) -> str:
    scaled = value * scale
    return f"{scaled:,.3g}" if abs(scaled) < 1000 else f"{scaled:,.0f}"


def population_cell(
    data: DataSet, epsilon: float, rows: int, runs: int, seed: int
) -> dict[str, tuple[float, float, float]]:
    """Population median intervals at one total epsilon: ``(coverage, median width, mean
    error of the point)`` for beam-dp (median at ``epsilon / 2``, population interval at
    ``epsilon / 2``, replace and add/remove) and Drechsler et al.'s simultaneous interval
    (both ends at ``epsilon / 2``, the midpoint as the point; replace)."""
    grid = resolution_grid(data.lower, data.upper, 1)
    target = data.population_median
    ours: dict[str, tuple[QuantilePlan | None, PopulationPlan]] = {}
    for relation in ("replace", "add_remove"):
        plan = plan_quantiles(
            [0.5], epsilon=epsilon / 2, num_candidates=grid.num_points, relation=relation
        )
        ours[f"ours, f = 1/2 ({relation})"] = (
            plan,
            population_intervals_for_plan(plan, grid, epsilon=epsilon / 2),
        )
    ours["ours, interval at the full ε, midpoint (replace)"] = (
        None,
        plan_population_intervals([0.5], grid=grid, epsilon=epsilon, relation="replace"),
    )
    data_rng = np.random.default_rng(seed)
    peer_rng = np.random.default_rng(seed + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureRandomWarning)
        source = InsecureSeededRandom(seed + 2)
    results: dict[str, list[tuple[bool, float, float]]] = {name: [] for name in ours}
    results["Drechsler et al., simultaneous"] = []
    for _ in range(runs):
        values = data.draw(data_rng, rows)
        histogram = grid.histogram(values)
        for name, (plan, population) in ours.items():
            point = None if plan is None else select_quantiles(histogram, grid, plan, rng=source)
            released = None if point is None else point.values
            release = select_population_intervals(histogram, grid, population, released, rng=source)
            lower, upper = release.bounds[0]
            estimate = (lower + upper) / 2 if released is None else released[0]
            results[name].append((lower <= target <= upper, upper - lower, abs(estimate - target)))
        theirs = drechsler_population_interval(
            values, data.lower, data.upper, epsilon=epsilon, beta=1 - CONFIDENCE, rng=peer_rng
        )
        results["Drechsler et al., simultaneous"].append(
            (
                theirs.lower <= target <= theirs.upper,
                theirs.upper - theirs.lower,
                abs(theirs.median - target),
            )
        )
    return {
        name: (
            float(np.mean([r[0] for r in rows_])),
            float(np.median([r[1] for r in rows_])),
            float(np.mean([r[2] for r in rows_])),
        )
        for name, rows_ in results.items()
    }


def population_main(args: argparse.Namespace, datasets: Sequence[DataSet]) -> list[str]:
    lines = [
        "",
        "Population median (sampling and privacy error), same total ε, 95%:",
        "",
        "| data | ε | method | coverage of the population median | median width | "
        "mean error of the point |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for index, data in enumerate(datasets):
        for epsilon in args.epsilons:
            cell = population_cell(data, epsilon, args.rows, args.runs, args.seed + 11 * index)
            for name, (covered, width, error) in cell.items():
                lines.append(
                    f"| {data.name} | {epsilon:g} | {name} | {covered:.3f} | "
                    f"{_fmt(width, data.scale)} | {_fmt(error, data.scale)} |"
                )
    return lines


PEERS = ("PostRI, even split", "PostRI, optimal split")


def _paired(ours: Sequence[float], peer: Sequence[float]) -> tuple[float, float]:
    """Mean of ``ours - peer`` over the same data sets, and its standard error."""
    diff = np.asarray(ours, dtype=np.float64) - np.asarray(peer, dtype=np.float64)
    return float(diff.mean()), float(diff.std(ddof=1) / math.sqrt(diff.size))


def _verdict(mean: float, se: float) -> str:
    if mean <= 0:
        return "PASS"
    return "PASS (within 2 s.e.)" if mean <= 2 * se else "FAIL"


def main(argv: Sequence[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--quick", action="store_true", help="a few runs of two cells (smoke)")
    parser.add_argument(
        "--only",
        choices=["randomization", "population"],
        help="run one section (default: both)",
    )
    args = parser.parse_args(argv)
    datasets = DATASETS
    if args.quick:
        args.runs, args.rows, args.epsilons = 5, 200, [1.0]
        datasets = DATASETS[:2]
    lines = [
        f"rows = {args.rows}, runs = {args.runs} per cell, confidence {CONFIDENCE}, "
        f"default interval share f = {DEFAULT_INTERVAL_FRACTION}",
        "",
        "| data | ε | method | coverage | median width | mean median error (s.e.) | "
        "without the interval's share | width / PostRI's | error / PostRI's |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    verdicts: list[str] = []
    started = time.perf_counter()
    for index, data in enumerate(datasets if args.only != "population" else ()):
        for epsilon in args.epsilons:
            tallies = run_cell(data, epsilon, args.rows, args.runs, args.seed + 7 * index)
            peer = tallies[PEERS[0]]
            peer_width = statistics.median(peer.widths)
            peer_error = statistics.mean(peer.errors)
            for name, tally in tallies.items():
                width = statistics.median(tally.widths)
                error = statistics.mean(tally.errors)
                se = statistics.stdev(tally.errors) / math.sqrt(len(tally.errors))
                ratio_w = width / peer_width if peer_width > 0 else math.nan
                ratio_e = error / peer_error if peer_error > 0 else math.nan
                lines.append(
                    f"| {data.name} | {epsilon:g} | {name} | {tally.covered / args.runs:.3f} | "
                    f"{_fmt(width, data.scale)} | {_fmt(error, data.scale)} "
                    f"({_fmt(se, data.scale)}) | "
                    f"{_fmt(statistics.mean(tally.errors_alone), data.scale)} | "
                    f"{ratio_w:.2f} | {ratio_e:.2f} |"
                )
            cell = f"{data.name}, ε = {epsilon:g}"
            narrowest = min(statistics.median(tallies[p].widths) for p in PEERS)
            best = min(PEERS, key=lambda p: statistics.mean(tallies[p].errors))
            for fraction, relation in OURS:
                if fraction == 1 or relation != "replace":
                    continue
                tally = tallies[_label(fraction, relation)]
                width = statistics.median(tally.widths)
                mean, se = _paired(tally.errors, tallies[best].errors)
                verdicts.append(
                    f"- {cell}, f = {fraction}: width {_fmt(width, data.scale)} vs "
                    f"{_fmt(narrowest, data.scale)} {'PASS' if width <= narrowest else 'FAIL'}; "
                    f"median error {_fmt(mean, data.scale)} ({_fmt(se, data.scale)}) vs "
                    f"{best}: {_verdict(mean, se)}"
                )
            whole = statistics.median(tallies[_label(Fraction(1), "replace")].widths)
            theirs = statistics.median(tallies["Drechsler et al."].widths)
            verdicts.append(
                f"- {cell}, interval at the full ε: ours {_fmt(whole, data.scale)} vs "
                f"Drechsler et al. {_fmt(theirs, data.scale)} "
                f"({'lead' if whole <= theirs else 'trail'})"
            )
    lines.append("")
    lines.append(
        "Goal (issue 27), same total ε and coverage, under replace: the interval no wider than "
        "the narrower PostRI split's; the median's mean error no larger than the more accurate "
        "split's (paired over the same data sets; s.e. of the difference)."
    )
    lines.extend(verdicts)
    if args.only != "randomization":
        lines.extend(population_main(args, datasets))
    lines.append(f"\n(elapsed {time.perf_counter() - started:.0f} s)")
    for line in lines:
        print(line)
    return lines


if __name__ == "__main__":  # pragma: no cover
    main()
