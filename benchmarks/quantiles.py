"""Private quantiles (issue 4): accuracy, many quantiles, coarse-to-fine and throughput.

Run from the repository root, in the benchmark environment (peers installed)::

    PYTHONPATH=/work/main /work/bench-venv/bin/python -m benchmarks.quantiles   # ~25 minutes
    python -m benchmarks.quantiles --quick      # seconds; the smoke test runs this

Sections (``--only accuracy|many|refine|throughput`` runs one):

1. **accuracy**: median rank error at N = 10^6 lognormal(0, 1) values, bounds [0, 20],
   epsilon = 1, ``--runs`` runs (50): beam-dp's median (grid 10^6 points, the default; and
   10^5 points), diffprivlib's ``tools.median`` (continuous EM over the sorted data), PipelineDP's
   ``PERCENTILE(50)`` (PyDP quantile tree, LocalBackend) with 1 and with 10 contributions per
   unit, and beam-dp at 10 contributions per unit (equal bounds). The rank error of a released
   value ``v`` is ``dist(N/2, [#(x < v), #(x <= v)])`` over the clamped data.
2. **many**: the JointExp protocol (Gillenwater, Joseph, Kulesza 2021): n = 1000, epsilon = 1,
   bounds [-100, 100], m = 1..29 evenly spaced quantiles, N(0, 5) and U(-5, 5), ``--trials``
   (20) datasets each, add/remove; error = mean over quantiles of the misclassified points
   ``|#(x > q_true) - #(x > q_est)|``. JointExp (``benchmarks/jointexp.py``), beam-dp's
   recursive split and independent selections at epsilon/m, on a uniform 10^5-point grid.
3. **refine**: the coarse-to-fine option against single-pass grids, on dense (10^6 and 10^7
   lognormal) and sparse (10^3 normal) data.
4. **throughput**: the median of 10^7 rows read from a generated Parquet file
   (``benchmarks/data/``, gitignored) on the DirectRunner's in-process FnApiRunner (Beam 2.77's
   ``"DirectRunner"`` would first try Prism, which downloads a binary), without and with
   contribution bounding (10 rows per unit, ``max_contributions=10``), median of ``--repeats``
   (3) runs after a warm-up pipeline; a single-process
   numpy + pyarrow histogram of the same file; PipelineDP ``PERCENTILE(50)`` on its BeamBackend
   (same runner) on the first 10^6 rows.

Peers that are not importable are skipped with a note. The script prints Markdown tables
and PASS/FAIL against the issue's targets; it never fails.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from beam_dp.summaries.histogram import Grid, GridHistogram
from beam_dp.summaries.quantiles import (
    plan_cells,
    plan_quantiles,
    refine_grid,
    select_cells,
    select_quantiles,
)
from benchmarks.jointexp import joint_exp

EPSILON = 1.0
LOWER, UPPER = 0.0, 20.0
DATA_DIR = Path(__file__).resolve().parent / "data"
TARGET_P90_RANKS = 20
TARGET_JOINTEXP_RATIO = 1.5
TARGET_ROWS_PER_SECOND = 5e6
TARGET_BOUNDED_ROWS_PER_SECOND = 1e6
TARGET_PEER_RATIO = 300


# ----------------------------------------------------------------------------- helpers


def rank_error(sorted_values: np.ndarray, value: float, alpha: float = 0.5) -> float:
    """``dist(alpha N, [#(x < v), #(x <= v)])``: the distance from the target rank."""
    low = int(np.searchsorted(sorted_values, value, side="left"))
    high = int(np.searchsorted(sorted_values, value, side="right"))
    target = alpha * sorted_values.size
    return max(0.0, low - target, target - high)


def misclassified(sorted_values: np.ndarray, truth: np.ndarray, estimates: np.ndarray) -> float:
    """JointExp's metric: mean over quantiles of ``|#(x > true) - #(x > estimate)|``."""
    n = sorted_values.size
    above_true = n - np.searchsorted(sorted_values, truth, side="right")
    above_estimate = n - np.searchsorted(sorted_values, estimates, side="right")
    return float(np.abs(above_true - above_estimate).mean())


@dataclass
class Errors:
    """Rank errors of one method over runs."""

    name: str
    errors: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    bound: float | None = None
    note: str = ""

    def quantile(self, q: float) -> float:
        return float(np.quantile(self.errors, q)) if self.errors else math.nan

    @property
    def p90(self) -> float:
        return self.quantile(0.9)

    def row(self) -> str:
        if not self.errors:
            return f"| {self.name} | - | - | - | - | - | - | {self.note or 'skipped'} |"
        bound = "-" if self.bound is None else f"{self.bound:.1f}"
        return (
            f"| {self.name} | {len(self.errors)} | {np.mean(self.errors):.1f} | "
            f"{self.quantile(0.5):.1f} | {self.p90:.1f} | {max(self.errors):.0f} | {bound} | "
            f"{statistics.median(self.seconds):.3f} s {self.note} |"
        )


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = call()
    return result, time.perf_counter() - start


def versions() -> str:
    names = ["apache-beam", "numpy", "pyarrow", "diffprivlib", "pipeline-dp", "python-dp"]
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return ", ".join(found)


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


# ------------------------------------------------------------------------ 1. accuracy


def ours_median(
    values: np.ndarray, sorted_values: np.ndarray, runs: int, num_points: int, k: int = 1
) -> Errors:
    grid = Grid.uniform(LOWER, UPPER, num_points)
    histogram = grid.histogram(values)
    plan = plan_quantiles([0.5], epsilon=EPSILON, num_candidates=num_points, max_contributions=k)
    result = Errors(
        f"beam-dp, {num_points:,} points" + (f", {k} per unit" if k > 1 else ""),
        bound=plan.rank_error,
    )
    for _ in range(runs):
        selection, seconds = timed(lambda: select_quantiles(histogram, grid, plan))
        result.errors.append(rank_error(sorted_values, selection.values[0]))
        result.seconds.append(seconds)
    return result


def ours_refined(
    values: np.ndarray, sorted_values: np.ndarray, runs: int, coarse: int, fine: int
) -> Errors:
    grid = Grid.uniform(LOWER, UPPER, coarse)
    histogram = grid.histogram(values)
    cell_plan = plan_cells([0.5], epsilon=0.1 * EPSILON, num_cells=coarse - 1)
    plan = plan_quantiles(
        [0.5], epsilon=0.9 * EPSILON, num_candidates=fine, failure_probability=0.025
    )
    result = Errors(
        f"beam-dp coarse-to-fine {coarse:,} -> {fine:,}",
        bound=plan.rank_error + cell_plan.loss_bounds[0],
    )
    for _ in range(runs):

        def once() -> float:
            cells = select_cells(histogram, grid, cell_plan)
            fine_grid = refine_grid(grid, cells.cells, fine)
            return select_quantiles(fine_grid.histogram(values), fine_grid, plan).values[0]

        value, seconds = timed(once)
        result.errors.append(rank_error(sorted_values, value))
        result.seconds.append(seconds)
    return result


def diffprivlib_median(values: np.ndarray, sorted_values: np.ndarray, runs: int) -> Errors:
    result = Errors("diffprivlib tools.median")
    try:
        from diffprivlib.tools import median
    except ImportError:
        result.note = "diffprivlib not importable"
        return result
    for _ in range(runs):
        value, seconds = timed(lambda: median(values, epsilon=EPSILON, bounds=(LOWER, UPPER)))
        result.errors.append(rank_error(sorted_values, float(value)))
        result.seconds.append(seconds)
    return result


def pipelinedp_percentile(
    values: np.ndarray, sorted_values: np.ndarray, runs: int, per_unit: int
) -> Errors:
    result = Errors(f"PipelineDP PERCENTILE(50), {per_unit} per unit (Local)")
    try:
        import pipeline_dp
    except ImportError:
        result.note = "pipeline_dp not importable"
        return result
    units = np.repeat(np.arange(values.size // per_unit + 1), per_unit)[: values.size]
    rows = list(zip(units.tolist(), values.tolist(), strict=True))
    extractors = pipeline_dp.DataExtractors(
        privacy_id_extractor=lambda row: row[0],
        partition_extractor=lambda row: 0,
        value_extractor=lambda row: row[1],
    )
    params = pipeline_dp.AggregateParams(
        metrics=[pipeline_dp.Metrics.PERCENTILE(50)],
        noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        max_partitions_contributed=1,
        max_contributions_per_partition=per_unit,
        min_value=LOWER,
        max_value=UPPER,
    )
    for _ in range(runs):

        def once() -> float:
            accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=0)
            engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
            output = engine.aggregate(rows, params, extractors, public_partitions=[0])
            accountant.compute_budgets()
            ((_, metrics),) = list(output)
            return float(metrics.percentile_50)

        value, seconds = timed(once)
        result.errors.append(rank_error(sorted_values, value))
        result.seconds.append(seconds)
    return result


def accuracy(args: argparse.Namespace) -> list[str]:
    n = args.accuracy_n
    values = np.random.default_rng(args.seed).lognormal(0.0, 1.0, n)
    sorted_values = np.sort(np.clip(values, LOWER, UPPER))
    runs = args.runs
    rows = [
        ours_median(values, sorted_values, runs, args.points),
        ours_median(values, sorted_values, runs, max(2, args.points // 10)),
        ours_median(values, sorted_values, runs, args.points, k=10),
        diffprivlib_median(values, sorted_values, args.peer_runs),
        pipelinedp_percentile(values, sorted_values, args.pipelinedp_runs, per_unit=1),
        pipelinedp_percentile(values, sorted_values, args.peer_runs, per_unit=10),
    ]
    ours, _, ours_ten, diffprivlib_row, pdp_one, pdp_ten = rows
    lines = [
        f"### Median accuracy: N = {n:,} lognormal(0, 1), bounds [0, 20], epsilon = {EPSILON}",
        "",
        "Rank error = distance from N/2 to the released value's rank interval. `bound` is the",
        "release's `rank_error` (95%, excluding the grid-resolution term).",
        "",
        "| method | runs | mean | p50 | p90 | max | bound | time/run |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
        *[row.row() for row in rows],
        "",
    ]
    ratios = []
    for peer, mine in ((diffprivlib_row, ours), (pdp_one, ours), (pdp_ten, ours_ten)):
        if peer.errors and mine.errors:
            ratio = peer.p90 / max(mine.p90, 1e-9)
            ratios.append(f"{peer.name} p90 / {mine.name} p90 = {ratio:.2f}")
    lines += [f"- {line}" for line in ratios]
    lines.append(
        f"- Target p90 <= {TARGET_P90_RANKS} ranks (default grid): {ours.p90:.1f} "
        f"-> {verdict(ours.p90 <= TARGET_P90_RANKS)}"
    )
    return lines


# ------------------------------------------------------------------- 2. many quantiles


def many(args: argparse.Namespace) -> list[str]:
    rng = np.random.default_rng(args.seed + 1)
    grid = Grid.uniform(-100.0, 100.0, args.many_points)
    sizes = list(range(1, args.max_m + 1, args.m_step))
    totals: dict[str, list[float]] = {
        "jointexp": [],
        "joint": [],
        "recursive": [],
        "independent": [],
    }
    default: list[float] = []
    lines = [
        f"### Many quantiles: JointExp protocol (n = {args.many_n}, epsilon = {EPSILON}, "
        f"bounds [-100, 100], {args.trials} trials, add/remove, grid {args.many_points:,})",
        "",
        "Mean misclassified points per quantile; time per trial in brackets. The default",
        '(`split="auto"`) is the joint split for m >= 2 (one selection for m = 1).',
        "",
        "| data | m | JointExp | joint | recursive | independent eps/m | default / JointExp |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for distribution in ("gaussian", "uniform"):
        for m in sizes:
            quantiles = np.linspace(0, 1, m + 2)[1:-1]
            plans = {
                split: plan_quantiles(
                    quantiles.tolist(),
                    epsilon=EPSILON,
                    num_candidates=args.many_points,
                    split=split,
                )
                for split in ("joint", "recursive", "independent")
            }
            errors: dict[str, list[float]] = {name: [] for name in totals}
            seconds: dict[str, list[float]] = {name: [] for name in totals}
            for _ in range(args.trials):
                if distribution == "gaussian":
                    data = np.sort(rng.normal(0.0, 5.0, args.many_n))
                else:
                    data = np.sort(rng.uniform(-5.0, 5.0, args.many_n))
                truth = np.quantile(data, quantiles, method="lower")
                estimate, took = timed(
                    lambda d=data, q=quantiles: joint_exp(
                        d, q, lower=-100.0, upper=100.0, epsilon=EPSILON, rng=rng
                    )
                )
                errors["jointexp"].append(misclassified(data, truth, estimate))
                seconds["jointexp"].append(took)
                histogram = grid.histogram(data)
                for split, plan in plans.items():
                    selection, took = timed(
                        lambda p=plan, h=histogram: select_quantiles(h, grid, p)
                    )
                    errors[split].append(misclassified(data, truth, np.array(selection.values)))
                    seconds[split].append(took)
            means = {name: float(np.mean(errors[name])) for name in totals}
            for name in totals:
                totals[name].append(means[name])
            cells = " | ".join(
                f"{means[name]:.2f} ({np.median(seconds[name]):.3f} s)"
                for name in ("jointexp", "joint", "recursive", "independent")
            )
            default.append(
                means[plan_quantiles(quantiles.tolist(), epsilon=1.0, num_candidates=2).split]
            )
            ratio = default[-1] / max(means["jointexp"], 1e-9)
            lines.append(f"| {distribution} | {m} | {cells} | {ratio:.2f} |")
    overall = {name: float(np.mean(values)) for name, values in totals.items()}
    ratio = float(np.mean(default)) / overall["jointexp"]
    worst = max(d / max(j, 1e-9) for d, j in zip(default, totals["jointexp"], strict=True))
    wins = sum(r < i for r, i in zip(totals["recursive"], totals["independent"], strict=True))
    lines += [
        "",
        f"- Mean over all (data, m): JointExp {overall['jointexp']:.2f}, default "
        f"{np.mean(default):.2f}, joint {overall['joint']:.2f}, recursive "
        f"{overall['recursive']:.2f}, independent "
        f"{overall['independent']:.2f} misclassified points.",
        f"- default / JointExp = {ratio:.2f} overall (worst single setting: {worst:.2f}); "
        f"target <= {TARGET_JOINTEXP_RATIO} -> {verdict(ratio <= TARGET_JOINTEXP_RATIO)}",
        f"- recursive beats independent in {wins} of {len(totals['recursive'])} settings; "
        f"independent / recursive = {overall['independent'] / overall['recursive']:.2f} overall",
    ]
    return lines


# ----------------------------------------------------------------- 3. coarse to fine


def refine(args: argparse.Namespace) -> list[str]:
    lines = [
        "### Coarse-to-fine against single-pass grids (median, epsilon = 1, refine fraction 0.1)",
        "",
        "| data | method | runs | mean | p50 | p90 | max | bound | time/run |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    rng = np.random.default_rng(args.seed + 2)
    datasets = [
        rng.lognormal(0.0, 1.0, args.accuracy_n),
        rng.lognormal(0.0, 1.0, args.refine_n),
        rng.normal(5.0, 2.0, 1000),
    ]
    labels = [f"lognormal N={datasets[0].size:,}", f"lognormal N={datasets[1].size:,}"]
    for label, values in zip([*labels, "normal N=1,000"], datasets, strict=True):
        sorted_values = np.sort(np.clip(values, LOWER, UPPER))
        rows = [
            ours_median(values, sorted_values, args.runs, max(2, args.points // 10)),
            ours_median(values, sorted_values, args.runs, args.points),
            ours_refined(values, sorted_values, args.runs, args.coarse, args.points // 10),
        ]
        lines += [f"| {label} {row.row()}" for row in rows]
    return lines


# ----------------------------------------------------------------------- 4. throughput


def parquet_files(directory: Path, rows: int, peer_rows: int) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    big = directory / f"quantiles_{rows}.parquet"
    small = directory / f"quantiles_{rows}_head_{peer_rows}.parquet"
    if not big.exists() or not small.exists():
        rng = np.random.default_rng(2024)
        units = rng.permutation(np.repeat(np.arange(math.ceil(rows / 10)), 10)[:rows])
        table = pa.table({"unit": units.astype(np.int64), "value": rng.lognormal(0, 1, rows)})
        pq.write_table(table, big, row_group_size=1 << 20)
        pq.write_table(table.slice(0, peer_rows), small, row_group_size=1 << 17)
    return big, small


def beam_median(path: Path, rows: int, bounded: bool) -> float:
    import apache_beam as beam
    from apache_beam.io.parquetio import ReadFromParquetBatched
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from beam_dp.beam.quantiles import PrivateMedian

    columns = ["unit", "value"] if bounded else ["value"]
    start = time.perf_counter()
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        _ = (
            pipeline
            | ReadFromParquetBatched(str(path), columns=columns)
            | PrivateMedian.Globally(
                lower=LOWER,
                upper=UPPER,
                epsilon=EPSILON,
                unit_column="unit" if bounded else None,
                record_level=not bounded,
                max_contributions=10 if bounded else 1,
            )
            | beam.Map(lambda release: None)
        )
    return rows / (time.perf_counter() - start)


def numpy_histogram(path: Path, rows: int, num_points: int) -> float:
    import pyarrow.parquet as pq

    start = time.perf_counter()
    counts = np.zeros(num_points, dtype=np.int64)
    scale = (num_points - 1) / (UPPER - LOWER)
    for batch in pq.ParquetFile(path).iter_batches(columns=["value"], batch_size=1 << 20):
        values = np.clip(batch.column(0).to_numpy(), LOWER, UPPER)
        counts += np.bincount(((values - LOWER) * scale).astype(np.int64), minlength=num_points)
    int(np.searchsorted(np.cumsum(counts), counts.sum() / 2))  # the (non-private) median cell
    return rows / (time.perf_counter() - start)


def summaries_one_process(path: Path, rows: int, num_points: int) -> float:
    """beam-dp's own exact summary (Grid.slots + GridHistogram) and selection, no Beam."""
    import pyarrow.parquet as pq

    start = time.perf_counter()
    grid = Grid.uniform(LOWER, UPPER, num_points)
    histogram = GridHistogram(grid.num_slots)
    for batch in pq.ParquetFile(path).iter_batches(columns=["value"], batch_size=1 << 20):
        histogram.add_slots(grid.slots(batch.column(0).to_numpy()))
    plan = plan_quantiles([0.5], epsilon=EPSILON, num_candidates=num_points)
    select_quantiles(histogram, grid, plan)
    return rows / (time.perf_counter() - start)


def pipelinedp_beam(path: Path, rows: int, with_count: bool = False) -> float | None:
    try:
        import pipeline_dp
    except ImportError:
        return None
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    extractors = pipeline_dp.DataExtractors(
        privacy_id_extractor=lambda row: row["unit"],
        partition_extractor=lambda row: 0,
        value_extractor=lambda row: row["value"],
    )
    metrics = [pipeline_dp.Metrics.PERCENTILE(50)]
    if with_count:
        metrics.append(pipeline_dp.Metrics.COUNT)
    params = pipeline_dp.AggregateParams(
        metrics=metrics,
        noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        max_partitions_contributed=1,
        max_contributions_per_partition=10,
        min_value=LOWER,
        max_value=UPPER,
    )
    start = time.perf_counter()
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=0)
        engine = pipeline_dp.DPEngine(accountant, pipeline_dp.BeamBackend())
        data = pipeline | beam.io.ReadFromParquet(str(path))
        output = engine.aggregate(data, params, extractors, public_partitions=[0])
        accountant.compute_budgets()
        _ = output | beam.Map(lambda result: None)
    return rows / (time.perf_counter() - start)


def throughput(args: argparse.Namespace) -> list[str]:
    big, small = parquet_files(Path(args.data_dir), args.rows, args.peer_rows)
    beam_median(small, args.peer_rows, bounded=True)  # warm-up: imports, first pipeline
    ours = statistics.median(
        beam_median(big, args.rows, bounded=False) for _ in range(args.repeats)
    )
    bounded = statistics.median(
        beam_median(big, args.rows, bounded=True) for _ in range(args.repeats)
    )
    baseline = numpy_histogram(big, args.rows, args.points)
    summaries = summaries_one_process(big, args.rows, args.points)
    peer = peer_count = None
    if not args.skip_pipelinedp_beam:
        peer = pipelinedp_beam(small, args.peer_rows)
        peer_count = pipelinedp_beam(small, args.peer_rows, with_count=True)
    lines = [
        f"### Throughput: median of {args.rows:,} rows from Parquet (FnApiRunner, in process)",
        "",
        f"beam-dp pipelines: median of {args.repeats} timed runs after one warm-up pipeline; "
        "PipelineDP: one run each. Wall time of the whole pipeline (read, shuffle, select).",
        "",
        "| pipeline | rows | rows/s |",
        "|---|---:|---:|",
        f"| beam-dp PrivateMedian, record level (no bounding) | {args.rows:,} | {ours:,.0f} |",
        f"| beam-dp PrivateMedian, unit bounding (10 per unit) | {args.rows:,} | {bounded:,.0f} |",
        f"| beam-dp summary + selection, one process, no Beam | {args.rows:,} | {summaries:,.0f} |",
        f"| numpy + pyarrow bincount histogram, one process (not private, not exact at ties) | "
        f"{args.rows:,} | {baseline:,.0f} |",
    ]
    for label, rate in (("", peer), (" with COUNT alongside", peer_count)):
        if rate is None:
            lines.append(f"| PipelineDP PERCENTILE(50){label}, BeamBackend | - | skipped |")
        else:
            lines.append(
                f"| PipelineDP PERCENTILE(50){label}, BeamBackend, 10 per unit | "
                f"{args.peer_rows:,} | {rate:,.0f} |"
            )
    lines += [
        "",
        f"- no bounding: {ours / 1e6:.2f}M rows/s, target >= 5M -> "
        f"{verdict(ours >= TARGET_ROWS_PER_SECOND)}",
        f"- with bounding: {bounded / 1e6:.2f}M rows/s, target >= 1M -> "
        f"{verdict(bounded >= TARGET_BOUNDED_ROWS_PER_SECOND)}",
        f"- one-process references: beam-dp's exact summary {summaries / 1e6:.1f}M rows/s, a plain "
        f"bincount {baseline / 1e6:.1f}M rows/s (the Beam pipeline runs at "
        f"{ours / summaries:.0%} of the first)",
    ]
    if peer is not None and peer_count is not None:
        lines += [
            f"- beam-dp (no bounding) / PipelineDP PERCENTILE: {ours / peer:,.0f}x "
            f"({ours / peer_count:,.0f}x against PERCENTILE + COUNT); target >= "
            f"{TARGET_PEER_RATIO}x -> {verdict(ours / peer >= TARGET_PEER_RATIO)}",
            f"- like for like, both bounding contributions: {bounded / peer:,.0f}x "
            f"({bounded / peer_count:,.0f}x against PERCENTILE + COUNT)",
        ]
    return lines


# ------------------------------------------------------------------------------- main


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument(
        "--only", choices=["accuracy", "many", "refine", "throughput"], default=None
    )
    parser.add_argument("--seed", type=int, default=20260523)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--peer-runs", type=int, default=50)
    parser.add_argument(
        "--pipelinedp-runs", type=int, default=20, help="runs at 1 per unit (~17 s each)"
    )
    parser.add_argument("--accuracy-n", type=int, default=10**6)
    parser.add_argument("--points", type=int, default=10**6)
    parser.add_argument("--coarse", type=int, default=10**4)
    parser.add_argument("--refine-n", type=int, default=10**7)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--max-m", type=int, default=29)
    parser.add_argument("--m-step", type=int, default=1)
    parser.add_argument("--many-n", type=int, default=1000)
    parser.add_argument("--many-points", type=int, default=10**5)
    parser.add_argument("--rows", type=int, default=10**7)
    parser.add_argument("--peer-rows", type=int, default=10**6)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per Beam pipeline")
    parser.add_argument("--skip-pipelinedp-beam", action="store_true")
    parser.add_argument("--data-dir", default=str(DATA_DIR), help="where the Parquet files go")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs = args.peer_runs = args.pipelinedp_runs = 3
        args.accuracy_n, args.points, args.coarse, args.refine_n = 10**4, 10**4, 100, 10**4
        args.trials, args.max_m, args.m_step, args.many_points = 2, 3, 2, 10**4
        args.rows, args.peer_rows, args.repeats = 10**5, 10**3, 1
        args.skip_pipelinedp_beam = True
    return args


def main(argv: Sequence[str] | None = None) -> list[str]:
    """Run the benchmark and print (and return) its Markdown lines."""
    args = parse(argv)
    output = [
        f"Run {datetime.date.today().isoformat()} on {machine()}.",
        f"Versions: {versions()}.",
        "",
    ]
    print("\n".join(output), flush=True)
    sections = {"accuracy": accuracy, "many": many, "refine": refine, "throughput": throughput}
    for name, section in sections.items():
        if args.only in (None, name):
            start = time.perf_counter()
            lines = [*section(args), "", f"({name}: {time.perf_counter() - start:.0f} s)", ""]
            print("\n".join(lines), flush=True)
            output += lines
    return output


if __name__ == "__main__":
    main()
