"""Throughput of TopCandidates on Beam's DirectRunner (issue 3), next to numpy and PipelineDP.

Run from the repository root (PipelineDP is measured when it is importable, e.g. in the
benchmark venv; otherwise it is skipped)::

    python -m benchmarks.top_candidates            # 10^7 rows, 10^6 units, 10^4 candidates
    python -m benchmarks.top_candidates --quick    # tiny sizes, one repeat (the smoke test)

The benchmark writes a Parquet file into ``benchmarks/data/`` (gitignored; reused when it
exists): ``user_id`` (int64, 10^6 units, ~10 rows each, uniform) and ``site`` (a string
``site-00042`` drawn with P(rank k) ∝ 1/(k+1)^1.1 over 10^4 public candidates), in row groups of
2^20 rows. Then, on the same file:

* **numpy + pyarrow, one process**: read the row groups, map sites to candidate positions
  (``PublicIndex.lookup``, Arrow's hash lookup), and ``bincount`` (record-level counts); and
  the distinct-unit counts (deduplicate ``(unit, candidate)`` with ``np.unique``).
* **beam-dp on the DirectRunner** (its in-process FnApiRunner, one worker):
  ``ReadFromParquetBatched | TopCandidates.Globally`` *without* contribution bounding
  (``record_level=True``: record-level privacy, every row its own unit; no shuffle) and *with*
  it (``unit_column="user_id"``: row batches shuffled by the stable unit hash, deduplicated per
  unit; the score is the number of distinct units per site).
* **PipelineDP 0.3.1** ``DPEngine.aggregate`` with ``Metrics.COUNT`` per public partition
  (the sites) on its ``BeamBackend`` (same DirectRunner) and, for reference, its
  ``LocalBackend``, on the first ``--pipelinedp-rows`` rows (10^6 by default: at its speed
  10^7 rows would take half an hour) read from a Parquet file of those rows.

Rates are rows per second of wall time for the whole pipeline (construction, reading, the
release), from the best of ``--repeats`` runs (the median is printed too: a shared machine
adds noise). It prints a table and PASS/FAIL against the issue's targets; it never fails.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from beam_dp.batching import PublicIndex

DATA_DIR = Path(__file__).resolve().parent / "data"
SEED = 20240603
EPSILON = 1.0
ROW_GROUP = 1 << 20

# Issue 3 targets.
TARGET_SHARE_OF_NUMPY = 0.25  # without bounding, of the numpy rate
TARGET_BOUNDED_ROWS_PER_S = 1_000_000
TARGET_TIMES_PIPELINEDP = 300.0


@dataclass
class Sizes:
    rows: int
    units: int
    candidates: int
    pipelinedp_rows: int
    repeats: int


FULL = Sizes(rows=10**7, units=10**6, candidates=10**4, pipelinedp_rows=10**6, repeats=3)
QUICK = Sizes(rows=20_000, units=2_000, candidates=100, pipelinedp_rows=2_000, repeats=1)


@dataclass
class Measurement:
    """Wall times of repeated runs; rates use the best run (the machine may be shared)."""

    name: str
    rows: int
    times: list[float]
    note: str = ""

    @property
    def seconds(self) -> float:
        return min(self.times)

    @property
    def rate(self) -> float:
        return self.rows / self.seconds

    @property
    def median_rate(self) -> float:
        return self.rows / statistics.median(self.times)


def candidate_labels(num_candidates: int) -> list[str]:
    return [f"site-{i:05d}" for i in range(num_candidates)]


def generate(path: Path, rows: int, units: int, num_candidates: int, seed: int = SEED) -> Path:
    """Write the benchmark file (if it does not exist) and return its path."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    labels = pa.array(candidate_labels(num_candidates))
    # Zipf-like popularity over the candidates, P(rank k) ∝ 1 / (k + 1)**1.1: a few heavy
    # hitters and a long tail.
    weights = 1.0 / np.arange(1, num_candidates + 1) ** 1.1
    cumulative = np.cumsum(weights / weights.sum())
    tmp = path.with_suffix(".tmp")
    with pq.ParquetWriter(tmp, pa.schema([("user_id", pa.int64()), ("site", pa.string())])) as out:
        for start in range(0, rows, ROW_GROUP):
            n = min(ROW_GROUP, rows - start)
            user = rng.integers(0, units, n, dtype=np.int64)
            rank = np.minimum(
                np.searchsorted(cumulative, rng.random(n), side="right"), num_candidates - 1
            )
            out.write_table(
                pa.table({"user_id": user, "site": labels.take(pa.array(rank))}),
                row_group_size=ROW_GROUP,
            )
    os.replace(tmp, path)
    return path


def head(source: Path, path: Path, rows: int) -> Path:
    """The first ``rows`` rows of ``source`` as their own file (for PipelineDP)."""
    if path.exists():
        return path
    table = pq.read_table(source).slice(0, rows)
    pq.write_table(table, path.with_suffix(".tmp"), row_group_size=ROW_GROUP)
    os.replace(path.with_suffix(".tmp"), path)
    return path


