"""Whole-process speed and memory of the bounded jobs (issue 13), next to numpy baselines.

Run from the repository root (PipelineDP runs in ``--peer-python``, the benchmark venv, when it
can import ``pipeline_dp``; otherwise it is skipped with a note)::

    python -m benchmarks.jobs                  # 10^6 and 10^7 rows, ~10 minutes
    python -m benchmarks.jobs --quick          # 2·10^4 rows, one repeat (the smoke test)
    python -m benchmarks.jobs --rows 100000000 --repeats 1 --skip-peers   # 10^8 by hand

Data (generated into ``--data-dir``, reused when present): one Parquet file per size, row
groups of 2^20 rows: ``user_id`` int64 (~10 rows per unit, shuffled), ``value`` lognormal(0, 1)
float64, ``site`` text over 10^4 public candidates with P(rank k) ∝ 1/(k+1)^1.1.

Every measurement is a **separate process** timed from start to exit (interpreter start-up,
imports, reading, the release), with its peak resident memory (``ru_maxrss`` of the process
and its children, from ``wait4``); the table shows the median of ``--repeats`` runs, taken in
the same run of this script as the baselines:

* **the jobs**: ``python -m pipelines.quantiles --privacy_unit user_id --value value
  --quantiles 0.5 --lower 0 --upper 20`` (default ``--max_contributions 1``) and
  ``python -m pipelines.top_candidates --privacy_unit user_id --candidate site --candidates
  FILE`` (distinct units per site), on the DirectRunner in process, and optionally with
  ``--direct_running_mode multi_processing`` and on Dask (``--runners``);
* **(a) record level**: one process, pyarrow reads the needed column row group by row group,
  numpy ``bincount``s it (values onto the quantiles job's 10^6-point grid; sites onto their
  public positions) and takes the median cell (the most frequent site): not private, no
  bounding;
* **(b) bounding too**: the same, after numpy's sort-based per-unit uniform sampling (one
  ``lexsort`` of (unit, random priority), the first row of each unit) for quantiles, and
  ``np.unique`` over (unit, site) pairs (distinct units per site) for top candidates;
* **PipelineDP 0.3.1** on its BeamBackend (same in-process runner), bounding too
  (PERCENTILE(50) with ``max_contributions_per_partition=1``; COUNT over the public sites with
  ``max_partitions_contributed`` 10^4, ``max_contributions_per_partition=1``), on the
  ``--peer-rows`` file (its rate is flat in rows; 10^7 rows would take ~10 minutes).

It prints Markdown tables with the ratios against the baselines of the same run; it never
fails on a missed target.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "benchmarks" / "data"
PEER_PYTHON = "/work/benchvenv/bin/python"
ROW_GROUP = 1 << 20
NUM_CANDIDATES = 10**4
LOWER, UPPER, POINTS = 0.0, 20.0, 10**6

TARGET_RECORD_LEVEL = 0.25  # of baseline (a)
TARGET_BOUNDED = 0.5  # of baseline (b)
TARGET_PIPELINEDP = 100.0

JOBS = ("quantiles", "top_candidates")
RUNNERS = {
    "direct": [],
    "multi_processing": ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"],
    "dask": ["--runner", "apache_beam.runners.dask.dask_runner.DaskRunner"],
}


# --------------------------------------------------------------------------------- data


def make_data(directory: Path, rows: int) -> tuple[Path, Path]:
    """The Parquet file of ``rows`` rows and the public candidate file (both cached)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"jobs_{rows}.parquet"
    candidates = directory / "jobs_candidates.txt"
    labels = np.array([f"site-{i:05d}" for i in range(NUM_CANDIDATES)])
    if not candidates.exists():
        candidates.write_text("\n".join(labels) + "\n", encoding="utf-8")
    if path.exists():
        return path, candidates
    rng = np.random.default_rng(rows)
    weights = 1.0 / (np.arange(NUM_CANDIDATES) + 1.0) ** 1.1
    weights /= weights.sum()
    partial = path.with_suffix(".partial")
    writer = None
    units_total = math.ceil(rows / 10)
    units = rng.permutation(np.repeat(np.arange(units_total, dtype=np.int64), 10)[:rows])
    for start in range(0, rows, ROW_GROUP):
        stop = min(rows, start + ROW_GROUP)
        sites = rng.choice(NUM_CANDIDATES, size=stop - start, p=weights).astype(np.int32)
        table = pa.table(
            {
                "user_id": units[start:stop],
                "value": rng.lognormal(0.0, 1.0, stop - start),
                "site": pa.DictionaryArray.from_arrays(sites, pa.array(labels)).cast(pa.string()),
            }
        )
        if writer is None:
            writer = pq.ParquetWriter(partial, table.schema)
        writer.write_table(table, row_group_size=ROW_GROUP)
    assert writer is not None
    writer.close()
    partial.rename(path)
    return path, candidates