def timed(repeats: int, run: Callable[[], Any]) -> tuple[list[float], Any]:
    """Wall times of ``repeats`` runs, and the last run's result."""
    times = []
    result = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return times, result


# --------------------------------------------------------------------------- numpy + pyarrow


def numpy_counts(path: Path, labels: list[str]) -> np.ndarray:
    """Rows per candidate (record-level scores), one process."""
    index = PublicIndex(labels)
    counts = np.zeros(len(labels), dtype=np.int64)
    for batch in pq.ParquetFile(path).iter_batches(batch_size=ROW_GROUP, columns=["site"]):
        positions = index.lookup(batch.column(0))
        counts += np.bincount(positions[positions >= 0], minlength=len(labels))
    return counts


def numpy_distinct_counts(path: Path, labels: list[str]) -> np.ndarray:
    """Distinct units per candidate (the bounded scores), one process."""
    index = PublicIndex(labels)
    keys = []
    for batch in pq.ParquetFile(path).iter_batches(batch_size=ROW_GROUP):
        positions = index.lookup(batch.column("site"))
        user = batch.column("user_id").to_numpy()
        known = positions >= 0
        keys.append(user[known] * len(labels) + positions[known])
    distinct = np.unique(np.concatenate(keys))
    return np.bincount(distinct % len(labels), minlength=len(labels))


# --------------------------------------------------------------------------- beam-dp


def _write_value(value: Any, path: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"{value}\n")


def _read_values(path: str) -> list[str]:
    with open(path, encoding="utf-8") as handle:
        return handle.read().split()


def beam_top_candidates(path: Path, labels: list[str], unit_column: str | None) -> str:
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from beam_dp.beam.selection import TopCandidates

    # Outputs are written to a file: a closure over a list would be pickled as a copy.
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        # The DirectRunner's in-process FnApiRunner (Beam 2.77's "DirectRunner" would first
        # try to download the Prism runner).
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            _ = (
                pipeline
                # Only the columns the transform uses, as the numpy baseline reads them.
                | beam.io.ReadFromParquetBatched(
                    str(path), columns=["site"] if unit_column is None else None
                )
                | TopCandidates.Globally(
                    candidate_column="site",
                    candidates=labels,
                    unit_column=unit_column,
                    record_level=unit_column is None,
                    epsilon=EPSILON,
                )
                | beam.Map(lambda release: release.value)
                | beam.Map(_write_value, out)
            )
        (chosen,) = _read_values(out)
    return chosen


# --------------------------------------------------------------------------- PipelineDP


def pipelinedp_available() -> bool:
    try:
        import pipeline_dp  # noqa: F401
    except ImportError:
        return False
    return True


def _pipelinedp_params(pipeline_dp: Any) -> Any:
    return pipeline_dp.AggregateParams(
        metrics=[pipeline_dp.Metrics.COUNT],
        noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        max_partitions_contributed=10,  # ~10 rows per unit in this data
        max_contributions_per_partition=1,  # count each unit once per site, like ours
    )


def _pipelinedp_extractors(pipeline_dp: Any) -> Any:
    return pipeline_dp.DataExtractors(
        privacy_id_extractor=lambda row: row["user_id"],
        partition_extractor=lambda row: row["site"],
        value_extractor=lambda row: 0,
    )


def pipelinedp_beam(path: Path, labels: list[str]) -> int:
    """DP COUNT per public partition on PipelineDP's BeamBackend; returns partitions out."""
    import apache_beam as beam
    import pipeline_dp
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=1e-6)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            rows = (
                pipeline
                | beam.io.ReadFromParquetBatched(str(path))
                | beam.FlatMap(lambda table: table.to_pylist())
            )
            engine = pipeline_dp.DPEngine(accountant, pipeline_dp.BeamBackend())
            result = engine.aggregate(
                rows,
                _pipelinedp_params(pipeline_dp),
                _pipelinedp_extractors(pipeline_dp),
                public_partitions=labels,
            )
            accountant.compute_budgets()
            _ = result | beam.combiners.Count.Globally() | beam.Map(_write_value, out)
        (counted,) = _read_values(out)
    return int(counted)


def pipelinedp_local(path: Path, labels: list[str]) -> int:
    """The same on PipelineDP's LocalBackend (plain Python iterables)."""
    import pipeline_dp

    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=1e-6)
    rows = (row for table in pq.ParquetFile(path).iter_batches() for row in table.to_pylist())
    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
    result = engine.aggregate(
        rows,
        _pipelinedp_params(pipeline_dp),
        _pipelinedp_extractors(pipeline_dp),
        public_partitions=labels,
    )
    accountant.compute_budgets()
    return sum(1 for _ in result)