# ---------------------------------------------------------------------------- processes


@dataclass
class Timing:
    """Whole-process runs of one command."""

    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # user + system seconds, with children
    peak_rss: list[int] = field(default_factory=list)  # bytes
    failed: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.seconds) if self.seconds else math.nan

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu) if self.cpu else math.nan

    @property
    def rss(self) -> float:
        return statistics.median(self.peak_rss) if self.peak_rss else math.nan


def run_process(command: Sequence[str], cwd: Path, timeout: float) -> tuple[float, float, int, int]:
    """Wall seconds, CPU seconds and peak RSS (bytes) of the process and its waited-for
    children, and its exit status."""
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    start = time.perf_counter()
    process = subprocess.Popen(
        list(command), cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = start + timeout
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            process.kill()
            pid, status, usage = os.wait4(process.pid, 0)
            break
        time.sleep(0.005)
    seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode and process.stderr is not None:
        tail = process.stderr.read().decode("utf-8", "replace").strip().splitlines()[-1:]
        print(f"  ! {' '.join(command[:4])}... exited {process.returncode}: {tail}", flush=True)
    if process.stderr is not None:
        process.stderr.close()
    cpu = usage.ru_utime + usage.ru_stime
    return seconds, cpu, int(usage.ru_maxrss) * 1024, process.returncode


def measure(command: Sequence[str], cwd: Path, repeats: int, timeout: float) -> Timing:
    timing = Timing()
    for _ in range(repeats):
        seconds, cpu, rss, code = run_process(command, cwd, timeout)
        if code:
            timing.failed = f"exit {code}"
            return timing
        timing.seconds.append(seconds)
        timing.cpu.append(cpu)
        timing.peak_rss.append(rss)
    return timing


# ---------------------------------------------------------------------------- baselines

_RECORD_LEVEL = """
import sys
import numpy as np, pyarrow.parquet as pq, pyarrow.compute as pc, pyarrow as pa
path, job, candidates = sys.argv[1:4]
parquet = pq.ParquetFile(path)
if job == "quantiles":
    counts = np.zeros({points}, dtype=np.int64)
    scale = ({points} - 1) / ({upper} - {lower})
    for batch in parquet.iter_batches(columns=["value"], batch_size={group}):
        values = np.clip(batch.column(0).to_numpy(), {lower}, {upper})
        counts += np.bincount(((values - {lower}) * scale).astype(np.int64), minlength={points})
    int(np.searchsorted(np.cumsum(counts), counts.sum() / 2))
else:
    labels = pa.array(open(candidates, encoding="utf-8").read().split())
    counts = np.zeros(len(labels) + 1, dtype=np.int64)
    for batch in parquet.iter_batches(columns=["site"], batch_size={group}):
        at = pc.index_in(batch.column(0), value_set=labels).fill_null(len(labels)).to_numpy()
        counts += np.bincount(at, minlength=len(labels) + 1)
    int(np.argmax(counts[:-1]))
"""

_BOUNDED = """
import sys
import numpy as np, pyarrow.parquet as pq, pyarrow.compute as pc, pyarrow as pa
path, job, candidates = sys.argv[1:4]
table = pq.read_table(path, columns=["user_id", "value" if job == "quantiles" else "site"])
unit = table.column(0).to_numpy()
rng = np.random.default_rng()
if job == "quantiles":
    values = table.column(1).to_numpy()
    order = np.lexsort((rng.random(unit.size), unit))  # a uniform row of each unit
    first = np.ones(unit.size, dtype=bool)
    first[1:] = unit[order][1:] != unit[order][:-1]
    values = np.clip(values[order[first]], {lower}, {upper})
    scale = ({points} - 1) / ({upper} - {lower})
    counts = np.bincount(((values - {lower}) * scale).astype(np.int64), minlength={points})
    int(np.searchsorted(np.cumsum(counts), counts.sum() / 2))
else:
    labels = pa.array(open(candidates, encoding="utf-8").read().split())
    at = pc.index_in(table.column(1), value_set=labels).fill_null(len(labels)).to_numpy()
    pairs = np.unique(unit * np.int64(len(labels) + 1) + at)  # distinct (unit, site)
    counts = np.bincount(pairs % (len(labels) + 1), minlength=len(labels) + 1)
    int(np.argmax(counts[:-1]))
"""

_PIPELINEDP = """
import sys
import apache_beam as beam
import pipeline_dp
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
path, job, candidates = sys.argv[1:4]
labels = open(candidates, encoding="utf-8").read().split()
column = "value" if job == "quantiles" else "site"
extractors = pipeline_dp.DataExtractors(
    privacy_id_extractor=lambda row: row["user_id"],
    partition_extractor=(lambda row: 0) if job == "quantiles" else (lambda row: row["site"]),
    value_extractor=lambda row: row["value"] if job == "quantiles" else 0,
)
if job == "quantiles":
    params = pipeline_dp.AggregateParams(
        metrics=[pipeline_dp.Metrics.PERCENTILE(50)], noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        max_partitions_contributed=1, max_contributions_per_partition=1,
        min_value={lower}, max_value={upper})
    partitions = [0]
else:
    params = pipeline_dp.AggregateParams(
        metrics=[pipeline_dp.Metrics.COUNT], noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        max_partitions_contributed=len(labels), max_contributions_per_partition=1)
    partitions = labels
with beam.Pipeline(runner=FnApiRunner()) as pipeline:
    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=1.0, total_delta=0)
    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.BeamBackend())
    rows = pipeline | beam.io.ReadFromParquet(path, columns=["user_id", column])
    output = engine.aggregate(rows, params, extractors, public_partitions=partitions)
    accountant.compute_budgets()
    _ = output | beam.Map(lambda result: None)
"""


_AVRO_NATIVE = """
import sys
import numpy as np, polars as pl
path = sys.argv[1]
values = np.clip(pl.read_avro(path, columns=["value"]).to_series().to_numpy(), {lower}, {upper})
scale = ({points} - 1) / ({upper} - {lower})
counts = np.bincount(((values - {lower}) * scale).astype(np.int64), minlength={points})
int(np.searchsorted(np.cumsum(counts), counts.sum() / 2))
"""


def make_avro(directory: Path, rows: int, codec: str = "deflate") -> Path:
    """The first ``rows`` rows of the Parquet data as one Avro file (BigQuery-like unions)."""
    import fastavro
    import pyarrow.parquet as pq

    path = directory / f"jobs_{rows}_{codec}.avro"
    if path.exists():
        return path
    source, _ = make_data(directory, rows)
    schema = {
        "type": "record",
        "name": "Row",
        "fields": [
            {"name": "user_id", "type": ["null", "long"]},
            {"name": "value", "type": ["null", "double"]},
            {"name": "site", "type": ["null", "string"]},
        ],
    }
    partial = path.with_suffix(".partial")
    with partial.open("wb") as handle:
        records = (
            row
            for batch in pq.ParquetFile(source).iter_batches(batch_size=ROW_GROUP)
            for row in batch.to_pylist()
        )
        fastavro.writer(handle, schema, records, codec=codec)
    partial.rename(path)
    return path


def avro_section(args: argparse.Namespace, data: Path, tree: Path, out_root: Path) -> list[str]:
    """The quantiles job on one Avro file against a native read + numpy in one process."""
    rows = args.avro_rows
    # generated in a child process: a process started later by this one would otherwise
    # report this one's memory (the records made here) as part of its own peak RSS
    make = "import sys, pathlib, benchmarks.jobs as j; j.make_avro(pathlib.Path(sys.argv[1]), "
    make += "int(sys.argv[2]))"
    subprocess.run([sys.executable, "-c", make, str(data), str(rows)], cwd=ROOT, check=True)
    path = make_avro(data, rows)
    _, candidates = make_data(data, rows)
    baseline = measure(
        [sys.executable, "-c", _script(_AVRO_NATIVE), str(path)], tree, args.repeats, args.timeout
    )
    command = job_command("quantiles", path, candidates, out_root / "avro", "direct")
    ours = measure(command, tree, args.repeats, args.timeout)
    return [
        "",
        f"Avro: the quantiles job on one {rows:,}-record deflate Avro file (whole processes, "
        f"medians of {args.repeats}):",
        "",
        "| measurement | s | CPU s | rows/s | peak RSS MB |",
        "|---|---:|---:|---:|---:|",
        f"| quantiles job, --privacy_unit | {_cell(ours)} | {_cpu(ours)} | {_rate(rows, ours)} "
        f"| {_mb(ours)} |",
        f"| polars read_avro + numpy histogram + median | {_cell(baseline)} | {_cpu(baseline)} "
        f"| {_rate(rows, baseline)} | {_mb(baseline)} |",
        "",
        f"native baseline / job: {_ratio(baseline, ours):.2f} wall, "
        f"{_cpu_ratio(baseline, ours):.2f} CPU (target >= 0.5)",
    ]


def _script(template: str) -> str:
    return template.format(points=POINTS, lower=LOWER, upper=UPPER, group=ROW_GROUP)


def job_command(job: str, path: Path, candidates: Path, output: Path, runner: str) -> list[str]:
    common = ["--input", str(path), "--privacy_unit", "user_id", "--epsilon", "1"]
    common += ["--output", str(output), "--overwrite", *RUNNERS[runner]]
    if job == "quantiles":
        specific = ["--value", "value", "--quantiles", "0.5", "--lower", str(LOWER)]
        specific += ["--upper", str(UPPER)]
    else:
        specific = ["--candidate", "site", "--candidates", str(candidates)]
    return [sys.executable, "-m", f"pipelines.{job}", *common, *specific]


def peer_available(python: str) -> bool:
    if not python or not Path(python).exists():
        return False
    probe = subprocess.run(
        [python, "-c", "import pipeline_dp, apache_beam"], capture_output=True, check=False
    )
    return probe.returncode == 0


# ---------------------------------------------------------------------------------- main


def _rate(rows: int, timing: Timing) -> str:
    return "-" if timing.failed or not timing.seconds else f"{rows / timing.median:,.0f}"


def _cell(timing: Timing) -> str:
    return timing.failed or f"{timing.median:.2f}"


def _mb(timing: Timing) -> str:
    return "-" if timing.failed or not timing.peak_rss else f"{timing.rss / 2**20:,.0f}"


def _ratio(baseline: Timing, ours: Timing) -> float:
    if baseline.failed or ours.failed or not baseline.seconds or not ours.seconds:
        return math.nan
    return baseline.median / ours.median


def _cpu_ratio(baseline: Timing, ours: Timing) -> float:
    if baseline.failed or ours.failed or not baseline.cpu or not ours.cpu:
        return math.nan
    return baseline.cpu_median / max(ours.cpu_median, 1e-9)


def _cpu(timing: Timing) -> str:
    return timing.failed or f"{timing.cpu_median:.2f}"


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            cpu = next(
                (line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")),
                cpu,
            )
    except OSError:
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}, load {load}"


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repeat, no peers")
    parser.add_argument("--rows", type=int, nargs="+", default=[10**6, 10**7])
    parser.add_argument("--peer-rows", type=int, default=10**6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jobs", nargs="+", choices=JOBS, default=list(JOBS))
    parser.add_argument("--runners", nargs="+", choices=list(RUNNERS), default=["direct"])
    parser.add_argument("--skip-peers", action="store_true")
    parser.add_argument("--avro-rows", type=int, default=10**6, help="0 skips the Avro section")
    parser.add_argument("--peer-python", default=PEER_PYTHON)
    parser.add_argument("--tree", default=str(ROOT), help="source tree the jobs run from")
    parser.add_argument("--data-dir", default=str(DATA_DIR))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per process")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.peer_rows, args.repeats, args.skip_peers = [20_000], 20_000, 1, True
        args.avro_rows = 20_000
    return args


def main(argv: Sequence[str] | None = None) -> list[str]:
    """Run the benchmark; print (and return) its Markdown lines."""
    args = parse(argv)
    tree = Path(args.tree)
    data = Path(args.data_dir)
    lines = [
        f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC on {machine()}.",
        "",
        "Wall s and CPU s (user + system, children included) of whole processes; ratios are "
        "baseline / job (wall, and CPU in brackets).",
        "",
        "| job | rows | runner | job s | job CPU s | rows/s | peak RSS MB | (a) s | (a) CPU s "
        "| (a) MB | job/(a) | (b) s | (b) CPU s | (b) MB | job/(b) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(lines), flush=True)
    out_root = Path(tempfile.mkdtemp(prefix="beam_dp_jobs_bench_"))
    ours_at: dict[tuple[str, int], Timing] = {}
    try:
        for rows in args.rows:
            path, candidates = make_data(data, rows)
            for job in args.jobs:
                script_args = [str(path), job, str(candidates)]
                record = measure(
                    [sys.executable, "-c", _script(_RECORD_LEVEL), *script_args],
                    tree,
                    args.repeats,
                    args.timeout,
                )
                bounded = measure(
                    [sys.executable, "-c", _script(_BOUNDED), *script_args],
                    tree,
                    args.repeats,
                    args.timeout,
                )
                for runner in args.runners:
                    output = out_root / f"{job}_{rows}_{runner}"
                    command = job_command(job, path, candidates, output, runner)
                    ours = measure(command, tree, args.repeats, args.timeout)
                    if runner == "direct":
                        ours_at[(job, rows)] = ours
                    line = (
                        f"| {job} | {rows:,} | {runner} | {_cell(ours)} | {_cpu(ours)} | "
                        f"{_rate(rows, ours)} | {_mb(ours)} | {_cell(record)} | {_cpu(record)} | "
                        f"{_mb(record)} | {_ratio(record, ours):.2f} "
                        f"({_cpu_ratio(record, ours):.2f}) | {_cell(bounded)} | {_cpu(bounded)} | "
                        f"{_mb(bounded)} | {_ratio(bounded, ours):.2f} "
                        f"({_cpu_ratio(bounded, ours):.2f}) |"
                    )
                    print(line, flush=True)
                    lines.append(line)
        lines += [
            "",
            f"Targets at 10^7 rows: job/(a) >= {TARGET_RECORD_LEVEL}, job/(b) >= "
            f"{TARGET_BOUNDED} (whole processes, medians of {args.repeats}).",
        ]
        if args.avro_rows:
            lines += avro_section(args, data, tree, out_root)
        lines += peers(args, data, tree, ours_at, out_root)
    finally:
        shutil.rmtree(out_root, ignore_errors=True)
    print("\n".join(lines[-18:]), flush=True)
    return lines


def peers(
    args: argparse.Namespace,
    data: Path,
    tree: Path,
    ours_at: dict[tuple[str, int], Timing],
    out_root: Path,
) -> list[str]:
    """PipelineDP on its BeamBackend, like for like, against the jobs' best-measured rate."""
    if args.skip_peers:
        return ["", "PipelineDP: skipped (--skip-peers)."]
    if not peer_available(args.peer_python):
        return ["", f"PipelineDP: skipped ({args.peer_python} cannot import pipeline_dp)."]
    path, candidates = make_data(data, args.peer_rows)
    lines = [
        "",
        f"PipelineDP 0.3.1, BeamBackend on the in-process FnApiRunner, {args.peer_rows:,} rows, "
        "both bounding (one run each, whole process):",
        "",
        "| job | PipelineDP s | PipelineDP CPU s | PipelineDP rows/s | beam-dp rows/s (rows) "
        "| ratio (wall) | ratio (CPU per row) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for job in args.jobs:
        command = [args.peer_python, "-c", _script(_PIPELINEDP), str(path), job, str(candidates)]
        peer = measure(command, tree, 1, args.timeout)
        largest = max((rows for (name, rows) in ours_at if name == job), default=None)
        if peer.failed or largest is None:
            lines.append(f"| {job} | {peer.failed or '-'} | - | - | - | - | - |")
            continue
        ours = ours_at[(job, largest)]
        peer_rate = args.peer_rows / peer.median
        our_rate = largest / ours.median if ours.seconds else math.nan
        cpu_ratio = (peer.cpu_median / args.peer_rows) / (ours.cpu_median / largest)
        lines.append(
            f"| {job} | {peer.median:.1f} | {peer.cpu_median:.1f} | {peer_rate:,.0f} | "
            f"{our_rate:,.0f} ({largest:,}) | {our_rate / peer_rate:,.0f}x | {cpu_ratio:,.0f}x |"
        )
    lines.append(f"\nTarget: >= {TARGET_PIPELINEDP:.0f}x.")
    return lines


if __name__ == "__main__":
    main()