# --------------------------------------------------------------------------- report


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main(argv: Sequence[str] | None = None) -> dict[str, Measurement]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--rows", type=int, help="rows in the file (default 10^7)")
    parser.add_argument("--units", type=int, help="distinct privacy units (default 10^6)")
    parser.add_argument("--candidates", type=int, help="public candidates (default 10^4)")
    parser.add_argument("--pipelinedp-rows", type=int, help="rows for PipelineDP (10^6)")
    parser.add_argument("--repeats", type=int, help="runs per measurement (median)")
    parser.add_argument("--skip-pipelinedp", action="store_true")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    rows = args.rows or sizes.rows
    units = args.units or sizes.units
    num_candidates = args.candidates or sizes.candidates
    pdp_rows = min(rows, args.pipelinedp_rows or sizes.pipelinedp_rows)
    repeats = args.repeats or sizes.repeats
    labels = candidate_labels(num_candidates)

    name = f"top_candidates_{rows}r_{units}u_{num_candidates}c.parquet"
    start = time.perf_counter()
    path = generate(args.data_dir / name, rows, units, num_candidates)
    print(f"data: {path} ({time.perf_counter() - start:.1f} s to generate or find)")
    print(f"machine: {machine()}; {rows:,} rows, {units:,} units, {num_candidates:,} candidates")

    results: dict[str, Measurement] = {}
    seconds, counts = timed(repeats, lambda: numpy_counts(path, labels))
    results["numpy"] = Measurement("numpy + pyarrow, rows per candidate", rows, seconds)
    seconds, distinct = timed(repeats, lambda: numpy_distinct_counts(path, labels))
    results["numpy_distinct"] = Measurement(
        "numpy + pyarrow, distinct units per candidate", rows, seconds
    )
    seconds, chosen = timed(repeats, lambda: beam_top_candidates(path, labels, None))
    results["beam"] = Measurement(
        "beam-dp DirectRunner, without bounding (record-level)",
        rows,
        seconds,
        f"chose {chosen}; true top {labels[int(np.argmax(counts))]}",
    )
    seconds, chosen = timed(repeats, lambda: beam_top_candidates(path, labels, "user_id"))
    results["beam_bounded"] = Measurement(
        "beam-dp DirectRunner, with bounding (distinct units)",
        rows,
        seconds,
        f"chose {chosen}; true top {labels[int(np.argmax(distinct))]}",
    )

    if args.skip_pipelinedp or not pipelinedp_available():
        print("PipelineDP: not importable here (or skipped); its rows are left out")
    else:
        small = head(path, args.data_dir / f"head_{pdp_rows}r_{name}", pdp_rows)
        seconds, partitions = timed(1, lambda: beam_top_candidates(small, labels, "user_id"))
        results["beam_bounded_small"] = Measurement(
            "beam-dp DirectRunner, with bounding, PipelineDP's rows", pdp_rows, seconds
        )
        seconds, partitions = timed(1, lambda: pipelinedp_beam(small, labels))
        results["pipelinedp_beam"] = Measurement(
            "PipelineDP 0.3.1 COUNT per partition, BeamBackend",
            pdp_rows,
            seconds,
            f"{partitions} partitions",
        )
        seconds, partitions = timed(1, lambda: pipelinedp_local(small, labels))
        results["pipelinedp_local"] = Measurement(
            "PipelineDP 0.3.1 COUNT per partition, LocalBackend",
            pdp_rows,
            seconds,
            f"{partitions} partitions",
        )

    print()
    print(f"| measurement | rows | best s | rows/s (best of {repeats}) | rows/s (median) | note |")
    print("|---|---:|---:|---:|---:|---|")
    for m in results.values():
        print(
            f"| {m.name} | {m.rows:,} | {m.seconds:.2f} | {m.rate:,.0f} | "
            f"{m.median_rate:,.0f} | {m.note} |"
        )
    print()
    share = results["beam"].rate / results["numpy"].rate
    print(
        f"without bounding: {share:.0%} of the numpy rate "
        f"(target >= {TARGET_SHARE_OF_NUMPY:.0%}): {verdict(share >= TARGET_SHARE_OF_NUMPY)}"
    )
    bounded = results["beam_bounded"].rate
    print(
        f"with bounding: {bounded:,.0f} rows/s (target >= {TARGET_BOUNDED_ROWS_PER_S:,}): "
        f"{verdict(bounded >= TARGET_BOUNDED_ROWS_PER_S)}; "
        f"{bounded / results['numpy_distinct'].rate:.0%} of numpy's distinct counts"
    )
    if "pipelinedp_beam" in results:
        theirs = results["pipelinedp_beam"].rate
        ratio = bounded / theirs
        print(
            f"with bounding vs PipelineDP on Beam: {ratio:,.0f}x "
            f"(target >= {TARGET_TIMES_PIPELINEDP:.0f}x): "
            f"{verdict(ratio >= TARGET_TIMES_PIPELINEDP)}; without bounding "
            f"{results['beam'].rate / theirs:,.0f}x; on PipelineDP's own {pdp_rows:,} rows "
            f"{results['beam_bounded_small'].rate / theirs:,.0f}x; PipelineDP LocalBackend "
            f"{results['pipelinedp_local'].rate:,.0f} rows/s"
        )
    return results


if __name__ == "__main__":
    main()
